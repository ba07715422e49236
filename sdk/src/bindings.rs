//! Types and imports generated from the one contract in `wit/`. The same generated types serve
//! the wasm component and the native build, so the logic has exactly one data model.

// The export macro is public: every policy crate exports its component through these bindings
// (`export_policy!`).
#![allow(clippy::crate_in_macro_def)]

wit_bindgen::generate!({
    path: "../wit",
    world: "policy-module",
    additional_derives: [PartialEq, Eq],
    pub_export_macro: true,
    default_bindings_module: "cubepod_policy_sdk::bindings",
});

pub use cubepod::controller::types::*;
pub use exports::cubepod::controller::policy::{
    CleanupOutput, PolicyInfo, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
};
