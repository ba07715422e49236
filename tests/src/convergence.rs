//! Helpers shared by the end-to-end tests that run the real binary against the fake API server
//! (`tests/kubernetes.rs`, `tests/faults.rs`): a fake server with quick pods, Sandboxes made
//! straight in its cluster, waits, and child listings.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_kube::{Cluster, Resource};
use serde_json::{Value, json};

use crate::apiserver::{FakeApiServer, FakeOptions};

/// The workload namespace the controller serves by default.
pub const NS: &str = "cubepod-workloads";
/// The bearer token of the fake API servers these tests start.
pub const TOKEN: &str = "test-token-0123456789";
/// The image every test Sandbox runs.
pub const IMAGE: &str = "ghcr.io/cubepod/sandbox-base:1.0";

/// A fake API server over HTTPS with [`TOKEN`], pods starting and stopping after `pod_delay`,
/// and the fault injector's RNG seeded with `fault_seed`.
pub fn fake_server(pod_delay: Duration, fault_seed: u64) -> FakeApiServer {
    fake_server_with_namespaces(pod_delay, fault_seed, &[])
}

/// [`fake_server`] with `namespaces` too, besides the fake's own.
pub fn fake_server_with_namespaces(
    pod_delay: Duration,
    fault_seed: u64,
    namespaces: &[&str],
) -> FakeApiServer {
    let mut all = FakeOptions::default().namespaces;
    all.extend(namespaces.iter().map(|n| (*n).to_owned()));
    FakeApiServer::start(FakeOptions {
        token: Some(TOKEN.to_string()),
        cluster_config: MemoryClusterConfig {
            pod_start_delay: pod_delay,
            pod_stop_delay: pod_delay,
            ..MemoryClusterConfig::default()
        },
        fault_seed,
        namespaces: all,
        ..FakeOptions::default()
    })
    .expect("fake API server")
}

/// Runs `future` to completion on a throwaway current-thread runtime. Kubelet work the
/// MemoryCluster schedules from inside it dies with the runtime: use a long-lived runtime for
/// calls that delete Pods (see [`crate::faults`]).
pub fn block<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// A Sandbox manifest in [`NS`] with `spec` merged over the image.
pub fn sandbox_manifest(name: &str, spec: Value) -> Value {
    let mut full = json!({"image": IMAGE});
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        for (key, value) in extra {
            full.insert(key.clone(), value.clone());
        }
    }
    json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": full,
    })
}

/// Creates a running Sandbox named `name` in [`NS`].
pub fn create_sandbox(cluster: &Arc<MemoryCluster>, name: &str) {
    block(cluster.create(Resource::Sandbox, NS, sandbox_manifest(name, json!({}))))
        .expect("create sandbox");
}

/// The sorted names of every object of `resource`.
pub fn names(cluster: &MemoryCluster, resource: Resource) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .objects(resource)
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Sandboxes whose status says Running.
pub fn running(cluster: &MemoryCluster) -> usize {
    cluster
        .objects(Resource::Sandbox)
        .iter()
        .filter(|s| s["status"]["phase"] == "Running")
        .count()
}

/// Polls `check` every 50 ms until it holds; panics naming `what` after `patience`.
pub fn until(what: &str, patience: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + patience;
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every sandbox in `sandboxes` (rootfs generation 1, running) has exactly its children, and
/// no child is without its sandbox.
pub fn assert_converged(cluster: &MemoryCluster, sandboxes: &[String]) {
    let mut pvcs = Vec::new();
    let mut pods = Vec::new();
    let mut secrets = Vec::new();
    for s in sandboxes {
        pvcs.push(format!("{s}-rootfs-g1"));
        pvcs.push(format!("{s}-workspace"));
        pods.push(s.clone());
        secrets.push(format!("{s}-credentials"));
    }
    pvcs.sort();
    pods.sort();
    secrets.sort();
    assert_eq!(names(cluster, Resource::PersistentVolumeClaim), pvcs);
    assert_eq!(names(cluster, Resource::Pod), pods);
    assert_eq!(names(cluster, Resource::Secret), secrets);
}

/// Samples of Prometheus text, for sums over labels.
pub fn samples(text: &str) -> Vec<prometheus_parse::Sample> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines)
        .expect("Prometheus text format")
        .samples
}

/// The sum of `name` over every sample whose labels include `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text)
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}
