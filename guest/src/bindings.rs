//! Types and imports generated from the one contract in `wit/`. The same generated types serve
//! the wasm component and the native build, so the logic has exactly one data model.

wit_bindgen::generate!({
    path: "../wit",
    world: "policy-module",
    additional_derives: [PartialEq, Eq],
});

pub use cubepod::controller::types::*;
pub use exports::cubepod::controller::policy::{
    CleanupOutput, PolicyInfo, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
};
