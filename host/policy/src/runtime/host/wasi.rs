//! The WASI a policy gets: what Rust's std makes every `wasm32-wasip2` component import, backed
//! by an empty context, the guest's stdout and stderr kept together as a short tail; and, for the
//! runtimes of other languages (componentize-py, componentize-js), the rest of `wasi:cli/imports`
//! linked to stubs that give nothing away: no preopened directory, every socket refused, clocks
//! stopped at the epoch, randomness a fixed sequence, and waiting on a clock a trap.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream, WasiCli, WasiCliView};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{OutputStream, StreamResult};

use super::HostState;

/// The WASI interfaces linked and working, by name without version (`wasi:cli/stdin`); any
/// 0.2.x version.
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

/// The WASI interfaces linked to stubs that deny or fix what they would give: a module may
/// import them (language runtimes do, for `open`, `time.time()`, `os.urandom`), and anything it
/// learns from them is the same at every call.
pub(crate) const DENIED_WASI: &[&str] = &[
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// What `wasi:random` gives every call, cycled: fixed, so that a policy's decisions do not
/// depend on it (a policy holds no secret a guessable sequence would expose).
const RANDOM_BYTES: &[u8] = b"cubepod: a policy gets no randomness";

/// How much of the guest's stdout and stderr is kept (the end of it): enough for a panic
/// message, or the last frames and the exception of a Python traceback.
const OUTPUT_TAIL: usize = 2048;

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
    add_denied_to_linker(l)
}

/// The interfaces of [`DENIED_WASI`]. wasmtime-wasi's own implementations where the context
/// denies or fixes everything (no preopens, sockets off, fixed wall clock and random); the
/// monotonic clock is [`StoppedClock`], since wasmtime-wasi's would sleep in real time when
/// waited on, and a policy blocked in the host is not stopped by its deadline.
fn add_denied_to_linker(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::{clocks, filesystem, random, sockets};
    use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
    use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};

    clocks::wall_clock::add_to_linker::<HostState, WasiClocks>(l, HostState::clocks)?;
    clocks::monotonic_clock::add_to_linker::<HostState, StoppedClock>(l, |_| StoppedClock)?;
    random::random::add_to_linker::<HostState, WasiRandom>(l, HostState::random)?;
    random::insecure::add_to_linker::<HostState, WasiRandom>(l, HostState::random)?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(l, HostState::random)?;
    filesystem::preopens::add_to_linker::<HostState, WasiFilesystem>(l, HostState::filesystem)?;
    filesystem::types::add_to_linker::<HostState, WasiFilesystem>(l, HostState::filesystem)?;
    let network = sockets::network::LinkOptions::default();
    let view = HostState::sockets;
    sockets::network::add_to_linker::<HostState, WasiSockets>(l, &network, view)?;
    sockets::instance_network::add_to_linker::<HostState, WasiSockets>(l, view)?;
    sockets::tcp::add_to_linker::<HostState, WasiSockets>(l, view)?;
    sockets::tcp_create_socket::add_to_linker::<HostState, WasiSockets>(l, view)?;
    sockets::udp::add_to_linker::<HostState, WasiSockets>(l, view)?;
    sockets::udp_create_socket::add_to_linker::<HostState, WasiSockets>(l, view)?;
    sockets::ip_name_lookup::add_to_linker::<HostState, WasiSockets>(l, view)?;
    Ok(())
}

/// `wasi:clocks/monotonic-clock` stopped at 0: reading it is allowed (runtimes time their own
/// work), waiting on it traps, naming why.
struct StoppedClock;

impl HasData for StoppedClock {
    type Data<'a> = StoppedClock;
}

impl wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host for StoppedClock {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(0)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(1)
    }

    fn subscribe_instant(
        &mut self,
        _when: u64,
    ) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi_io::poll::DynPollable>> {
        Err(no_waiting())
    }

    fn subscribe_duration(
        &mut self,
        _duration: u64,
    ) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi_io::poll::DynPollable>> {
        Err(no_waiting())
    }
}

fn no_waiting() -> wasmtime::Error {
    wasmtime::Error::msg(
        "the policy waited on wasi:clocks/monotonic-clock (a sleep or a timeout): a policy gets \
         no clock to wait on; it is called again when something changes, or at the requeue it \
         returns",
    )
}

/// The epoch, always: a policy's time is the contract's `now`, an input.
struct EpochClock;

impl wasmtime_wasi::HostWallClock for EpochClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(1)
    }

    fn now(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// An empty context: no environment, arguments, cwd or preopened directory, stdin empty, stdout
/// and stderr to `output`, the wall clock at the epoch, randomness fixed, every socket refused.
pub(super) fn context(output: &OutputTail) -> WasiCtx {
    WasiCtxBuilder::new()
        .stdout(output.clone())
        .stderr(output.clone())
        .wall_clock(EpochClock)
        .secure_random(wasmtime_wasi::Deterministic::new(RANDOM_BYTES.to_vec()))
        .insecure_random(wasmtime_wasi::Deterministic::new(RANDOM_BYTES.to_vec()))
        .insecure_random_seed(0)
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
        let output = &self.output;
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| context(output)),
            table: &mut self.table,
        }
    }
}

/// The guest's stdout and stderr, interleaved as a terminal shows them: every write succeeds (a
/// policy that logs must not fail for it), and only the last [`OUTPUT_TAIL`] bytes are kept.
#[derive(Clone, Default)]
pub(super) struct OutputTail(Arc<Mutex<VecDeque<u8>>>);

impl OutputTail {
    pub(super) fn contents(&self) -> Vec<u8> {
        match self.0.lock() {
            Ok(tail) => tail.iter().copied().collect(),
            Err(poisoned) => poisoned.into_inner().iter().copied().collect(),
        }
    }
}

impl IsTerminal for OutputTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for OutputTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    /// Only `wasi:cli@0.3` streams use this; that version is not linked.
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::sink())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for OutputTail {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for OutputTail {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        let mut tail = self.0.lock().unwrap_or_else(|p| p.into_inner());
        tail.extend(bytes.iter().copied());
        let excess = tail.len().saturating_sub(OUTPUT_TAIL);
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
