//! What a guest can reach: [`HostState`], the data of every store, and the [`Linker`] that
//! wires the imports to it. By concern: `kube_client` (the only way out), `wasi` (the few
//! WASI interfaces std needs) and `limits` (the store's memory and instance bounds).
//!
//! Imports a policy may have:
//! - `cubepod:controller/kube-client` (and `types`): the only way out (`kube_client`; a 0.1
//!   module's calls are handed to the same code by `contract/v0_1.rs`). Every call passes [`Boundary::check`](crate::containment::Boundary::check) first, then goes
//!   to the [`Cluster`](cubepod_kube::Cluster) under a timeout.
//! - `wasi:cli/{environment,exit,stdin,stdout,stderr,terminal-*}` and
//!   `wasi:io/{error,poll,streams}`: Rust's std makes every `wasm32-wasip2` component import
//!   them (for `env::args`, `process::exit`, the panic message on stderr), so a policy could
//!   not be instantiated without them. They are backed by an empty [`WasiCtx`]: no
//!   environment, no arguments, no cwd, stdin empty, and the last 2 KiB of stdout and stderr
//!   kept in memory and added to a trap's message (they hold a panic's message, a traceback).
//! - `wasi:{clocks,random,filesystem,sockets}/*`: the runtimes of Python and JavaScript import
//!   them, so they are linked, to stubs that give nothing away (`wasi::DENIED_WASI`): no
//!   preopened directory, every socket refused, the wall clock at the epoch and the monotonic
//!   clock at 0 (waiting on it traps), randomness a fixed sequence. Time and randomness are
//!   inputs of the contract; what a policy reads here is the same at every call.
//!
//! Nothing else is linked (`wasi:http`, for one), so a component that imports anything else is
//! refused at load (see `module::check_contract`).

mod kube_client;
mod limits;
mod wasi;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::WasiCtx;

use super::bindings;
use super::context::{CallContext, Effect, KubeCall};
use super::{Contract, RuntimeConfig};
use crate::containment::rates::Deferral;
use crate::containment::{Containment, SandboxScope};
pub(crate) use limits::Limits;
use wasi::OutputTail;
pub(crate) use wasi::{ALLOWED_WASI, DENIED_WASI};

/// The imports of a module of `contract`: its `kube-client`, and the same WASI. One linker per
/// version, so that a module links only to the interfaces of the contract it was checked for.
pub(crate) fn linker(engine: &Engine, contract: Contract) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    match contract {
        Contract::V0_1 => bindings::v0_1::PolicyModule::add_to_linker::<
            HostState,
            HasSelf<HostState>,
        >(&mut linker, |s| s)?,
        Contract::V0_2 => bindings::PolicyModule::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )?,
    }
    wasi::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// The data of one store, that is of one call.
pub(crate) struct HostState {
    /// Made at the guest's first WASI call: most calls make none (the default policy writes to
    /// stderr only when it panics), and building a context (its random generators seeded) is
    /// work for every call.
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    output: OutputTail,
    pub(crate) limits: Limits,
    /// `None` for `describe`, which may make no cluster call.
    ctx: Option<CallContext>,
    /// The Sandbox the call is for; `None` for the exports that get no cluster access.
    scope: Option<SandboxScope>,
    containment: Arc<Containment>,
    /// The longest one `kube-client` request may wait on the cluster: the engine's
    /// ([`RuntimeConfig::host_call_timeout`]), so that every call on it has the same bound.
    host_call_timeout: Duration,
    /// Set when the guest went past a budget: the trap it causes is reported as
    /// [`RuntimeError::Budget`](crate::runtime::RuntimeError::Budget) with this message.
    pub(crate) budget_exceeded: Option<String>,
    pub(crate) effects: Vec<Effect>,
    pub(crate) host_calls: u32,
    pub(crate) calls: Vec<KubeCall>,
    /// Writes past their Sandbox's rate, not sent (`--max-write-bytes-per-minute`).
    pub(crate) deferred: Option<Deferral>,
    /// Objects of a child's name that are not the call's Sandbox's (no controller reference to
    /// its uid), in words: never adopted, patched or deleted; told on the Sandbox.
    pub(crate) name_conflicts: Vec<String>,
    started: Instant,
    in_host_calls: Duration,
    /// Time the call spent yielded to the runtime's other tasks at epoch ticks, in nanoseconds:
    /// added by the yield's future, which runs outside the store and so cannot borrow it.
    yielded: Arc<AtomicU64>,
}

impl HostState {
    pub(crate) fn new(
        ctx: Option<CallContext>,
        scope: Option<SandboxScope>,
        config: &RuntimeConfig,
        budget: Arc<crate::runtime::budget::MemoryBudget>,
    ) -> Self {
        Self {
            wasi: None,
            table: ResourceTable::new(),
            output: OutputTail::default(),
            limits: Limits::new(config.memory_limit_bytes, budget),
            ctx,
            scope,
            containment: config.containment.clone(),
            host_call_timeout: config.host_call_timeout,
            budget_exceeded: None,
            effects: Vec::new(),
            host_calls: 0,
            calls: Vec::new(),
            deferred: None,
            name_conflicts: Vec::new(),
            started: Instant::now(),
            in_host_calls: Duration::ZERO,
            yielded: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Time the guest itself has held its thread since the store was made: not the time in
    /// host calls, nor the time other tasks ran while it was yielded. With many calls on few
    /// worker threads, each would otherwise be charged the others' time, and a policy that
    /// keeps well inside its deadline alone (as `policy test` runs it) would time out under
    /// load.
    pub(crate) fn guest_time(&self) -> Duration {
        let yielded = Duration::from_nanos(self.yielded.load(Ordering::Relaxed));
        self.started
            .elapsed()
            .saturating_sub(self.in_host_calls)
            .saturating_sub(yielded)
    }

    /// One yield to the runtime's other tasks, at an epoch tick; its time is not the guest's.
    pub(crate) fn yield_to_others(
        &self,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let yielded = self.yielded.clone();
        Box::pin(async move {
            let at = Instant::now();
            // Tokio's yield runs the other ready tasks and the I/O driver before this one
            // again; outside a runtime (`policy test`'s executor) it wakes at once.
            tokio::task::yield_now().await;
            let nanos = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
            yielded.fetch_add(nanos, Ordering::Relaxed);
        })
    }

    /// The end of what the guest wrote to stdout and stderr (a panic message, a traceback), if
    /// anything.
    pub(crate) fn output_tail(&self) -> Option<String> {
        let bytes = self.output.contents();
        // One line: it ends up in a log line and in the Sandbox's event.
        let text = String::from_utf8_lossy(&bytes)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        (!text.is_empty()).then_some(text)
    }
}
