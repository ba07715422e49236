//! Host-side types and traits generated from the contracts in `wit/`: the current one
//! (`wit/controller.wit`) at the top, the types the rest of the host works in, and each older
//! contract the host still runs in a module of its own, seen only by the runtime, which
//! converts to and from the current types at the call (`contract/v0_1.rs`).

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "policy-module",
    // `Hash`: the decision memo's key is the input's own encoding (`memo.rs`).
    additional_derives: [PartialEq, Eq, Hash],
    // A call past its budget traps the guest (`RuntimeError::Budget`) instead of answering.
    // Async: a policy's requests are awaited on the runtime's worker that runs the call, with
    // no thread to hand them to and back (see `call.rs`).
    imports: { "cubepod:controller/kube-client": async | trappable },
    exports: { default: async },
});

pub use cubepod::controller::types::*;
pub use exports::cubepod::controller::policy::{
    CleanupOutput, PolicyInfo, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
};

/// Contract 0.1.0, from the frozen `wit/0.1.0/`: what a module built against it imports and
/// exports.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1.0",
        world: "policy-module",
        additional_derives: [PartialEq, Eq],
        // As for the current contract: the same budget traps the guest the same way.
        imports: { "cubepod:controller/kube-client": async | trappable },
        exports: { default: async },
    });

    pub(crate) use cubepod::controller::types::*;
    pub(crate) use exports::cubepod::controller::policy::{
        CleanupOutput, PolicyInfo, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
    };
}
