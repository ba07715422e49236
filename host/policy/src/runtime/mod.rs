//! The wasm runtime: one [`PolicyEngine`] (a wasmtime engine with an epoch ticker), policy
//! components loaded, checked against the contract and pre-instantiated as [`PolicyModule`]s,
//! and a call API that runs every export in a fresh, bounded store.
//!
//! A call is a future (`reconcile_sandbox_async`, ...): the guest runs on a fiber of the task
//! that awaits it, its `kube-client` calls are awaited there, and past each epoch tick it
//! yields to the runtime's other tasks. The blocking forms (`reconcile_sandbox`, ...) drive
//! the same future on the [`CallContext`]'s runtime [`Handle`](tokio::runtime::Handle), for
//! `policy test`, the CLI and tests: call them outside the runtime's threads.
//!
//! Modules of every supported contract version run ([`Contract::SUPPORTED`]): the current one
//! on the host's own types, an older one through its own bindings, its inputs and outputs
//! converted at each call (`contract/v0_1.rs`) and its `kube-client` served by the same
//! implementation, so that the bounds and the boundary are one copy for every version.
//!
//! The runtime's part of the boundary (docs/architecture.md, "Where each rule of the boundary
//! is enforced"):
//! - imports: only `kube-client`, whose every call passes
//!   [`Boundary::check`](crate::containment::Boundary::check) and the containment rules
//!   first, plus the few `wasi:cli`/`wasi:io` interfaces that Rust's std makes every
//!   `wasm32-wasip2` component import, backed by an empty WASI context (see `host/wasi.rs`);
//! - every call: a fresh store, an epoch deadline on guest time, a memory limit, and a timeout
//!   on each host call.

// Generated from the WIT by bindgen: documented in `wit/`, not here.
#[allow(missing_docs)]
pub mod bindings;
pub mod budget;
mod cache;
mod call;
mod context;
mod contract;
pub mod default_policy;
mod engine;
mod functions;
mod host;
mod memo;
mod module;
#[cfg(test)]
mod timing;

pub use context::{
    CallContext, ChildHeld, ChildLookup, Effect, GuestCall, HostCallObserver, HostCallRecord,
    KubeCall,
};
pub use default_policy::DEFAULT_POLICY;
pub use engine::{
    AddressSpace, Compile, DEFAULT_MEMORY_MIB, Optimisations, PolicyEngine, RuntimeConfig, Tier,
    wasmtime_config,
};
pub use memo::{MemoBounds, MemoStats};
pub use module::{LoadTimes, PolicyModule, targeted_version};

use std::path::PathBuf;
use std::time::Duration;

/// The current version of the `cubepod:controller` WIT package, the host's own types and the
/// SDK's, read from the `package` line of `wit/controller.wit` at build time. Every version the
/// host runs is in [`Contract::SUPPORTED`].
pub const CONTRACT_VERSION: &str = env!("CUBEPOD_CONTRACT_VERSION");

/// The WIT package every policy imports from and exports to.
pub const CONTRACT_PACKAGE: &str = "cubepod:controller";

/// A version of the contract that the host runs modules of. The one list of them is
/// [`Contract::SUPPORTED`]; each version's number is read from its `wit/` file at build time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Contract {
    /// 0.1.0 (`wit/0.1.0/`, frozen): converted to and from the current one at every call.
    V0_1,
    /// The current contract (`wit/controller.wit`): the host's own types.
    V0_2,
}

impl Contract {
    /// What the host's own types and the SDK are.
    pub const CURRENT: Contract = Contract::V0_2;

    /// Every version the host runs, oldest first.
    pub const SUPPORTED: [Contract; 2] = [Contract::V0_1, Contract::V0_2];

    /// Its version number: `0.1.0`.
    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => env!("CUBEPOD_CONTRACT_0_1_VERSION"),
            Contract::V0_2 => CONTRACT_VERSION,
        }
    }

    /// The supported contract of that version number.
    pub fn of_version(version: &str) -> Option<Contract> {
        Self::SUPPORTED.into_iter().find(|c| c.version() == version)
    }

    /// The supported versions, for messages: `0.1.0 and 0.2.0`.
    pub fn supported_versions() -> String {
        let versions: Vec<&str> = Self::SUPPORTED.iter().map(|c| c.version()).collect();
        match versions.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// The imports of its `policy-module` world, as a component names them.
    pub fn world_imports(self) -> Vec<String> {
        ["types", "kube-client"]
            .iter()
            .map(|i| format!("{CONTRACT_PACKAGE}/{i}@{}", self.version()))
            .collect()
    }

    /// The exports of its `policy-module` world, as a component names them.
    pub fn world_exports(self) -> Vec<String> {
        vec![self.policy_interface()]
    }

    /// The interface a policy exports: `cubepod:controller/policy@0.2.0`.
    pub(crate) fn policy_interface(self) -> String {
        format!("{CONTRACT_PACKAGE}/policy@{}", self.version())
    }
}

impl std::fmt::Display for Contract {
    /// `cubepod:controller@0.1.0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{CONTRACT_PACKAGE}@{}", self.version())
    }
}

/// Why the runtime could not load a policy or finish a call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The guest trapped (a panic, an `unreachable`, a stack overflow, a failed
    /// instantiation...). The store is thrown away; the module stays usable.
    #[error("policy trapped in {export}: {message}")]
    Trap {
        /// The export that ran.
        export: &'static str,
        /// The trap, as wasmtime tells it.
        message: String,
    },
    /// The guest ran longer than the call deadline (time in host calls not counted).
    #[error("policy ran past its {deadline:?} deadline in {export}")]
    DeadlineExceeded {
        /// The export that ran.
        export: &'static str,
        /// The call deadline.
        deadline: Duration,
    },
    /// The guest tried to grow its memory past the limit.
    #[error("policy exceeded its memory limit of {limit} bytes in {export}")]
    MemoryExhausted {
        /// The export that ran.
        export: &'static str,
        /// The guest's memory limit, bytes.
        limit: usize,
    },
    /// The calls in flight together had spent the memory budget of all calls
    /// (`--calls-memory-budget`) when this one grew its memory or sent a manifest: the call
    /// fails, to be retried once others have ended.
    #[error(
        "the policy calls in flight had spent their memory budget of {budget} bytes in {export}"
    )]
    MemoryBudget {
        /// The export that ran.
        export: &'static str,
        /// The memory budget of all calls, bytes.
        budget: usize,
    },
    /// The guest went past one of its fixed budgets (kube-client calls per call, and the
    /// reconcile core's output budgets): the call is failed and nothing after that point is
    /// carried out. The message names the budget and its bound.
    #[error("policy went past its budget: {0}")]
    Budget(String),
    /// The bytes are not a component wasmtime can compile.
    #[error("policy does not compile: {why}")]
    Compile {
        /// wasmtime's error.
        why: String,
    },
    /// The wasm engine (its instance pool, its epoch ticker) could not be set up.
    #[error("cannot set up the wasm engine: {why}")]
    Engine {
        /// What failed.
        why: String,
    },
    /// The component does not implement the `policy-module` world of a contract this host
    /// runs. `contract` is the one it was checked against (`cubepod:controller@0.1.0`), or the
    /// unsupported one it targets.
    #[error("policy breaks the contract {contract}: {why}")]
    Contract {
        /// The contract: `cubepod:controller@0.2.0`.
        contract: String,
        /// What of it the component breaks.
        why: String,
    },
    /// Reading a policy file or the module cache failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error reading or writing it.
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
            RuntimeError::MemoryExhausted { .. } | RuntimeError::MemoryBudget { .. } => "memory",
            RuntimeError::Budget(_) => "budget",
            RuntimeError::Compile { .. } => "compile",
            RuntimeError::Engine { .. } => "engine",
            RuntimeError::Contract { .. } => "contract",
            RuntimeError::Io { .. } => "io",
        }
    }
}
