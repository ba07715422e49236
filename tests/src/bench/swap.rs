//! A policy hot swap, from the file's change to the new module serving, as
//! `cargo bench -p cubepod-tests --bench swap` and `cubepod-bench` measure it: a `PolicyWatcher` on a file (file
//! events on, polling off), the file replaced by a rename with the default policy plus a
//! distinct custom section (a new digest: compiled, contract-checked and self-tested, no
//! precompiled-cache hit), timed until the manager's active module has the new digest.

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
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};

use super::NS;

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
/// (the default) and `none`.
pub fn compile_only(samples: usize) -> Result<Vec<(&'static str, Duration)>> {
    let levels = [
        ("speed (wasmtime's default)", wasmtime::OptLevel::Speed),
        ("none (the runtime's)", wasmtime::OptLevel::None),
    ];
    let engines = levels
        .iter()
        .map(|(_, level)| {
            let mut config = wasmtime::Config::new();
            config
                .epoch_interruption(true)
                .wasm_component_model(true)
                .cranelift_opt_level(*level);
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

pub async fn run(swaps: usize) -> Result<Vec<Duration>> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, DEFAULT_POLICY).context("writing the policy file")?;
    let engine = PolicyEngine::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        ..RuntimeConfig::default()
    })
    .context("engine")?;
    let module = engine.load(DEFAULT_POLICY).context("the default policy")?;
    let manager = ControllerManager::new(
        MemoryCluster::new(MemoryClusterConfig::instant()),
        module,
        ManagerConfig::for_namespaces(vec![NS.to_string()]),
        Arc::new(Metrics::new()),
        Arc::new(Health::default()),
    );
    let (stop, shutdown) = tokio::sync::watch::channel(false);
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
        let changed = Instant::now();
        std::fs::rename(&staged, &path).context("replacing the policy file")?;
        while manager.policy.current().digest() != digest {
            if changed.elapsed() > Duration::from_secs(30) {
                bail!("swap {n} never served");
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        if n > 0 {
            samples.push(changed.elapsed());
        }
    }
    let _ = stop.send(true);
    Ok(samples)
}
