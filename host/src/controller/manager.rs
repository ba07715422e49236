//! `ControllerManager`: the control loop. Reflectors fill the cache, workers take keys off the
//! queue and hand each to the [`Reconciler`] (which runs the policy and carries out its
//! output), ticks drive the idle reaper and the warm pools, and shutdown drains in-flight work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::cache::{Cache, CacheWriter};
use super::health::{ActivePolicy, Health};
pub use super::policy::PolicySource;
use super::policy::{Outcome, PolicySlot};
use super::queue::{Backoff, WorkKey, WorkQueue};
pub(crate) use super::reconcile::ReconcileError;
use super::reconcile::{Action, IMMEDIATE_PASSES, Pass, Reconciler, Settings};
use super::reflector::{self, Reflector};
use crate::metrics::Metrics;
use cubepod_kube::Cluster;
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::bindings::ClusterNetwork;
use cubepod_policy_host::runtime::{CallContext, HostCallRecord, PolicyModule};

/// The control loop's settings, from the command line.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// The namespaces watched and reconciled.
    pub namespaces: Vec<String>,
    /// Keys reconciled at once.
    pub concurrency: usize,
    /// How often the reap tick runs.
    pub reap_interval: Duration,
    /// How often every WarmPool is queued.
    pub pool_interval: Duration,
    /// How long a shutdown waits for reconciles in flight.
    pub shutdown_timeout: Duration,
    /// The retry delays of a key whose reconcile failed.
    pub backoff: Backoff,
    /// What each reconcile may do besides the policy's decisions: the reconciler holds these.
    pub reconcile: Arc<Settings>,
    /// The cluster network every reconcile is handed, and the policy's NetworkPolicies are
    /// checked against (the boundary's).
    pub cluster_network: ClusterNetwork,
    /// Where the stable module comes from: the `--policy` file, or PolicyRollouts.
    pub policy_source: PolicySource,
}

impl ManagerConfig {
    /// Defaults for `namespaces`, as the command line has them.
    pub fn for_namespaces(namespaces: Vec<String>) -> Self {
        Self {
            namespaces,
            concurrency: 16,
            reap_interval: Duration::from_secs(30),
            pool_interval: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            reconcile: Arc::default(),
            cluster_network: cubepod_policy_host::model::network::default_cluster_network(),
            policy_source: PolicySource::Rollouts,
        }
    }
}

/// controller-runtime's `result` label of `controller_runtime_reconcile_total`. `requeue` (a
/// rate-limited requeue without an error) is never asked for here, but is exposed as there.
const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// The least time between two heap trims: a trim walks the heap.
const TRIM_INTERVAL: Duration = Duration::from_secs(5);

/// How often deletions older than the cache's tombstone TTL are forgotten.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// The control loop: reflectors, work queue, workers, ticks, around one reconciler.
pub struct ControllerManager {
    pub(crate) cluster: Arc<dyn Cluster>,
    /// What the reflectors have seen, to read.
    pub cache: Arc<Cache>,
    /// The cache's one writer: the reflectors', the controller's writes' and the policy's
    /// lookup's (a test seeds the cache through it).
    pub cache_writer: CacheWriter,
    /// The keys to reconcile.
    pub queue: Arc<WorkQueue>,
    /// The running policy module.
    pub policy: Arc<PolicySlot>,
    /// The Prometheus metrics.
    pub metrics: Arc<Metrics>,
    pub(crate) health: Arc<Health>,
    /// Its settings.
    pub config: ManagerConfig,
    /// Carries out each key's policy call; shared with `policy test`.
    pub reconciler: Reconciler,
    /// Keys processed so far, for the heartbeat's trim.
    processed: AtomicU64,
}

impl ControllerManager {
    /// A manager over `cluster` running `module`, with the policy confined to the configured
    /// namespaces. Call from within a tokio runtime: the policy's API calls use its handle.
    pub fn new(
        cluster: Arc<dyn Cluster>,
        module: PolicyModule,
        config: ManagerConfig,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Arc<Self> {
        let boundary = Arc::new(
            Boundary::new(config.namespaces.iter().cloned())
                .with_network(config.cluster_network.clone()),
        );
        let refusals = metrics.clone();
        // Made first: the policy's deletes are checked against it.
        let cache_writer = CacheWriter::with_bounds(config.reconcile.object_bounds);
        let cache = cache_writer.reader();
        let context =
            CallContext::new(cluster.clone(), boundary, tokio::runtime::Handle::current())
                .with_children(Arc::new(cache_writer.clone()))
                .with_observer(Arc::new(move |record: HostCallRecord| {
                    if record.result == "deferred" {
                        refusals
                            .policy_writes_deferred
                            .with_label_values(&[record.resource.plural()])
                            .inc();
                    }
                    if record.result == "bounded" {
                        refusals
                            .policy_objects_bounded
                            .with_label_values(&["write"])
                            .inc();
                    }
                    if record.refused {
                        let rule = record.rule.map_or("unknown", |r| r.label());
                        refusals
                            .boundary_refusals
                            .with_label_values(&[record.verb, record.resource.plural(), rule])
                            .inc();
                    }
                }));
        health.set_policy(ActivePolicy::of(&module));
        let policy = PolicySlot::new(module, config.policy_source.clone());
        let reconciler = Reconciler::new(
            cluster.clone(),
            cache_writer.clone(),
            policy.clone(),
            context,
            metrics.clone(),
            config.reconcile.clone(),
        );
        // controller-runtime's series, there from the start: every worker may take either kind.
        let c = &metrics.controller;
        for kind in WorkKey::KINDS {
            for result in RESULTS {
                c.reconcile_total
                    .with_label_values(&[kind, result])
                    .inc_by(0);
            }
            c.reconcile_errors.with_label_values(&[kind]).inc_by(0);
            c.active_workers.with_label_values(&[kind]).set(0);
            c.max_concurrent_reconciles
                .with_label_values(&[kind])
                .set(config.concurrency.max(1) as i64);
        }
        let queue = WorkQueue::new(config.backoff, metrics.clone());
        // A claim waits on nothing but a free worker, while the refill behind it starts a
        // Pod per member: claims go first.
        let claims = cache.clone();
        queue.set_urgent(move |key| matches!(key, WorkKey::Sandbox(r) if claims.awaits_claim(r)));
        Arc::new(Self {
            cluster,
            cache,
            cache_writer,
            queue,
            policy,
            metrics,
            health,
            reconciler,
            config,
            processed: AtomicU64::new(0),
        })
    }

    /// Runs until `shutdown` turns true, then stops the ticks, lets in-flight reconciles finish
    /// within `shutdown_timeout`, and returns.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let mut background = JoinSet::new();
        let synced = self.spawn_reflectors(&mut background, &shutdown);
        background.spawn(self.clone().heartbeat(synced.clone(), shutdown.clone()));

        // No reconcile before every cache has listed once: a sandbox reconciled before its
        // Pods are in the cache would look as if it had none, and its children be sent again.
        let mut waiting = shutdown.clone();
        while !synced
            .iter()
            .all(|f| f.load(std::sync::atomic::Ordering::Acquire))
        {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = waiting.changed() => break,
            }
        }
        background.spawn(self.clone().reap_ticks(shutdown.clone()));
        background.spawn(self.clone().pool_ticks(shutdown.clone()));

        let mut workers = JoinSet::new();
        for _ in 0..self.config.concurrency.max(1) {
            let manager = self.clone();
            workers.spawn(async move {
                let leadership = manager.health.leadership.clone();
                while let Some(key) = manager.queue.next().await {
                    if !leadership.may_reconcile() {
                        // Not the leader (any more): keep the key for when this replica leads.
                        manager.queue.done(&key);
                        manager.queue.add(key);
                        tokio::select! {
                            _ = leadership.wait_until_leading() => {}
                            _ = manager.queue.closed() => {}
                        }
                        continue;
                    }
                    manager.process(key).await;
                }
            });
        }

        let mut shutdown_wait = shutdown.clone();
        let _ = shutdown_wait.wait_for(|stop| *stop).await;
        tracing::info!("shutting down: ticks stopped, finishing in-flight reconciles");
        self.queue.shut_down();
        let drained = tokio::time::timeout(self.config.shutdown_timeout, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                timeout = ?self.config.shutdown_timeout,
                "in-flight reconciles did not finish in time; they are retried after restart"
            );
            workers.abort_all();
        }
        background.abort_all();
    }

    /// Starts a reflector per watched scope of every namespace, filling the cache and the
    /// queue; each flag turns true once its first list is in the cache.
    pub fn spawn_reflectors(
        &self,
        tasks: &mut JoinSet<()>,
        shutdown: &watch::Receiver<bool>,
    ) -> Vec<Arc<AtomicBool>> {
        let mut synced = Vec::new();
        for namespace in &self.config.namespaces {
            for scope in reflector::scopes(namespace) {
                let flag = Arc::new(AtomicBool::new(false));
                synced.push(flag.clone());
                let reflector = Reflector {
                    cluster: self.cluster.clone(),
                    scope,
                    cache: self.cache_writer.clone(),
                    queue: self.queue.clone(),
                    synced: flag,
                };
                tasks.spawn(reflector.run(shutdown.clone()));
            }
        }
        synced
    }

    async fn heartbeat(
        self: Arc<Self>,
        synced: Vec<Arc<AtomicBool>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(Duration::from_millis(500));
        // Work since the last trim: a burst (the initial lists, a resync, a wave of creates,
        // a key retried between two beats) whose memory the allocator should hand back once
        // the queue has drained. Keys processed are counted, so that work done between two
        // beats counts too; a trim walks the heap, so at most one every TRIM_INTERVAL.
        let mut busy = true;
        let mut processed = 0;
        let mut last_trim: Option<Instant> = None;
        let mut last_prune = Instant::now();
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            self.health.beat();
            if !self.health.synced()
                && synced
                    .iter()
                    .all(|f| f.load(std::sync::atomic::Ordering::Acquire))
            {
                tracing::info!("cache synced");
                self.health.set_synced(true);
            }
            let done = self.processed.load(std::sync::atomic::Ordering::Relaxed);
            if done != processed {
                processed = done;
                busy = true;
            }
            let may_trim = last_trim.is_none_or(|at| at.elapsed() >= TRIM_INTERVAL);
            if !self.queue.is_empty() {
                busy = true;
            } else if busy && may_trim && self.health.synced() {
                busy = false;
                last_trim = Some(Instant::now());
                crate::allocator::trim();
            }
            self.update_gauges();
            if last_prune.elapsed() >= PRUNE_INTERVAL {
                last_prune = Instant::now();
                self.cache_writer
                    .prune_tombstones(super::cache::TOMBSTONE_TTL);
            }
        }
    }

    fn update_gauges(&self) {
        let counts = self.cache.counts();
        self.metrics.active_sandboxes.set(counts.active as i64);
        self.metrics.paused_sandboxes.set(counts.paused as i64);
        for (pool, ready) in counts.pools_ready {
            self.metrics
                .warmpool_ready
                .with_label_values(&[pool.namespace.as_str(), pool.name.as_str()])
                .set(i64::from(ready));
        }
        self.metrics.queue_depth.set(self.queue.len() as i64);
        let (charged, held) = self.cache.policy_object_bytes();
        for (part, bytes) in [("charged", charged), ("held", held)] {
            self.metrics
                .policy_object_bytes
                .with_label_values(&[part])
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        self.queue.update_unfinished_work();
    }

    async fn reap_ticks(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut interval = tokio::time::interval(self.config.reap_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            if !self.health.synced() || !self.health.leadership.may_reconcile() {
                continue;
            }
            if let Err(error) = self.reap().await {
                tracing::warn!(%error, "reap tick failed");
            }
        }
    }

    async fn pool_ticks(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut interval = tokio::time::interval(self.config.pool_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            if !self.health.leadership.may_reconcile() {
                continue;
            }
            self.metrics.pool_ticks.inc();
            for pool in self.cache.pool_keys() {
                self.queue.add(WorkKey::Pool(pool));
            }
        }
    }

    /// One reaper tick: the policy decides who is idle, namespace by namespace; each decision
    /// is marked in that sandbox's status and carried out by its next reconcile.
    pub async fn reap(&self) -> Result<usize, ReconcileError> {
        let started = Instant::now();
        let mut marked = Vec::new();
        for namespace in &self.config.namespaces {
            let pass = self.reconciler.reap(namespace, None).await;
            pass.outcome?;
            marked.extend(
                pass.carried
                    .reaped
                    .into_iter()
                    .map(|name| ObjectRef::new(namespace, name)),
            );
        }
        self.metrics.reap_ticks.inc();
        self.metrics
            .reap_tick_duration
            .observe(started.elapsed().as_secs_f64());
        let paused = marked.len();
        for target in marked {
            self.queue.add(WorkKey::Sandbox(target));
        }
        Ok(paused)
    }

    /// The uid of the object `key` names, as the cache holds it.
    fn uid_of(&self, key: &WorkKey) -> Option<String> {
        match key {
            WorkKey::Sandbox(target) => self.cache.sandbox(target).map(|o| o.sandbox.uid),
            WorkKey::Pool(target) => self.cache.pool(target).map(|o| o.pool.uid),
        }
    }

    /// One reconcile of the object `key` names.
    async fn reconcile(&self, key: &WorkKey) -> Pass {
        match key {
            WorkKey::Sandbox(target) => self.reconciler.sandbox(target).await,
            WorkKey::Pool(target) => self.reconciler.pool(target).await,
        }
    }

    /// Every object is reconciled again (under a new module, or a new share of a canary's),
    /// at the queue's normal rate.
    pub(crate) fn requeue_all(&self) {
        for key in self.cache.sandbox_keys() {
            self.queue.add(WorkKey::Sandbox(key));
        }
        for key in self.cache.pool_keys() {
            self.queue.add(WorkKey::Pool(key));
        }
    }

    /// Reconciles one key and does what the outcome asks of the queue: forget it, requeue it
    /// later, or retry it with backoff. A reconcile that asks to run again at once (a claim
    /// that just adopted its member, and now reports it) runs again on this worker, a few
    /// times at most: through the queue it would wait behind every key queued meanwhile.
    pub async fn process(&self, key: WorkKey) {
        for passes in 1.. {
            if self.pass(&key).await.is_none() {
                break;
            }
            if passes >= IMMEDIATE_PASSES {
                self.queue.add(key.clone());
                break;
            }
        }
        self.queue.done(&key);
    }

    /// One reconcile of `key`, counted, and what its outcome asks of the queue done, but a
    /// requeue at once: returned for [`Self::process`] to run.
    async fn pass(&self, key: &WorkKey) -> Option<Duration> {
        let key = key.clone();
        let started = Instant::now();
        let controller = key.kind();
        let runtime = &self.metrics.controller;
        let active = runtime.active_workers.with_label_values(&[controller]);
        active.inc();
        // During a canary the object's module is picked once, here, by its uid.
        let canary = self.policy.canary();
        let picked = canary
            .as_ref()
            .and_then(|_| self.uid_of(&key))
            .map(|uid| (self.policy.pick(&uid), uid));
        // A reconcile's future is large (tens of KiB), and a move copies all of it: it is
        // awaited where it is made, and boxed (one copy) only under a canary's scope.
        let Pass {
            outcome,
            carried: report,
        } = match &picked {
            Some(((module, _), _)) => {
                let work = Box::pin(self.reconcile(&key));
                PolicySlot::scope(module.clone(), work).await
            }
            None => self.reconcile(&key).await,
        };
        if let (Some(canary), Some(((_, on), uid))) = (&canary, &picked) {
            let counted = Outcome::of(&outcome, report.ready_seconds);
            canary.record(
                Some(uid),
                on.is_some(),
                report.export,
                counted,
                report.progress,
            );
        }
        let elapsed = started.elapsed().as_secs_f64();
        let result = match &outcome {
            Ok(_) => "ok",
            Err(error) => error.metric_label(),
        };
        self.metrics
            .reconciles
            .with_label_values(&[controller, result])
            .inc();
        self.metrics
            .reconcile_duration
            .with_label_values(&[controller, result])
            .observe(elapsed);
        // The same outcome as controller-runtime's reconcileHandler labels it.
        let runtime_result = match &outcome {
            Err(_) => {
                runtime
                    .reconcile_errors
                    .with_label_values(&[controller])
                    .inc();
                "error"
            }
            Ok(Action {
                requeue_after: Some(_),
            }) => "requeue_after",
            Ok(Action {
                requeue_after: None,
            }) => "success",
        };
        runtime
            .reconcile_total
            .with_label_values(&[controller, runtime_result])
            .inc();
        runtime
            .reconcile_time
            .with_label_values(&[controller])
            .observe(elapsed);
        let mut again = None;
        match outcome {
            Ok(action) => {
                self.queue.forget(&key);
                match action.requeue_after {
                    Some(Duration::ZERO) => again = Some(Duration::ZERO),
                    Some(delay) => self.queue.add_after(key.clone(), delay),
                    None => {}
                }
            }
            Err(error) => {
                let delay = match error.retry_after() {
                    Some(delay) => {
                        self.queue.add_after(key.clone(), delay);
                        delay
                    }
                    None => self.queue.add_rate_limited(key.clone()),
                };
                tracing::warn!(%key, %error, retry_in = ?delay, "reconcile failed");
            }
        }
        active.dec();
        self.processed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        again
    }
}
