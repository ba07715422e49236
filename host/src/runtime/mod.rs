//! The wasm runtime: one [`PolicyEngine`] (a wasmtime engine with an epoch ticker), policy
//! components loaded, checked against the contract and pre-instantiated as [`PolicyModule`]s,
//! and a call API that runs every export in a fresh, bounded store.
//!
//! The API is synchronous: a guest's `kube-client` calls block on the cluster through the
//! tokio [`Handle`](tokio::runtime::Handle) of the [`CallContext`], so call it from
//! `tokio::task::spawn_blocking` (or any thread outside the runtime), never from async code.
//!
//! The runtime's part of the boundary (docs/architecture.md, "Where each rule of the boundary
//! is enforced"):
//! - imports: only `kube-client`, whose every call passes
//!   [`Boundary::check`](crate::kube::boundary::Boundary::check) and the containment rules
//!   first, plus the few `wasi:cli`/`wasi:io` interfaces that Rust's std makes every
//!   `wasm32-wasip2` component import, backed by an empty WASI context (see `host/wasi.rs`);
//! - every call: a fresh store, an epoch deadline on guest time, a memory limit, and a timeout
//!   on each host call.

pub mod bindings;
mod cache;
mod call;
pub mod default_policy;
mod engine;
mod host;
mod module;

pub use call::{
    CallContext, ChildHeld, ChildLookup, Effect, GuestCall, HostCallObserver, HostCallRecord,
    KubeCall,
};
pub use default_policy::DEFAULT_POLICY;
pub use engine::{DEFAULT_MEMORY_MIB, PolicyEngine, RuntimeConfig, wasmtime_config};
pub use module::{PolicyModule, world_exports, world_imports};

use std::path::PathBuf;
use std::time::Duration;

/// The version of the `cubepod:controller` WIT package the host implements, read from the
/// `package` line of `wit/controller.wit` at build time.
pub const CONTRACT_VERSION: &str = env!("CUBEPOD_CONTRACT_VERSION");

/// The WIT package every policy imports from and exports to.
pub const CONTRACT_PACKAGE: &str = "cubepod:controller";

/// Why the runtime could not load a policy or finish a call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The guest trapped (a panic, an `unreachable`, a stack overflow, a failed
    /// instantiation...). The store is thrown away; the module stays usable.
    #[error("policy trapped in {export}: {message}")]
    Trap {
        export: &'static str,
        message: String,
    },
    /// The guest ran longer than the call deadline (time in host calls not counted).
    #[error("policy ran past its {deadline:?} deadline in {export}")]
    DeadlineExceeded {
        export: &'static str,
        deadline: Duration,
    },
    /// The guest tried to grow its memory past the limit.
    #[error("policy exceeded its memory limit of {limit} bytes in {export}")]
    MemoryExhausted { export: &'static str, limit: usize },
    /// The guest went past one of its fixed budgets (kube-client calls per call, and the
    /// reconcile core's output budgets): the call is failed and nothing after that point is
    /// carried out. The message names the budget and its bound.
    #[error("policy went past its budget: {0}")]
    Budget(String),
    /// The bytes are not a component wasmtime can compile (or the engine could not be set up).
    #[error("policy does not compile: {why}")]
    Compile { why: String },
    /// The component does not implement the `policy-module` world of this host's contract.
    #[error("policy breaks the contract cubepod:controller@{CONTRACT_VERSION}: {why}")]
    Contract { why: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl RuntimeError {
    /// The `reason` label of the guest-failure and policy-swap metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RuntimeError::Trap { .. } => "trap",
            RuntimeError::DeadlineExceeded { .. } => "timeout",
            RuntimeError::MemoryExhausted { .. } => "memory",
            RuntimeError::Budget(_) => "budget",
            RuntimeError::Compile { .. } => "compile",
            RuntimeError::Contract { .. } => "contract",
            RuntimeError::Io { .. } => "io",
        }
    }

    /// The export the failing call ran, for the errors that happen inside one.
    pub fn export(&self) -> Option<&'static str> {
        match self {
            RuntimeError::Trap { export, .. }
            | RuntimeError::DeadlineExceeded { export, .. }
            | RuntimeError::MemoryExhausted { export, .. } => Some(export),
            _ => None,
        }
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
