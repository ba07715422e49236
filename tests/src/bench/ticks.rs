//! One reap tick and one warm-pool tick over N sandboxes, in-process: the real
//! `ControllerManager` over an in-memory cluster seeded with N converged sandboxes (each with
//! an idle timeout, none idle) and one PodWarmPool of 10 ready members. The reap tick is
//! `ControllerManager::reap()` timed whole (cache snapshot, the policy's `reap` export over every
//! sandbox, no pause to write); the pool tick is the pool's reconcile as the manager records it
//! in `cubepod_reconcile_duration_seconds{kind="podwarmpool"}` (members gathered from the cache,
//! the policy's `reconcile-pool`, nothing to write).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::queue::WorkKey;
use cubepod_host::metrics::Metrics;
use cubepod_kube::Resource;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::PolicyModule;
use serde_json::json;

use super::NS;
use super::seed::Template;

const POOL: &str = "bench-pool";
const POOL_REPLICAS: u32 = 10;

#[derive(Clone, Debug)]
pub struct Ticks {
    pub n: usize,
    pub reap: Vec<Duration>,
    pub pool: Vec<Duration>,
}

pub async fn run(
    module: PolicyModule,
    template: &Template,
    n: usize,
    ticks: usize,
) -> Result<Ticks> {
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    template.seed(&cluster, 0, n)?;
    cluster
        .insert(
            Resource::PodWarmPool,
            json!({
                "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                "metadata": {"name": POOL, "namespace": NS},
                "spec": {"replicas": POOL_REPLICAS,
                    "template": {"image": "ghcr.io/cubepod/sandbox-base:1.0",
                        "idleTimeoutSeconds": 0}},
            }),
        )
        .map_err(|e| anyhow::anyhow!("seeding the pool: {e}"))?;
    let config = ManagerConfig {
        // Only the ticks the bench makes.
        reap_interval: Duration::from_secs(3600),
        pool_interval: Duration::from_secs(3600),
        ..ManagerConfig::for_namespaces(vec![NS.to_string()])
    };
    let manager = ControllerManager::new(
        cluster.clone(),
        module,
        config,
        Arc::new(Metrics::new()),
        Arc::new(Health::default()),
    );
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(manager.clone().run(shutdown));
    let pool = ObjectRef::new(NS, POOL);
    let started = Instant::now();
    loop {
        let ready = manager
            .cache
            .pool(&pool)
            .map(|p| p.pool.status.ready_replicas);
        if ready == Some(POOL_REPLICAS)
            && manager.queue.is_empty()
            && manager.queue.in_flight() == 0
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the pool never had {POOL_REPLICAS} ready members (ready: {ready:?})");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if manager.cache.sandboxes().len() < n {
        bail!("the cache holds fewer than {n} sandboxes");
    }

    let mut reap = Vec::new();
    for _ in 0..ticks {
        let started = Instant::now();
        let paused = manager.reap().await.context("a reap tick")?;
        reap.push(started.elapsed());
        if paused > 0 {
            bail!("the reaper paused {paused} sandboxes that were not idle");
        }
    }
    let histogram = manager
        .metrics
        .reconcile_duration
        .with_label_values(&["podwarmpool", "ok"]);
    let mut pool_ticks = Vec::new();
    for _ in 0..ticks {
        let (count, sum) = (histogram.get_sample_count(), histogram.get_sample_sum());
        manager.queue.add(WorkKey::Pool(pool.clone()));
        let started = Instant::now();
        while histogram.get_sample_count() == count {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("a pool tick did not finish");
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        pool_ticks.push(Duration::from_secs_f64(histogram.get_sample_sum() - sum));
    }
    let _ = stop.send(true);
    let _ = running.await;
    Ok(Ticks {
        n,
        reap,
        pool: pool_ticks,
    })
}
