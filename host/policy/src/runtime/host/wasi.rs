//! The WASI a policy gets: only what Rust's std makes every `wasm32-wasip2` component import,
//! backed by an empty context, and the guest's stderr kept as a short tail.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream, WasiCli, WasiCliView};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{OutputStream, StreamResult};

use super::HostState;

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

pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::bindings::cli;
    // The async `wasi:io`: a call runs as a future on the runtime, where the sync bindings
    // would start a runtime of their own.
    use wasmtime_wasi_io::bindings::wasi::io;

    let l = linker;
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
    io::error::add_to_linker::<HostState, IoTable>(l, |s| &mut s.table)?;
    io::poll::add_to_linker::<HostState, IoTable>(l, |s| &mut s.table)?;
    io::streams::add_to_linker::<HostState, IoTable>(l, |s| &mut s.table)?;
    Ok(())
}

/// An empty context: no environment, arguments or cwd, stdin empty, stderr to `stderr`.
pub(super) fn context(stderr: &StderrTail) -> WasiCtx {
    WasiCtxBuilder::new()
        .stderr(stderr.clone())
        // Not linked at all; denied here as well in case that ever changes.
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .build()
}

/// `wasi:io` needs only the resource table.
struct IoTable;

impl HasData for IoTable {
    type Data<'a> = &'a mut ResourceTable;
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let stderr = &self.stderr;
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| context(stderr)),
            table: &mut self.table,
        }
    }
}

/// The guest's stderr: every write succeeds (a policy that logs must not fail for it), and
/// only the last [`STDERR_TAIL`] bytes are kept.
#[derive(Clone, Default)]
pub(super) struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    pub(super) fn contents(&self) -> Vec<u8> {
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
