//! Types and imports generated from the one contract in `wit/`. The same generated types serve
//! the wasm component and the native build, so the logic has exactly one data model.

// The export macro is public so that other policies (tests, examples/policies) can reuse these
// bindings and the default logic, and export their own component.
#![allow(clippy::crate_in_macro_def)]

wit_bindgen::generate!({
    path: "../wit",
    world: "policy-module",
    additional_derives: [PartialEq, Eq],
    pub_export_macro: true,
    default_bindings_module: "cubepod_guest::bindings",
});

pub use cubepod::controller::types::*;
pub use exports::cubepod::controller::policy::{
    CleanupOutput, PolicyInfo, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
};
