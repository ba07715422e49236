//! Host-side types and traits generated from the one contract in `wit/`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "policy-module",
    additional_derives: [PartialEq, Eq],
    // A call past its budget traps the guest (`RuntimeError::Budget`) instead of answering.
    imports: { "cubepod:controller/kube-client": trappable },
});

pub use cubepod::controller::types::*;
pub use exports::cubepod::controller::policy::{
    CleanupOutput, PolicyInfo, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
};
