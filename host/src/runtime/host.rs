//! What a guest can reach: [`HostState`], the data of every store, and the [`Linker`] that
//! wires the imports to it.
//!
//! Imports a policy may have:
//! - `cubepod:controller/kube-client` (and `types`): the only way out, implemented here. Every
//!   call passes [`Boundary::check`](crate::kube::boundary::Boundary::check) first, then goes
//!   to the [`Cluster`](crate::kube::Cluster) under a timeout.
//! - `wasi:cli/{environment,exit,stdin,stdout,stderr,terminal-*}` and
//!   `wasi:io/{error,poll,streams}`: Rust's std makes every `wasm32-wasip2` component import
//!   them (for `env::args`, `process::exit`, the panic message on stderr), so a policy could
//!   not be instantiated without them. They are backed by an empty [`WasiCtx`]: no
//!   environment, no arguments, no cwd, stdin empty, stdout discarded, and the last 2 KiB of
//!   stderr kept in memory and added to a trap's message (they hold a panic's message).
//!
//! Nothing else of WASI is linked: no filesystem, sockets, clocks or randomness (time and
//! randomness are inputs of the contract), so a component that imports them is refused at load
//! (see `module::check_contract`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::component::{HasData, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream, WasiCli, WasiCliView};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{OutputStream, StreamResult};

use super::bindings::{self, KubeError, RetryAfter};
use super::call::{CallContext, Effect, HostCallRecord, KubeCall};
use crate::kube::{ApiError, ApiErrorKind, BoxFuture, Cluster, Resource};

/// The WASI interfaces linked, by name without version (`wasi:cli/stdin`); any 0.2.x version.
pub(crate) const ALLOWED_WASI: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
];

/// How much of the guest's stderr is kept (the end of it): enough for a panic message.
const STDERR_TAIL: usize = 2048;

/// Instances, tables and memories a store may create: a component built by cargo has a few
/// core instances; these only stop a pathological one.
const MAX_INSTANCES: usize = 64;
const MAX_TABLES: usize = 64;
const MAX_MEMORIES: usize = 16;

/// The delay a guest is told to wait after a host call that timed out.
const TIMEOUT_RETRY_MS: u64 = 1000;
/// The delay for an Unavailable answer that did not say when to retry.
const UNAVAILABLE_RETRY_MS: u64 = 1000;

pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    use wasmtime_wasi::p2::bindings::cli;
    use wasmtime_wasi::p2::bindings::sync::io as sync_io;

    let mut linker = Linker::new(engine);
    bindings::PolicyModule::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;

    let l = &mut linker;
    let cli_view = <HostState as WasiCliView>::cli;
    cli::environment::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::exit::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::stdin::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::stdout::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::stderr::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::terminal_input::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::terminal_output::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::terminal_stdin::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::terminal_stdout::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    cli::terminal_stderr::add_to_linker::<HostState, WasiCli>(l, cli_view)?;
    wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<HostState, IoTable>(l, |s| {
        &mut s.table
    })?;
    sync_io::poll::add_to_linker::<HostState, IoTable>(l, |s| &mut s.table)?;
    sync_io::streams::add_to_linker::<HostState, IoTable>(l, |s| &mut s.table)?;
    Ok(linker)
}

/// `wasi:io` needs only the resource table.
struct IoTable;

impl HasData for IoTable {
    type Data<'a> = &'a mut ResourceTable;
}

/// The data of one store, that is of one call.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: StderrTail,
    pub(crate) limits: Limits,
    /// `None` for `describe`, which may make no cluster call.
    ctx: Option<CallContext>,
    pub(crate) effects: Vec<Effect>,
    pub(crate) host_calls: u32,
    pub(crate) calls: Vec<KubeCall>,
    started: Instant,
    in_host_calls: Duration,
}

impl HostState {
    pub(crate) fn new(ctx: Option<CallContext>, memory_limit: usize) -> Self {
        let stderr = StderrTail::default();
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            // Not linked at all; denied here as well in case that ever changes.
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stderr,
            limits: Limits::new(memory_limit),
            ctx,
            effects: Vec::new(),
            host_calls: 0,
            calls: Vec::new(),
            started: Instant::now(),
            in_host_calls: Duration::ZERO,
        }
    }

    /// Time the guest itself has run since the store was made.
    pub(crate) fn guest_time(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.in_host_calls)
    }

    /// The end of what the guest wrote to stderr (a panic message), if anything.
    pub(crate) fn stderr_tail(&self) -> Option<String> {
        let bytes = self.stderr.contents();
        // One line: it ends up in a log line and in the Sandbox's event.
        let text = String::from_utf8_lossy(&bytes)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        (!text.is_empty()).then_some(text)
    }

    /// Logs one `kube-client` call for [`GuestCall::calls`](super::GuestCall::calls).
    fn log<T>(
        &mut self,
        op: &'static str,
        namespace: &str,
        name: &str,
        manifest: Option<&str>,
        result: Result<T, KubeError>,
    ) -> Result<T, KubeError> {
        self.calls.push(KubeCall {
            op,
            namespace: namespace.to_string(),
            name: name.to_string(),
            manifest: manifest.map(str::to_string),
            result: result.as_ref().map(drop).map_err(Clone::clone),
        });
        result
    }

    fn observe(&self, record: HostCallRecord) {
        if let Some(observer) = self.ctx.as_ref().and_then(|c| c.observer.as_ref()) {
            observer(record);
        }
    }

    /// An `ensure-*`: create the object, AlreadyExists being success. On success the last
    /// effect is the object as the API returned it, or the manifest when it existed.
    fn ensure(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> Result<Ensured, KubeError> {
        let Some(object) = self.admit(resource, "create", namespace, name, Some(manifest))? else {
            // The boundary hands back the parsed manifest of every write it admits.
            return Err(KubeError::Refused(format!(
                "{resource} {namespace}/{name}: no manifest to create"
            )));
        };
        // Sent without a copy: the rare AlreadyExists parses the manifest again instead.
        match self.request(resource, "create", namespace, name, |cluster| {
            cluster.create(resource, namespace, object)
        })? {
            Ok(created) => {
                self.applied(resource, namespace, name, created);
                Ok(Ensured::Created)
            }
            Err(e) if e.is(ApiErrorKind::AlreadyExists) => {
                tracing::debug!(%resource, namespace, name, "already exists");
                // Recorded as the manifest: the cache learns that the object exists; the watch
                // brings its real state. The boundary admitted it a moment ago, and its verdict
                // depends on nothing else.
                let Some(Ok(Some(object))) = self.ctx.as_ref().map(|ctx| {
                    ctx.boundary
                        .check(resource, namespace, name, Some(manifest))
                }) else {
                    return Err(KubeError::Refused(format!(
                        "{resource} {namespace}/{name}: the manifest no longer passes the boundary"
                    )));
                };
                self.applied(resource, namespace, name, object);
                Ok(Ensured::Existed)
            }
            Err(e) => Err(kube_error(e)),
        }
    }

    /// A `delete-*`: NotFound is success.
    fn delete(&mut self, resource: Resource, namespace: &str, name: &str) -> Result<(), KubeError> {
        self.admit(resource, "delete", namespace, name, None)?;
        match self.request(resource, "delete", namespace, name, |cluster| {
            cluster.delete(resource, namespace, name)
        })? {
            Ok(()) => {}
            Err(e) if e.is(ApiErrorKind::NotFound) => {}
            Err(e) => return Err(kube_error(e)),
        }
        self.effects.push(Effect::Deleted {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
        Ok(())
    }

    /// The boundary's verdict on a call, and the count of calls.
    fn admit(
        &mut self,
        resource: Resource,
        verb: &'static str,
        namespace: &str,
        name: &str,
        manifest: Option<&str>,
    ) -> Result<Option<Value>, KubeError> {
        self.host_calls = self.host_calls.saturating_add(1);
        let Some(ctx) = &self.ctx else {
            return Err(KubeError::Refused(format!(
                "{verb} {resource} {namespace}/{name}: this export may not call the cluster"
            )));
        };
        ctx.boundary
            .check(resource, namespace, name, manifest)
            .map_err(|reason| {
                tracing::warn!(%resource, verb, namespace, name, %reason, "refused a policy's call");
                self.observe(HostCallRecord {
                    verb,
                    resource,
                    duration: Duration::ZERO,
                    result: "refused",
                    refused: true,
                });
                KubeError::Refused(reason)
            })
    }

    /// One request to the cluster, bounded by the host-call timeout; the outer error is the
    /// timeout (or the missing context), the inner one the API's answer.
    fn request<T, F>(
        &mut self,
        resource: Resource,
        verb: &'static str,
        namespace: &str,
        name: &str,
        send: F,
    ) -> Result<Result<T, ApiError>, KubeError>
    where
        F: for<'c> FnOnce(&'c dyn Cluster) -> BoxFuture<'c, Result<T, ApiError>>,
    {
        let Some(ctx) = self.ctx.clone() else {
            return Err(KubeError::Refused(format!(
                "{verb} {resource} {namespace}/{name}: this export may not call the cluster"
            )));
        };
        let started = Instant::now();
        let timeout = ctx.host_call_timeout;
        let answer = ctx.handle.block_on(async {
            // Made inside block_on: a tokio timer needs the runtime's context.
            tokio::time::timeout(timeout, send(ctx.cluster.as_ref())).await
        });
        let duration = started.elapsed();
        self.in_host_calls += duration;
        let result = match &answer {
            Ok(Ok(_)) => "ok",
            Ok(Err(e)) => e.kind.label(),
            Err(_) => "timeout",
        };
        self.observe(HostCallRecord {
            verb,
            resource,
            duration,
            result,
            refused: false,
        });
        answer.map_err(|_| {
            tracing::warn!(%resource, verb, namespace, name, ?timeout, "cluster did not answer a policy's call in time");
            KubeError::Retryable(RetryAfter {
                delay_ms: TIMEOUT_RETRY_MS,
                message: format!(
                    "{verb} {resource} {namespace}/{name}: the API server did not answer within {timeout:?}"
                ),
            })
        })
    }

    fn applied(&mut self, resource: Resource, namespace: &str, name: &str, object: Value) {
        self.effects.push(Effect::Applied {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
            object,
        });
    }

    /// The Pod's IP after an ensure: from the created object, or read back when it existed.
    fn pod_ip(&mut self, namespace: &str, name: &str, ensured: Ensured) -> Option<String> {
        let ip = |object: &Value| {
            object
                .pointer("/status/podIP")
                .and_then(Value::as_str)
                .filter(|ip| !ip.is_empty())
                .map(str::to_string)
        };
        if ensured == Ensured::Created {
            return match self.effects.last() {
                Some(Effect::Applied { object, .. }) => ip(object),
                _ => None,
            };
        }
        match self.request(Resource::Pod, "get", namespace, name, |cluster| {
            cluster.get(Resource::Pod, namespace, name)
        }) {
            Ok(Ok(object)) => {
                let found = ip(&object);
                // The real object is a better cache entry than the manifest.
                if let Some(Effect::Applied { object: last, .. }) = self.effects.last_mut() {
                    *last = object;
                }
                found
            }
            // The Pod exists (AlreadyExists said so); its IP is only unknown for now.
            Ok(Err(e)) => {
                tracing::debug!(namespace, name, error = %e, "cannot read back an existing Pod");
                None
            }
            Err(_) => None,
        }
    }
}

/// What an `ensure-*` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ensured {
    Created,
    Existed,
}

/// The API's answer in the contract's terms, the API's message kept.
fn kube_error(e: ApiError) -> KubeError {
    match e.kind {
        ApiErrorKind::NotFound => KubeError::NotFound(e.message),
        ApiErrorKind::AlreadyExists | ApiErrorKind::Conflict => KubeError::Conflict(e.message),
        ApiErrorKind::Invalid => KubeError::Invalid(e.message),
        ApiErrorKind::Unavailable => KubeError::Retryable(RetryAfter {
            delay_ms: e
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(UNAVAILABLE_RETRY_MS),
            message: e.message,
        }),
        ApiErrorKind::Forbidden
        | ApiErrorKind::Unauthorized
        | ApiErrorKind::Gone
        | ApiErrorKind::Other => KubeError::Other(e.message),
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::cubepod::controller::types::Host for HostState {}

impl bindings::cubepod::controller::kube_client::Host for HostState {
    fn ensure_pvc(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Result<(), KubeError> {
        let result = self
            .ensure(
                Resource::PersistentVolumeClaim,
                &namespace,
                &name,
                &manifest,
            )
            .map(drop);
        self.log("ensure-pvc", &namespace, &name, Some(&manifest), result)
    }

    fn delete_pvc(&mut self, namespace: String, name: String) -> Result<(), KubeError> {
        let result = self.delete(Resource::PersistentVolumeClaim, &namespace, &name);
        self.log("delete-pvc", &namespace, &name, None, result)
    }

    fn ensure_pod(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Result<Option<String>, KubeError> {
        let result = self
            .ensure(Resource::Pod, &namespace, &name, &manifest)
            .map(|ensured| self.pod_ip(&namespace, &name, ensured));
        self.log("ensure-pod", &namespace, &name, Some(&manifest), result)
    }

    fn delete_pod(&mut self, namespace: String, name: String) -> Result<(), KubeError> {
        let result = self.delete(Resource::Pod, &namespace, &name);
        self.log("delete-pod", &namespace, &name, None, result)
    }

    fn ensure_secret(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Result<(), KubeError> {
        let result = self
            .ensure(Resource::Secret, &namespace, &name, &manifest)
            .map(drop);
        self.log("ensure-secret", &namespace, &name, Some(&manifest), result)
    }

    fn delete_secret(&mut self, namespace: String, name: String) -> Result<(), KubeError> {
        let result = self.delete(Resource::Secret, &namespace, &name);
        self.log("delete-secret", &namespace, &name, None, result)
    }
}

/// [`StoreLimits`] that also remember when they refused a memory growth, so that the trap it
/// causes is reported as [`RuntimeError::MemoryExhausted`](super::RuntimeError::MemoryExhausted).
pub(crate) struct Limits {
    inner: StoreLimits,
    pub(crate) memory_refused: bool,
}

impl Limits {
    fn new(memory_limit: usize) -> Self {
        Self {
            inner: StoreLimitsBuilder::new()
                .memory_size(memory_limit)
                .instances(MAX_INSTANCES)
                .tables(MAX_TABLES)
                .memories(MAX_MEMORIES)
                // A refused growth traps instead of handing the guest a null pointer.
                .trap_on_grow_failure(true)
                .build(),
            memory_refused: false,
        }
    }
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let verdict = self.inner.memory_growing(current, desired, maximum);
        if !matches!(verdict, Ok(true)) {
            self.memory_refused = true;
        }
        verdict
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_refused = true;
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

/// The guest's stderr: every write succeeds (a policy that logs must not fail for it), and
/// only the last [`STDERR_TAIL`] bytes are kept.
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    fn contents(&self) -> Vec<u8> {
        match self.0.lock() {
            Ok(tail) => tail.iter().copied().collect(),
            Err(poisoned) => poisoned.into_inner().iter().copied().collect(),
        }
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    /// Only `wasi:cli@0.3` streams use this; that version is not linked.
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::sink())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StderrTail {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for StderrTail {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        let mut tail = self.0.lock().unwrap_or_else(|p| p.into_inner());
        tail.extend(bytes.iter().copied());
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}
