//! One reconcile decision of the default policy, through the wasm component (a fresh store per
//! call, as the controller makes it) and natively (the same Rust, called directly):
//! `cargo bench -p cubepod-tests --bench reconcile`.
//!
//! Two inputs: a converged resync (children observed, Pod ready: no kube-client call) and a new
//! sandbox (4 calls: two PVCs, the Secret, the Pod). The wasm path's cluster answers at once,
//! and the native path's client accepts every call at no cost, so both measure the decision;
//! the wasm path also pays for what the host does per call (store, instantiation, copying the
//! input in and the output out, the boundary's parse of every manifest). Also prints the
//! component's size, its one-time load time without and with the precompiled cache, and where
//! the wasm path's time goes (bare stores on both wasmtime allocators, the host-side pieces).

use std::hint::black_box;
use std::time::{Duration, Instant};

use cubepod_kube::Resource;
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::runtime::bindings as host;
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig, wasmtime_config};
use cubepod_policy_sdk::bindings as guest;
use cubepod_policy_sdk::client::{KubeClient, KubeResult};
use cubepod_policy_sdk::{fixtures, reconcile};
use cubepod_tests::bench::decision::{self, Case};
use cubepod_tests::bench::twin;

const WASM_RUNS: usize = 5_000;
const NATIVE_RUNS: usize = 20_000;
/// Loads timed per load variant (the median is printed).
const LOADS: usize = 3;

// ---- the inputs ---------------------------------------------------------------------------

// ---- measuring ----------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Percentiles {
    p50: Duration,
    p99: Duration,
    /// Minor page faults of the process per timed run (Linux only).
    faults: Option<f64>,
}

/// `decision::time` (a tenth of `runs` to warm up, then `runs` timed), with the minor page
/// faults of the process per run, warm-up included.
fn measure<S>(runs: usize, setup: impl FnMut() -> S, run: impl FnMut(S)) -> Percentiles {
    let faults_before = minor_faults();
    let mut samples = decision::time(runs, setup, run);
    let calls = (runs + runs / 10) as f64;
    let faults = minor_faults()
        .zip(faults_before)
        .map(|(after, before)| after.saturating_sub(before) as f64 / calls);
    samples.sort();
    Percentiles {
        p50: samples[samples.len() / 2],
        p99: samples[samples.len() * 99 / 100],
        faults,
    }
}

fn percentiles(mut samples: Vec<Duration>) -> Percentiles {
    samples.sort();
    Percentiles {
        p50: samples[samples.len() / 2],
        p99: samples[samples.len() * 99 / 100],
        faults: None,
    }
}

/// The process's minor page faults so far (`/proc/self/stat`), where there is such a file.
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command name in parentheses, minflt is the 8th field (10th of the line).
    let (_, fields) = stat.rsplit_once(')')?;
    fields.split_whitespace().nth(7)?.parse().ok()
}

fn faults(p: Percentiles) -> String {
    p.faults
        .map_or_else(|| "n/a".to_string(), |f| format!("{f:.1}"))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median time of `LOADS` loads of the default policy, each by a fresh engine from `config`
/// (after `prepare`, untimed).
fn time_loads(config: &RuntimeConfig, mut prepare: impl FnMut()) -> Duration {
    median(
        (0..LOADS)
            .map(|_| {
                prepare();
                let engine = PolicyEngine::new(config.clone()).expect("engine");
                let start = Instant::now();
                let module = engine
                    .load(DEFAULT_POLICY)
                    .expect("the default policy loads");
                let took = start.elapsed();
                drop(black_box(module));
                took
            })
            .collect(),
    )
}

fn main() {
    // ---- one-time costs ----
    let cache = tempfile::tempdir().expect("a temp dir");
    let uncached = RuntimeConfig::default();
    let cached = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let clear_cache = || {
        for entry in std::fs::read_dir(cache.path()).expect("the cache dir") {
            std::fs::remove_file(entry.expect("a cache entry").path()).expect("removable");
        }
    };
    let load_none = time_loads(&uncached, || {});
    let load_cold = time_loads(&cached, clear_cache);
    let load_warm = time_loads(&cached, || {});
    let cwasm: u64 = std::fs::read_dir(cache.path())
        .expect("the cache dir")
        .map(|e| {
            e.expect("a cache entry")
                .metadata()
                .expect("metadata")
                .len()
        })
        .sum();

    // ---- the two paths, set up ----
    let subject = decision::Subject::load(
        &RuntimeConfig::default(),
        DEFAULT_POLICY,
        decision::DEFAULT_POLICY_NAME,
    )
    .expect("the default policy loads");
    let module = &subject.module;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Both paths, checked to decide the same first, then timed: the figures cubepod-bench
    // reports.
    let cases: Vec<Case> =
        decision::run(&subject, runtime.handle().clone(), WASM_RUNS, NATIVE_RUNS)
            .unwrap_or_else(|e| panic!("the decision bench failed: {e:#}"));
    let (new, converged) = decision::native_inputs().expect("the two inputs");

    println!();
    println!(
        "default policy: component {} bytes ({:.0} KiB), precompiled {:.0} KiB",
        DEFAULT_POLICY.len(),
        DEFAULT_POLICY.len() as f64 / 1024.0,
        cwasm as f64 / 1024.0
    );
    println!(
        "load (compile, check, pre-instantiate, describe), median of {LOADS}: \
         no cache {:.1} ms | cache miss (compile + write) {:.1} ms | cache hit {:.1} ms",
        millis(load_none),
        millis(load_cold),
        millis(load_warm)
    );
    println!();
    println!(
        "{:<18} {:>5} {:>11} {:>11} {:>11} {:>11} {:>16}",
        "input", "calls", "native p50", "native p99", "wasm p50", "wasm p99", "wasm/native p50"
    );
    for case in &cases {
        let n = percentiles(case.native.clone());
        let w = percentiles(case.wasm.clone());
        println!(
            "{:<18} {:>5} {:>8.2} µs {:>8.2} µs {:>8.2} µs {:>8.2} µs {:>15.1}x",
            case.label,
            case.calls,
            micros(n.p50),
            micros(n.p99),
            micros(w.p50),
            micros(w.p99),
            w.p50.as_secs_f64() / n.p50.as_secs_f64(),
        );
    }

    // ---- where the wasm path's time goes ----
    // `describe` is a fresh store, an instantiation and a trivial export: the floor of any call.
    let floor = measure(
        WASM_RUNS,
        || (),
        |()| {
            black_box(module.describe().ok());
        },
    );
    // The same without the runtime's host state: on the runtime's engine configuration (the
    // pooling allocator, slots kept resident), and on wasmtime's default on-demand allocator.
    let converged_input = twin::reconcile_input(&converged);
    let new_input = twin::reconcile_input(&new);
    let runtimes = wasmtime_config(&RuntimeConfig::default());
    let mut on_demand = runtimes.clone();
    on_demand.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
    let bare = [
        (
            "runtime's engine",
            bare_calls(&runtimes, &converged_input, &new_input),
        ),
        (
            "on-demand alloc. (what-if)",
            bare_calls(&on_demand, &converged_input, &new_input),
        ),
    ];
    // The WASI context every store gets (empty, but built per call).
    let wasi = measure(
        WASM_RUNS,
        || (),
        |()| {
            black_box(
                wasmtime_wasi::WasiCtxBuilder::new()
                    .allow_tcp(false)
                    .allow_udp(false)
                    .allow_ip_name_lookup(false)
                    .build(),
            );
        },
    );
    // The boundary's parse of the new sandbox's 4 manifests (the cluster here costs nothing).
    let manifests = manifests_of(&new);
    let boundary = Boundary::new([fixtures::NAMESPACE]);
    let check = |resource: Resource, name: &str, manifest: &str| {
        let tree = boundary
            .check(resource, fixtures::NAMESPACE, name, Some(manifest))
            .expect("the boundary admits the default policy's manifests")
            .expect("a write's manifest");
        black_box(&tree);
    };
    let parse = measure(
        NATIVE_RUNS,
        || (),
        |()| {
            for (resource, name, manifest) in &manifests {
                check(*resource, name, manifest);
            }
        },
    );
    println!();
    println!("where the wasm path's time goes (p50, p99, minor page faults per run):");
    let row = |what: &str, p: Percentiles| {
        println!(
            "  {what:<82} {:>8.2} µs {:>8.2} µs {:>6}",
            micros(p.p50),
            micros(p.p99),
            faults(p)
        );
    };
    row(
        "describe: fresh store + instantiate + trivial export",
        floor,
    );
    for (allocator, runs) in &bare {
        match runs {
            Ok(runs) => {
                for (what, p) in runs {
                    let what = match what {
                        Bare::Instantiate => "instantiate only",
                        Bare::Describe => "instantiate + describe",
                        Bare::Converged => "instantiate + converged resync",
                        Bare::NewSandbox => "instantiate + new sandbox (null kube-client)",
                    };
                    row(&format!("bare store, {allocator}: {what}"), *p);
                }
            }
            Err(e) => println!("  bare store, {allocator}: failed: {e:#}"),
        }
    }
    row("WasiCtx build (per store)", wasi);
    row("boundary check of the new sandbox's 4 manifests", parse);
    drop(runtime);
}

/// What runs in a bare store.
#[derive(Clone, Copy)]
enum Bare {
    Instantiate,
    Describe,
    Converged,
    NewSandbox,
}

/// The data of a bare store: `kube-client` accepts every call at once (no boundary, no
/// cluster, no runtime), every other import traps.
struct NullHost;

impl host::cubepod::controller::types::Host for NullHost {}

impl host::cubepod::controller::kube_client::Host for NullHost {
    async fn ensure_pvc(&mut self, _: String, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn delete_pvc(&mut self, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn ensure_pod(&mut self, _: String, _: String, _: String) -> NullAnswer<Option<String>> {
        Ok(Ok(None))
    }
    async fn delete_pod(&mut self, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn ensure_secret(&mut self, _: String, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn delete_secret(&mut self, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn apply_network_policy(&mut self, _: String, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn delete_network_policy(&mut self, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn apply_service(&mut self, _: String, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
    async fn delete_service(&mut self, _: String, _: String) -> NullAnswer<()> {
        Ok(Ok(()))
    }
}

/// The imports may trap (the runtime's budget); the null host never does.
type NullAnswer<T> = wasmtime::Result<Result<T, host::KubeError>>;

/// Calls of the default policy in a fresh bare store (no WASI context, no limiter, no epoch
/// callback, a [`NullHost`]) on an engine of `config`: what instantiation and the guest cost
/// without the runtime's host side, and what the allocator changes.
fn bare_calls(
    config: &wasmtime::Config,
    converged: &host::ReconcileInput,
    new: &host::ReconcileInput,
) -> wasmtime::Result<Vec<(Bare, Percentiles)>> {
    use wasmtime::component::{Component, HasSelf, Linker};
    let engine = wasmtime::Engine::new(config)?;
    let component = Component::new(&engine, DEFAULT_POLICY)?;
    let mut linker = Linker::<NullHost>::new(&engine);
    host::PolicyModule::add_to_linker::<NullHost, HasSelf<NullHost>>(&mut linker, |h| h)?;
    linker.define_unknown_imports_as_traps(&component)?;
    let pre = host::PolicyModulePre::new(linker.instantiate_pre(&component)?)?;
    // Called as the runtime calls a policy (async, on a fiber), driven here on this thread.
    let run = |what: Bare| -> wasmtime::Result<()> {
        futures_executor::block_on(async {
            let mut store = wasmtime::Store::new(&engine, NullHost);
            // The epoch never moves on this engine: any deadline ahead of it is never reached.
            store.set_epoch_deadline(1);
            let instance = pre.instantiate_async(&mut store).await?;
            let policy = instance.cubepod_controller_policy();
            let input = match what {
                Bare::Instantiate => return Ok(()),
                Bare::Describe => {
                    black_box(policy.call_describe(&mut store).await?);
                    return Ok(());
                }
                Bare::Converged => converged,
                Bare::NewSandbox => new,
            };
            let out = policy.call_reconcile_sandbox(&mut store, input).await?;
            assert!(out.is_ok(), "the reconcile succeeds");
            black_box(out.ok());
            Ok(())
        })
    };
    [
        Bare::Instantiate,
        Bare::Describe,
        Bare::Converged,
        Bare::NewSandbox,
    ]
    .into_iter()
    .map(|what| {
        run(what)?;
        let p = measure(
            WASM_RUNS,
            || (),
            |()| run(what).expect("it ran once already"),
        );
        Ok((what, p))
    })
    .collect()
}

/// The manifests the native policy writes for `input`, with their kind and name.
fn manifests_of(input: &guest::ReconcileInput) -> Vec<(Resource, String, String)> {
    #[derive(Default)]
    struct Capture(Vec<(Resource, String, String)>);
    impl Capture {
        fn keep(&mut self, resource: Resource, name: &str, manifest: &str) -> KubeResult<()> {
            self.0
                .push((resource, name.to_string(), manifest.to_string()));
            Ok(())
        }
    }
    impl KubeClient for Capture {
        fn ensure_pvc(&mut self, _: &str, name: &str, manifest: &str) -> KubeResult<()> {
            self.keep(Resource::PersistentVolumeClaim, name, manifest)
        }
        fn delete_pvc(&mut self, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
        fn ensure_pod(
            &mut self,
            _: &str,
            name: &str,
            manifest: &str,
        ) -> KubeResult<Option<String>> {
            self.keep(Resource::Pod, name, manifest).map(|()| None)
        }
        fn delete_pod(&mut self, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
        fn ensure_secret(&mut self, _: &str, name: &str, manifest: &str) -> KubeResult<()> {
            self.keep(Resource::Secret, name, manifest)
        }
        fn delete_secret(&mut self, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
        // FOUNDATION: kept once Resource names NetworkPolicies and Services.
        fn apply_network_policy(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
        fn delete_network_policy(&mut self, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
        fn apply_service(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
        fn delete_service(&mut self, _: &str, _: &str) -> KubeResult<()> {
            Ok(())
        }
    }
    let mut capture = Capture::default();
    reconcile::reconcile(&mut capture, input).expect("native reconcile");
    capture.0
}
