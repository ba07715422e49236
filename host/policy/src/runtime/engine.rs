//! One wasmtime [`Engine`] for every policy, with epoch interruption and a ticker thread that
//! advances the epoch, and the [`Linker`] that gives a policy its imports.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, Strategy};

use super::budget::{
    DEFAULT_CALLS_MEMORY_BUDGET_MIB, GUEST_MEMORY_CHARGE, MANIFEST_PARSE_CHARGE, MemoryBudget,
};
use super::functions::CompiledFunctions;
use super::host::{self, HostState};
use super::memo::MemoBounds;
use super::{Contract, RuntimeError};
use crate::containment::Containment;

/// How the runtime bounds and caches policies.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// How often the epoch advances: the granularity of [`Self::call_deadline`], and how
    /// often a guest that runs on yields to the runtime's other tasks.
    pub epoch_tick: Duration,
    /// The longest a guest may run in one call: time spent in host calls, and yielded to the
    /// runtime's other tasks, not counted.
    pub call_deadline: Duration,
    /// The most one linear memory of a guest may grow to.
    pub memory_limit_bytes: usize,
    /// The longest one `kube-client` request may wait on the cluster (`--host-call-timeout`):
    /// epochs do not interrupt a guest blocked in a host call, so this bounds it instead. Each
    /// request of every call on this engine reads it here, so that the controller, its hot-swap
    /// self-test and `policy test` wait alike.
    pub host_call_timeout: Duration,
    /// Where compiled components are kept across restarts (`<digest>-<engine>.cwasm`); `None`
    /// compiles every load. Created 0700; not used (compiled in memory) when it is a symlink,
    /// another user owns it, or its group or others may write it.
    pub cache_dir: Option<PathBuf>,
    /// Policy calls that may run at once (each has its own store and instance). Instances come
    /// from a pool of this many slots, set up once: no mmap and munmap of a linear memory per
    /// call. A call beyond it fails and is retried like any failed reconcile.
    pub max_concurrent_calls: u32,
    /// What a call may write and its per-call budgets: with the engine, so that the
    /// controller, its hot-swap self-test and `policy test` apply the same rules.
    pub containment: Arc<Containment>,
    /// How a call's linear memory is laid out in the address space.
    pub address_space: AddressSpace,
    /// What all calls in flight together may charge (`--calls-memory-budget`): guest memory
    /// and the host's copies of it, and the manifests the host parses. At least
    /// [`Self::call_charge_bound`], so that one call at its bounds can always run.
    pub calls_memory_budget_bytes: usize,
    /// What each module's decision memo may keep (`memo.rs`): answers of `reconcile-sandbox`
    /// calls that made no `kube-client` call, handed back for the same input.
    pub memo: MemoBounds,
    /// Which compiler builds a module that the precompiled cache does not hold.
    pub compile: Compile,
}

/// Which compiler builds a module that the precompiled cache does not hold. Both builds run
/// the same module to the same answers, under the same deadline, memory bound and budget; they
/// differ in how long the compile takes and how fast the code runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compile {
    /// Cranelift alone: the module serves once its optimised build is ready.
    #[default]
    Optimised,
    /// Winch first, Cranelift behind it: the module serves as soon as Winch's baseline build
    /// (about 8 times faster to compile, about 2 times slower to run) has loaded, and its
    /// Cranelift build, compiled on a thread of its own and written to the precompiled cache,
    /// replaces it between calls when ready. Where Winch is not a supported compiler (on
    /// x86_64 only), the same as [`Compile::Optimised`].
    Tiered,
    /// Winch's build alone, never replaced: what [`Compile::Tiered`] serves first, for tests
    /// that must hold on it (the containment suite runs on both builds).
    Baseline,
}

/// Which build of a module serves its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Winch's: compiled in one pass, no optimisation.
    Baseline,
    /// Cranelift's.
    Optimised,
}

impl Tier {
    /// The tier in words, for logs: `baseline (Winch)`.
    pub fn describe(self) -> &'static str {
        match self {
            Tier::Baseline => "baseline (Winch)",
            Tier::Optimised => "optimised (Cranelift)",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tier::Baseline => "baseline",
            Tier::Optimised => "optimised",
        })
    }
}

impl RuntimeConfig {
    /// What one call charges the calls' budget with its linear memory at its bound and its
    /// every `kube-client` call sending a manifest at its bound: what the budget must hold for
    /// a call to be sure to run.
    pub fn call_charge_bound(&self) -> usize {
        let manifests = self
            .containment
            .max_manifest_bytes
            .saturating_mul(MANIFEST_PARSE_CHARGE)
            .saturating_mul(self.containment.max_kube_calls as usize);
        memory_slot_bytes(self)
            .saturating_mul(GUEST_MEMORY_CHARGE)
            .saturating_add(manifests)
    }
}

/// How each slot of the instance pool lays out a linear memory (`--guest-address-space`). The
/// two run the same policy to the same answers, under the same memory bound; they differ in
/// how an out-of-bounds access is caught, and so in the address space they reserve.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AddressSpace {
    /// 4 GiB reserved per memory, and a guard region after it: a 32-bit address cannot leave
    /// the reservation, so the compiled code checks no bounds. About 4 GiB of address space
    /// per memory slot, two slots per concurrent call (72 GiB at `--concurrency 1`).
    #[default]
    Guarded,
    /// Only the memory bound (`--guest-memory-mib`) reserved per memory, no guard region: the
    /// compiled code checks each access's bounds (slower guest code, the same answers). For a
    /// host that caps the address space (`ulimit -v`, `RLIMIT_AS`), and for tools that cannot
    /// map a large reservation (valgrind, which the benchmark counts instructions with).
    Compact,
}

/// The default memory bound of one call, in MiB (`--guest-memory-mib`). What one call may add
/// to the controller's RSS while it runs: 32 MiB keeps the worst of the hostile test policy's
/// oversized outputs under twice the controller's idle RSS, and leaves the default policy
/// four times what its largest call takes (a reaper page: under 8 MiB).
pub const DEFAULT_MEMORY_MIB: u32 = 32;

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(10),
            call_deadline: Duration::from_secs(1),
            memory_limit_bytes: (DEFAULT_MEMORY_MIB as usize) << 20,
            host_call_timeout: Duration::from_secs(10),
            cache_dir: None,
            max_concurrent_calls: 32,
            containment: Arc::new(Containment::default()),
            address_space: AddressSpace::default(),
            calls_memory_budget_bytes: (DEFAULT_CALLS_MEMORY_BUDGET_MIB as usize) << 20,
            memo: MemoBounds::default(),
            compile: Compile::default(),
        }
    }
}

/// The engine every policy module is compiled for and runs on. Cheap to clone; the epoch
/// ticker stops when the last clone (and the last [`PolicyModule`](super::PolicyModule), which
/// holds one) is dropped.
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    /// The linker of each contract version.
    linker: Linker<HostState>,
    linker_0_1: Linker<HostState>,
    config: RuntimeConfig,
    budget: Arc<MemoryBudget>,
    /// Cranelift's compiled functions, found again by the next compile.
    functions: Arc<CompiledFunctions>,
    /// The engine of Winch's builds ([`Compile::Tiered`], [`Compile::Baseline`]): its own
    /// wasmtime engine (the two compilers' code calls by different conventions) and linkers,
    /// the same settings and the same memory budget.
    baseline: Option<PolicyEngine>,
    /// Held by each Cranelift compile: one at a time, so that a background compile takes one
    /// core, and each finds the functions of the one before (`functions.rs`).
    compiling: Mutex<()>,
    /// What became of the background compiles.
    optimised: Mutex<Optimisations>,
    _ticker: Ticker,
}

/// What became of the Cranelift builds compiled behind a baseline one ([`Compile::Tiered`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Optimisations {
    /// Builds that replaced their module's baseline build.
    pub applied: u64,
    /// Builds of a module no longer loaded (dropped by a later swap) when they were ready, or
    /// before they began: thrown away.
    pub dropped: u64,
    /// Builds that failed: their module's baseline build, admitted, keeps serving.
    pub failed: u64,
}

impl PolicyEngine {
    /// An engine of these settings; an error if the calls' memory budget cannot hold one call.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        // One budget for the calls of both compilers' builds.
        let budget = MemoryBudget::new(config.calls_memory_budget_bytes);
        let baseline = match config.compile {
            Compile::Optimised => None,
            Compile::Tiered | Compile::Baseline if !WINCH_SUPPORTED => None,
            Compile::Tiered | Compile::Baseline => Some(Self::with(
                config.clone(),
                Strategy::Winch,
                budget.clone(),
                None,
            )?),
        };
        Self::with(config, Strategy::Cranelift, budget, baseline)
    }

    /// An engine of one compiler, charging `budget`, with the engine of Winch's builds when
    /// modules are compiled by it first.
    fn with(
        mut config: RuntimeConfig,
        strategy: Strategy,
        budget: Arc<MemoryBudget>,
        baseline: Option<PolicyEngine>,
    ) -> Result<Self, RuntimeError> {
        // A zero tick would spin the ticker thread.
        config.epoch_tick = config.epoch_tick.max(Duration::from_millis(1));
        let bound = config.call_charge_bound();
        if config.calls_memory_budget_bytes < bound {
            return Err(RuntimeError::Engine {
                why: format!(
                    "the calls' memory budget of {} MiB cannot hold one call at its bounds \
                     ({} MiB: {GUEST_MEMORY_CHARGE} x --guest-memory-mib, and \
                     {MANIFEST_PARSE_CHARGE} x --max-manifest-bytes per --max-kube-calls); \
                     raise --calls-memory-budget or lower those",
                    config.calls_memory_budget_bytes >> 20,
                    bound.div_ceil(1 << 20),
                ),
            });
        }
        let functions = Arc::new(CompiledFunctions::default());
        let mut wasm = wasmtime_config(&config);
        wasm.strategy(strategy);
        if strategy == Strategy::Winch {
            // Winch's build serves for the seconds its Cranelift build takes (or, in tests,
            // alone): its instances are allocated on demand rather than from a second pool,
            // which would reserve as much address space again. Its memories are laid out and
            // bounded as the pool's are (`wasmtime_config`).
            wasm.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
        } else {
            if config.compile == Compile::Tiered && WINCH_SUPPORTED {
                // Cranelift compiles behind a serving build here: on one core, leaving the
                // others to the calls, to the next swap's admission and to its self-test.
                wasm.parallel_compilation(false);
            }
            wasm.enable_incremental_compilation(functions.clone())
                .map_err(|e| RuntimeError::Engine {
                    why: format!("cannot keep compiled functions: {e:#}"),
                })?;
        }
        let engine = Engine::new(&wasm).map_err(|e| RuntimeError::Engine {
            why: match config.address_space {
                AddressSpace::Guarded => format!(
                    "{e:#} (the instance pool reserves about 4 GiB of address space per memory \
                     slot; where the address space is capped, --guest-address-space=compact \
                     reserves only the memory bound)"
                ),
                AddressSpace::Compact => format!("{e:#}"),
            },
        })?;
        let link = |contract| {
            host::linker(&engine, contract).map_err(|e| RuntimeError::Engine {
                why: format!("cannot link the host's imports of {contract}: {e:#}"),
            })
        };
        let linker = link(Contract::V0_2)?;
        let linker_0_1 = link(Contract::V0_1)?;
        let ticker = Ticker::start(engine.clone(), config.epoch_tick)?;
        Ok(Self {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                linker_0_1,
                config,
                budget,
                functions,
                baseline,
                compiling: Mutex::new(()),
                optimised: Mutex::new(Optimisations::default()),
                _ticker: ticker,
            }),
        })
    }

    /// The settings it runs with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The functions its compiles keep for the next.
    pub(crate) fn functions(&self) -> &CompiledFunctions {
        &self.inner.functions
    }

    /// The engine of Winch's builds, when modules are compiled by it first.
    pub(crate) fn baseline(&self) -> Option<&PolicyEngine> {
        self.inner.baseline.as_ref()
    }

    /// Taken by each Cranelift compile (see [`EngineInner::compiling`]).
    pub(crate) fn compile_lock(&self) -> MutexGuard<'_, ()> {
        // Guards no data: a panicked compile leaves nothing torn.
        self.inner
            .compiling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// What became of the Cranelift builds compiled behind baseline ones.
    pub fn optimisations(&self) -> Optimisations {
        *self
            .inner
            .optimised
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Counts what became of a background build.
    pub(crate) fn count_optimisation(&self, count: impl FnOnce(&mut Optimisations)) {
        count(
            &mut self
                .inner
                .optimised
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
    }

    /// The memory budget every call of this engine charges.
    pub fn memory_budget(&self) -> &Arc<MemoryBudget> {
        &self.inner.budget
    }

    /// The linker of modules of `contract`.
    pub(crate) fn linker(&self, contract: Contract) -> &Linker<HostState> {
        match contract {
            Contract::V0_1 => &self.inner.linker_0_1,
            Contract::V0_2 => &self.inner.linker,
        }
    }
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Whether Winch is a supported (tier 1) compiler here: on x86_64 only. Elsewhere
/// [`Compile::Tiered`] compiles with Cranelift alone.
const WINCH_SUPPORTED: bool = cfg!(target_arch = "x86_64");

/// The wasmtime configuration of the runtime's engine (public for the decision benchmark, which
/// measures bare stores on it).
pub fn wasmtime_config(config: &RuntimeConfig) -> Config {
    let mut wasm = Config::new();
    wasm.epoch_interruption(true).wasm_component_model(true);
    wasm.allocation_strategy(pooling(config));
    if config.address_space == AddressSpace::Compact {
        // The reservation is the slot's memory bound, rounded up to whole wasm pages, with
        // nothing to grow into beyond it and no guard: Cranelift then emits a bounds check
        // per access instead of relying on the guard's fault.
        let bound = (memory_slot_bytes(config) as u64).next_multiple_of(64 << 10);
        wasm.memory_reservation(bound)
            .memory_guard_size(0)
            .memory_reservation_for_growth(0)
            .guard_before_linear_memory(false);
    }
    // A policy arrives already optimised by its own compiler (LLVM for Rust): Cranelift's
    // optimisations bought no measurable speed in the decision benchmark, and skipping
    // them makes a compile (and so a hot swap) about a quarter faster.
    wasm.cranelift_opt_level(wasmtime::OptLevel::None);
    // The timing harness (`timing.rs`) under `perf record`: a map of the guests' compiled
    // functions, so that perf names them (a module's cache entry is compiled for it apart).
    #[cfg(test)]
    if std::env::var_os("CUBEPOD_PERFMAP").is_some() {
        wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    wasm
}

/// The instance pool: a slot per concurrent call, each with room for what a policy component
/// instantiates (its core modules, their memories and tables). Memory slots are reserved
/// address space, made resident only as a guest touches them, and handed back between calls.
fn pooling(config: &RuntimeConfig) -> wasmtime::PoolingAllocationConfig {
    let slots = config.max_concurrent_calls.max(1);
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(16))
        .total_memories(slots.saturating_mul(2))
        .total_tables(slots.saturating_mul(16))
        // The limiter refuses growth past `memory_limit_bytes` first, and counts it; this
        // only sizes the slots.
        .max_memory_size(memory_slot_bytes(config))
        // A fiber stack per call in flight.
        .total_stacks(slots)
        // A call's pages stay mapped for the next call in the slot: with the PAGEMAP_SCAN ioctl
        // (Linux 6.7 and later; elsewhere wasmtime falls back to madvise) the slot's resident
        // pages, up to KEEP_RESIDENT of them, are put back to the initial image by memset and
        // the rest are decommitted, so the next instance does not take a page fault for every
        // page of stack and heap it touches again.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// The most one linear memory of a slot may hold: the memory bound, at least one wasm page.
fn memory_slot_bytes(config: &RuntimeConfig) -> usize {
    config.memory_limit_bytes.max(64 << 10)
}

/// How much of a slot's linear memory (and table) may stay resident between calls. The scan
/// finds pages resident, not pages written, so once any call touched a page it stays resident
/// and is reset after every later call in the slot: after a reap tick over a thousand sandboxes,
/// a slot resets several times the pages a reconcile touches. A page's reset costs about 0.2 µs
/// here, against about 1.6 µs for the page fault (with its zeroing) that a smaller bound would
/// put on each page past it in every call of a policy whose calls touch more: the bound stays
/// generous.
const KEEP_RESIDENT: usize = 2 << 20;

/// A thread that advances the engine's epoch every tick until it is dropped.
struct Ticker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: Engine, tick: Duration) -> Result<Self, RuntimeError> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cubepod-epoch".to_string())
            .spawn(move || {
                // Dropping the sender (the Ticker) ends the wait at once with Disconnected.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    engine.increment_epoch();
                }
            })
            .map_err(|e| RuntimeError::Engine {
                why: format!("cannot start the epoch ticker thread: {e}"),
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticker_stops_with_the_engine() {
        let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
        let started = std::time::Instant::now();
        // Dropping the last clone joins the ticker thread: it must end at once, not at a tick.
        drop(engine);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_budget_that_cannot_hold_one_call_is_refused() {
        let config = RuntimeConfig::default();
        let bound = config.call_charge_bound();
        // The defaults hold one call: 2 x 32 MiB of guest memory, 16 manifests of 8 x 512 KiB.
        assert_eq!(bound, 128 << 20);
        assert!(config.calls_memory_budget_bytes >= bound);
        let refused = PolicyEngine::new(RuntimeConfig {
            calls_memory_budget_bytes: bound - 1,
            ..RuntimeConfig::default()
        })
        .unwrap_err();
        assert!(
            refused.to_string().contains("--calls-memory-budget"),
            "{refused}"
        );
        let engine = PolicyEngine::new(RuntimeConfig {
            calls_memory_budget_bytes: bound,
            ..RuntimeConfig::default()
        })
        .unwrap();
        assert_eq!(engine.memory_budget().limit(), bound);
        assert_eq!(engine.memory_budget().charged(), 0);
    }
}
