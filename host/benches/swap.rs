//! A policy hot swap, from the file's change to the new module serving:
//! `cargo bench -p cubepod-host --bench swap`.
//!
//! A controller runs on the in-memory cluster with `--policy FILE` semantics (the watcher on
//! the file, file events on); the bench replaces the file as a ConfigMap update does (write
//! beside it, rename over it) with a new module each time, and waits until the manager's
//! active module has the new digest. Every module is the default policy with a different
//! custom section appended: a new digest, so each swap compiles (no precompiled-cache hit),
//! checks the contract and runs the self-test, as a real new policy would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cubepod_host::admission::Admission;
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::policy_watch::{PolicyWatcher, sha256_hex};
use cubepod_host::kube::memory::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::metrics::Metrics;
use cubepod_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};
use cubepod_host::signing::KeyRing;

const SWAPS: usize = 15;

/// The default policy with a custom section `cubepod-bench` holding `n`: same behaviour,
/// another digest.
fn variant(n: usize) -> Vec<u8> {
    let name = b"cubepod-bench";
    let payload = n.to_le_bytes();
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(&payload);
    let mut bytes = DEFAULT_POLICY.to_vec();
    bytes.push(0); // custom section id
    bytes.push(section.len() as u8); // fits one LEB128 byte
    bytes.extend(section);
    bytes
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, DEFAULT_POLICY).expect("write policy");

    let samples = runtime.block_on(async {
        let engine = PolicyEngine::new(RuntimeConfig {
            cache_dir: Some(dir.path().join("cache")),
            ..RuntimeConfig::default()
        })
        .expect("engine");
        let module = engine.load(DEFAULT_POLICY).expect("default policy");
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let manager = ControllerManager::new(
            cluster,
            module,
            ManagerConfig::for_namespaces(vec!["cubepod-workloads".to_string()]),
            Arc::new(Metrics::new()),
            Arc::new(Health::default()),
        );
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let watcher = PolicyWatcher::new(
            path.clone(),
            Admission::new(engine, KeyRing::default()),
            manager.clone(),
            // Long: the bench measures the file event's path, not the poll's.
            Duration::from_secs(60),
        );
        tokio::spawn(watcher.run(shutdown));
        tokio::time::sleep(Duration::from_millis(200)).await;

        let mut samples = Vec::new();
        for n in 0..SWAPS {
            let bytes = variant(n);
            let digest = sha256_hex(&bytes);
            let staged = path.with_extension("staged");
            std::fs::write(&staged, &bytes).expect("stage");
            let changed = Instant::now();
            std::fs::rename(&staged, &path).expect("rename");
            while manager.policy.current().digest() != digest {
                assert!(
                    changed.elapsed() < Duration::from_secs(30),
                    "swap {n} never served"
                );
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            samples.push(changed.elapsed());
        }
        let _ = stop.send(true);
        samples
    });
    let mut sorted = samples.clone();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "hot swap (file change to new module serving), {SWAPS} swaps of the default policy: \
         p50 {:.1} ms, min {:.1} ms, max {:.1} ms",
        ms(sorted[sorted.len() / 2]),
        ms(sorted[0]),
        ms(sorted[sorted.len() - 1])
    );
}
