//! A policy hot swap, from the file's change to the new module serving and to its first
//! decision, as `cargo bench -p cubepod-tests --bench swap` and `cubepod-bench` measure it: a
//! running controller (one converged Sandbox) and a `PolicyWatcher` on a file (file events on,
//! polling off), the file replaced by a rename with the default policy plus a distinct custom
//! section (a new digest: compiled, contract-checked and self-tested, no precompiled-cache hit),
//! timed until the manager's active module has the new digest, and until the first Sandbox
//! reconcile after the swap (the swap requeues every object), the new module's decision, has
//! ended. With a tiered compile (the controller's), the new module serves Winch's build first:
//! the time until its Cranelift build has replaced it is counted too, and the next swap waits
//! for it, so that no swap's compile shares the cores with the one before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::admission::Admission;
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::policy_watch::{PolicyWatcher, sha256_hex};
use cubepod_host::metrics::Metrics;
use cubepod_host::signing::KeyRing;
use cubepod_kube::Cluster as _;
use cubepod_policy_host::runtime::{Compile, DEFAULT_POLICY, PolicyEngine, RuntimeConfig, Tier};

use super::NS;
use super::seed;

/// One hot swap's times from the file's change.
#[derive(Clone, Copy, Debug)]
pub struct Swap {
    /// Until the manager serves the new module.
    pub serving: Duration,
    /// Until the new module's first decision (a `reconcile-sandbox`) has returned.
    pub decided: Duration,
    /// Of `serving`, the admission's steps, as the controller counts them
    /// (`cubepod_policy_admission_duration_seconds`): the compile, the check (the contract,
    /// the pre-instantiation, `describe`) and the self-test. The rest is the file's event and
    /// read, and the swap itself.
    pub compile: Duration,
    pub check: Duration,
    pub self_test: Duration,
    /// With a tiered compile, until the module's optimised (Cranelift) build serves in
    /// place of the baseline (Winch) one that served first.
    pub optimised: Option<Duration>,
}

/// The default policy with a custom section holding `n`: the same behaviour, another digest
/// (a hot swap's or a rollout's candidate that decides as the default does).
pub fn variant(n: usize) -> Vec<u8> {
    let name = b"cubepod-bench";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(&n.to_le_bytes());
    let mut bytes = DEFAULT_POLICY.to_vec();
    bytes.push(0); // custom section
    bytes.push(section.len() as u8); // one LEB128 byte
    bytes.extend(section);
    bytes
}

/// What the swap's compile costs alone, and what Cranelift's lowest optimization level would
/// make of it: the median of `samples` `Component::new` of the default policy on an engine
/// configured as the runtime's (epoch interruption, component model), at opt level `speed`
/// (the default) and `none`; then the runtime's own compile (`PolicyEngine::load`'s compile
/// step) of a new digest of it, on an engine that compiled the one before (a hot swap's: its
/// functions found again) and on a fresh engine.
pub fn compile_only(samples: usize) -> Result<Vec<(&'static str, Duration)>> {
    let mut medians = cranelift_levels(samples)?;
    let runtime = |cache_dir| RuntimeConfig {
        cache_dir,
        ..RuntimeConfig::default()
    };
    let kept = PolicyEngine::new(runtime(None)).context("engine")?;
    kept.load(&variant(usize::MAX))
        .context("the default policy")?;
    let (mut again, mut fresh) = (Vec::new(), Vec::new());
    for n in 0..samples.max(1) {
        let loaded = kept.load(&variant(n)).context("the default policy")?;
        again.push(loaded.loaded_in().compile);
        let engine = PolicyEngine::new(runtime(None)).context("engine")?;
        let loaded = engine.load(&variant(n)).context("the default policy")?;
        fresh.push(loaded.loaded_in().compile);
    }
    for (label, mut times) in [
        (
            "the runtime's compile of a new digest, its functions compiled before (a hot swap's)",
            again,
        ),
        (
            "the runtime's compile on a fresh engine (nothing compiled before)",
            fresh,
        ),
    ] {
        times.sort();
        medians.push((label, times[times.len() / 2]));
    }
    Ok(medians)
}

/// `Component::new` of the default policy at Cranelift's opt levels and by Winch, the medians.
fn cranelift_levels(samples: usize) -> Result<Vec<(&'static str, Duration)>> {
    let levels = [
        (
            "Cranelift opt level speed (wasmtime's default)",
            wasmtime::OptLevel::Speed,
        ),
        (
            "Cranelift opt level none (the runtime's)",
            wasmtime::OptLevel::None,
        ),
        (
            "Winch (a tiered compile's first build)",
            wasmtime::OptLevel::None,
        ),
    ];
    let engines = levels
        .iter()
        .map(|(label, level)| {
            let mut config = wasmtime::Config::new();
            config
                .epoch_interruption(true)
                .wasm_component_model(true)
                .cranelift_opt_level(*level);
            if label.starts_with("Winch") {
                config.strategy(wasmtime::Strategy::Winch);
            }
            wasmtime::Engine::new(&config).map_err(|e| anyhow::anyhow!("engine: {e:#}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut times = vec![Vec::new(); levels.len()];
    // Interleaved, so that both levels see the same machine; the first round warms up.
    for round in 0..=samples.max(1) {
        for (engine, times) in engines.iter().zip(&mut times) {
            let started = Instant::now();
            wasmtime::component::Component::new(engine, DEFAULT_POLICY)
                .map_err(|e| anyhow::anyhow!("compiling the default policy: {e:#}"))?;
            if round > 0 {
                times.push(started.elapsed());
            }
        }
    }
    Ok(levels
        .iter()
        .zip(times)
        .map(|((label, _), mut times)| {
            times.sort();
            (*label, times[times.len() / 2])
        })
        .collect())
}

/// `swaps` hot swaps of a controller whose engine compiles as `compile` says.
pub async fn run(swaps: usize, compile: Compile) -> Result<Vec<Swap>> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, DEFAULT_POLICY).context("writing the policy file")?;
    let engine = PolicyEngine::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        compile,
        ..RuntimeConfig::default()
    })
    .context("engine")?;
    let module = engine.load(DEFAULT_POLICY).context("the default policy")?;
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    let metrics = Arc::new(Metrics::new());
    let manager = ControllerManager::new(
        cluster.clone(),
        module,
        ManagerConfig {
            // Only the reconciles the swaps ask for.
            reap_interval: Duration::from_secs(3600),
            pool_interval: Duration::from_secs(3600),
            ..ManagerConfig::for_namespaces(vec![NS.to_string()])
        },
        metrics.clone(),
        Arc::new(Health::default()),
    );
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(manager.clone().run(shutdown.clone()));
    // One sandbox for the new module to decide on, Running and quiet before the first swap.
    let name = seed::sandbox_name(0);
    cluster
        .create(
            cubepod_kube::Resource::Sandbox,
            NS,
            seed::sandbox_manifest(&name),
        )
        .await
        .map_err(|e| anyhow::anyhow!("creating the sandbox: {e}"))?;
    let started = Instant::now();
    loop {
        let running = cluster
            .objects(cubepod_kube::Resource::Sandbox)
            .iter()
            .any(|o| o["status"]["phase"] == "Running");
        if running && manager.queue.is_empty() && manager.queue.in_flight() == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the sandbox never ran");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A Sandbox's reconcile, counted as it ends: the new module's decision, carried out (a
    // converged sandbox's writes nothing).
    let decisions = metrics
        .reconcile_duration
        .with_label_values(&["sandbox", "ok"]);
    // The seconds each admission step has taken so far, summed over the swaps.
    let steps = || {
        ["compile", "check", "self_test"].map(|step| {
            metrics
                .policy_admission_duration
                .with_label_values(&[step])
                .get_sample_sum()
        })
    };
    let watcher = PolicyWatcher::new(
        path.clone(),
        Admission::new(engine, KeyRing::default()),
        manager.clone(),
        Duration::from_secs(600),
    );
    tokio::spawn(watcher.run(shutdown));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut samples = Vec::new();
    // One unmeasured swap first: the first compile warms up the engine's code paths.
    for n in 0..=swaps {
        let bytes = variant(n);
        let digest = sha256_hex(&bytes);
        let staged = path.with_extension("staged");
        std::fs::write(&staged, &bytes).context("staging a policy")?;
        // The sandbox is converged and its module asks for no reconcile within a swap's time:
        // a decision counted after the change is the new module's.
        let decided_before = decisions.get_sample_count();
        let steps_before = steps();
        let changed = Instant::now();
        std::fs::rename(&staged, &path).context("replacing the policy file")?;
        let mut serving = None;
        let decided = loop {
            if serving.is_none() && manager.policy.current().digest() == digest {
                serving = Some(changed.elapsed());
            }
            if serving.is_some() && decisions.get_sample_count() > decided_before {
                break changed.elapsed();
            }
            if changed.elapsed() > Duration::from_secs(30) {
                bail!("swap {n} never served, or its module never decided");
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        let module = manager.policy.current();
        let optimised = if module.tier() == Tier::Baseline {
            let tier =
                tokio::task::spawn_blocking(move || module.wait_optimised(Duration::from_secs(60)))
                    .await
                    .context("waiting for the optimised build")?;
            if tier != Tier::Optimised {
                bail!("swap {n}'s optimised build never served");
            }
            Some(changed.elapsed())
        } else {
            None
        };
        if n > 0 {
            let [compile, check, self_test] = std::array::from_fn(|i| {
                Duration::from_secs_f64((steps()[i] - steps_before[i]).max(0.0))
            });
            samples.push(Swap {
                serving: serving.unwrap_or(decided),
                decided,
                compile,
                check,
                self_test,
                optimised,
            });
        }
        // Quiet again before the next swap.
        while !(manager.queue.is_empty() && manager.queue.in_flight() == 0) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let _ = stop.send(true);
    Ok(samples)
}
