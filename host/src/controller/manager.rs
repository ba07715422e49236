//! `ControllerManager`: reflectors fill the cache, workers reconcile keys through the policy,
//! ticks drive the idle reaper and the warm pools, and shutdown drains in-flight work.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rand::RngCore;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::cache::Cache;
use super::coalesce::HeldStatuses;
use super::health::{ActivePolicy, Health};
use super::inputs;
use super::policy::PolicySlot;
use super::queue::{Backoff, WorkKey, WorkQueue};
use super::reflector::{self, Reflector};
use super::writer::{Finalizing, Writer};
use crate::kube::boundary::Boundary;
use crate::kube::{ApiError, Cluster, Resource};
use crate::metrics::Metrics;
use crate::model::{ObjectRef, Unreadable, pool, sandbox, time};
use crate::runtime::bindings::KubeError;
use crate::runtime::{CallContext, Effect, GuestCall, HostCallRecord, PolicyModule, RuntimeError};

#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub namespaces: Vec<String>,
    pub concurrency: usize,
    pub reap_interval: Duration,
    pub pool_interval: Duration,
    pub max_pool_replicas: u32,
    pub shutdown_timeout: Duration,
    /// Bound of one API request made for the policy.
    pub host_call_timeout: Duration,
    pub backoff: Backoff,
    /// A sandbox whose Pod was just started is reported Pending only if it is still starting
    /// after this long: most become Running first, and one status write then says so.
    pub status_coalesce: Duration,
    /// Post Normal Events (Started, Paused, ...) as well as Warnings. Each is an API write.
    pub normal_events: bool,
}

impl ManagerConfig {
    /// Defaults for `namespaces`, as the command line has them.
    pub fn for_namespaces(namespaces: Vec<String>) -> Self {
        Self {
            namespaces,
            concurrency: 16,
            reap_interval: Duration::from_secs(30),
            pool_interval: Duration::from_secs(10),
            max_pool_replicas: 100,
            shutdown_timeout: Duration::from_secs(10),
            host_call_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            status_coalesce: Duration::from_secs(2),
            normal_events: false,
        }
    }
}

/// How often deletions older than the cache's tombstone TTL are forgotten.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// Why one reconcile failed; it is retried with backoff, the controller goes on.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("policy: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("policy's kube-client call failed: {0:?}")]
    Guest(KubeError),
    #[error("API: {0}")]
    Api(#[from] ApiError),
    #[error("the policy task ended abnormally: {0}")]
    Join(String),
}

impl ReconcileError {
    /// The `result` label of `cubepod_reconciles_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Runtime(e) => e.metric_label(),
            ReconcileError::Guest(_) => "guest_kube_error",
            ReconcileError::Api(_) => "api_error",
            ReconcileError::Join(_) => "panic",
        }
    }

    /// A delay the cause asked for (Retry-After), over the queue's backoff.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Guest(KubeError::Retryable(r)) => {
                Some(Duration::from_millis(r.delay_ms))
            }
            ReconcileError::Api(e) => e.retry_after,
            _ => None,
        }
    }
}

type Outcome = Result<Option<Duration>, ReconcileError>;

pub struct ControllerManager {
    pub cluster: Arc<dyn Cluster>,
    pub cache: Arc<Cache>,
    pub queue: Arc<WorkQueue>,
    pub policy: Arc<PolicySlot>,
    pub context: CallContext,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub config: ManagerConfig,
    held_statuses: HeldStatuses,
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
        let boundary = Arc::new(Boundary::new(config.namespaces.iter().cloned()));
        let refusals = metrics.clone();
        // Made first: the policy's deletes are checked against it.
        let cache = Arc::new(Cache::default());
        let context =
            CallContext::new(cluster.clone(), boundary, tokio::runtime::Handle::current())
                .with_host_call_timeout(config.host_call_timeout)
                .with_children(cache.clone())
                .with_observer(Arc::new(move |record: HostCallRecord| {
                    if record.refused {
                        let rule = record.rule.map_or("unknown", |r| r.label());
                        refusals
                            .boundary_refusals
                            .with_label_values(&[record.verb, record.resource.plural(), rule])
                            .inc();
                    }
                }));
        health.set_policy(ActivePolicy::of(&module));
        Arc::new(Self {
            cluster,
            cache,
            queue: WorkQueue::new(config.backoff),
            policy: PolicySlot::new(module),
            context,
            metrics,
            health,
            held_statuses: HeldStatuses::new(config.status_coalesce),
            config,
        })
    }

    /// Runs until `shutdown` turns true, then stops the ticks, lets in-flight reconciles finish
    /// within `shutdown_timeout`, and returns.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let mut background = JoinSet::new();
        let mut synced = Vec::new();
        for namespace in &self.config.namespaces {
            for scope in reflector::scopes(namespace) {
                let flag = Arc::new(AtomicBool::new(false));
                synced.push(flag.clone());
                let reflector = Reflector {
                    cluster: self.cluster.clone(),
                    scope,
                    cache: self.cache.clone(),
                    queue: self.queue.clone(),
                    synced: flag,
                };
                background.spawn(reflector.run(shutdown.clone()));
            }
        }
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

    async fn heartbeat(
        self: Arc<Self>,
        synced: Vec<Arc<AtomicBool>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(Duration::from_millis(500));
        // Work since the last trim: a burst (the initial lists, a resync, a wave of creates)
        // whose memory the allocator should hand back once the queue has drained.
        let mut busy = true;
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
            if !self.queue.is_empty() {
                busy = true;
            } else if busy && self.health.synced() {
                busy = false;
                crate::allocator::trim();
            }
            self.update_gauges();
            if last_prune.elapsed() >= PRUNE_INTERVAL {
                last_prune = Instant::now();
                self.cache.prune_tombstones(super::cache::TOMBSTONE_TTL);
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
        let now = time::now();
        let mut decided = Vec::new();
        for namespace in &self.config.namespaces {
            // Candidates and their versions side by side, matched up only for the few the
            // policy names: a tick over every sandbox must not pay for a table of them all.
            let (sandboxes, versions): (Vec<_>, Vec<_>) =
                self.cache.reap_candidates(namespace).into_iter().unzip();
            if sandboxes.is_empty() {
                continue;
            }
            let handed_namespace = namespace.clone();
            let call = self
                .call_guest("reap", move |module, context| {
                    let call = module.reap(context, now, &handed_namespace, &sandboxes)?;
                    Ok(call.map(|decisions| (decisions, sandboxes)))
                })
                .await?;
            let (decisions, sandboxes) = call.value;
            if decisions.is_empty() {
                continue;
            }
            let handed: HashMap<&str, &str> = sandboxes
                .iter()
                .zip(&versions)
                .map(|(c, version)| (c.name.as_str(), version.as_str()))
                .collect();
            for decision in decisions {
                let target = ObjectRef::new(&decision.namespace, &decision.name);
                // Only a sandbox the policy was handed may be paused: a decision about any
                // other is the policy's mistake, not an instruction.
                let version = handed
                    .get(decision.name.as_str())
                    .filter(|_| &decision.namespace == namespace);
                match version {
                    Some(version) => decided.push((decision, target, version.to_string())),
                    None => {
                        tracing::warn!(%target, "the reaper named a sandbox it was not given; ignored");
                    }
                }
            }
        }
        self.metrics.reap_ticks.inc();
        self.metrics
            .reap_tick_duration
            .observe(started.elapsed().as_secs_f64());
        let writer = self.writer();
        let mut paused = 0;
        for (decision, target, version) in decided {
            tracing::info!(
                namespace = %decision.namespace,
                name = %decision.name,
                idle_seconds = decision.idle_seconds,
                "pausing idle sandbox: {}",
                decision.reason
            );
            // Marked only over the version the decision saw: if the sandbox moved on since,
            // the next tick decides again on fresh data.
            let patch = serde_json::json!({"status": {"idlePausedAt": time::format(now)}});
            if let Err(error) = writer
                .write_status(Resource::Sandbox, &target, Some(&version), patch)
                .await
            {
                tracing::info!(%target, %error, "not marked idle this tick");
                continue;
            }
            self.metrics.reaps.inc();
            self.queue.add(WorkKey::Sandbox(target));
            paused += 1;
        }
        Ok(paused)
    }

    fn writer(&self) -> Writer<'_> {
        Writer {
            cluster: self.cluster.as_ref(),
            cache: &self.cache,
        }
    }

    async fn process(&self, key: WorkKey) {
        let started = Instant::now();
        let outcome = match &key {
            WorkKey::Sandbox(target) => self.reconcile_sandbox(target).await,
            WorkKey::Pool(target) => self.reconcile_pool(target).await,
        };
        let result = match &outcome {
            Ok(_) => "ok",
            Err(error) => error.metric_label(),
        };
        self.metrics
            .reconciles
            .with_label_values(&[key.kind(), result])
            .inc();
        self.metrics
            .reconcile_duration
            .with_label_values(&[key.kind(), result])
            .observe(started.elapsed().as_secs_f64());
        match outcome {
            Ok(requeue) => {
                self.queue.forget(&key);
                if let Some(delay) = requeue {
                    self.queue.add_after(key.clone(), delay);
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
        self.queue.done(&key);
    }

    /// Runs one export on a blocking thread with a fresh Store, and records what it cost.
    async fn call_guest<T, F>(
        &self,
        export: &'static str,
        call: F,
    ) -> Result<GuestCall<T>, ReconcileError>
    where
        T: Send + 'static,
        F: FnOnce(&PolicyModule, &CallContext) -> Result<GuestCall<T>, RuntimeError>
            + Send
            + 'static,
    {
        let module = self.policy.current();
        let context = self.context.clone();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || call(&module, &context))
            .await
            .map_err(|e| ReconcileError::Join(e.to_string()))?;
        self.metrics
            .guest_call_duration
            .with_label_values(&[export])
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(call) => {
                self.apply_effects(&call.effects);
                Ok(call)
            }
            Err(error) => {
                self.metrics
                    .guest_traps
                    .with_label_values(&[export, error.metric_label()])
                    .inc();
                Err(error.into())
            }
        }
    }

    /// What the policy wrote goes into the cache at once, so that it is not written again
    /// before the watch shows it.
    fn apply_effects(&self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::Applied {
                    resource, object, ..
                } => {
                    self.cache
                        .apply(*resource, crate::kube::WatchEventType::Modified, object);
                }
                Effect::Deleted { .. } => {
                    // A delete is not a disappearance: the object may linger (finalizers,
                    // graceful termination). The watch reports when it is gone.
                }
            }
        }
    }

    async fn reconcile_sandbox(&self, target: &ObjectRef) -> Outcome {
        let Some(mut object) = self.cache.sandbox(target) else {
            self.held_statuses.forget(target);
            if let Some(bad) = self.cache.unreadable_sandbox(target) {
                self.report_unreadable(Resource::Sandbox, target, &bad)
                    .await?;
            }
            return Ok(None);
        };
        let writer = self.writer();
        let now = time::now();
        if object.sandbox.deleting {
            if !object.has_finalizer() {
                return Ok(None);
            }
            let observed = self.cache.observed(target);
            let sandbox = object.sandbox.clone();
            let call = self
                .call_guest("cleanup-sandbox", move |module, context| {
                    module.cleanup_sandbox(context, now, sandbox, observed)
                })
                .await?;
            let out = call.value.map_err(ReconcileError::Guest)?;
            if out.done {
                tracing::info!(%target, "children deleted; removing the finalizer");
                writer.remove_finalizer(&object).await?;
            } else if sandbox::as_written(&out.status, object.sandbox.generation)
                != object.sandbox.status
            {
                let patch = sandbox::status_patch(&out.status, object.sandbox.generation);
                writer
                    .write_status(
                        Resource::Sandbox,
                        target,
                        Some(&object.resource_version),
                        patch,
                    )
                    .await?;
            }
            return Ok(None);
        }
        if !object.has_finalizer() {
            if writer.add_finalizer(&object).await? == Finalizing::Gone {
                // Deleted while we looked: creating children now would orphan them.
                self.held_statuses.forget(target);
                return Ok(None);
            }
            match self.cache.sandbox(target) {
                Some(updated) => object = updated,
                None => return Ok(None),
            }
        }
        let input = inputs::reconcile_input(&self.cache, &object.sandbox, now, fresh_token());
        let call = self
            .call_guest("reconcile-sandbox", move |module, context| {
                module.reconcile_sandbox(context, input)
            })
            .await?;
        let out = call.value.map_err(ReconcileError::Guest)?;
        if let Some(member) = &out.claim {
            let member_ref = ObjectRef::new(&target.namespace, member);
            let Some(member_object) = self.cache.sandbox(&member_ref) else {
                return Ok(Some(Duration::from_secs(1)));
            };
            writer.claim_member(&object.sandbox, &member_object).await?;
        }
        writer
            .post_events(
                "Sandbox",
                target,
                &object.sandbox.uid,
                &out.events,
                self.config.normal_events,
            )
            .await;
        // What the API will hold once written: a status that the API renders differently
        // (an empty reason, a time out of range) would otherwise differ on every pass.
        let status = sandbox::as_written(&out.status, object.sandbox.generation);
        if let Some(wait) = self
            .held_statuses
            .hold(target, &object.sandbox.status, &status, now)
        {
            return Ok(Some(wait));
        }
        if status != object.sandbox.status {
            let patch = sandbox::status_patch(&status, object.sandbox.generation);
            writer
                .write_status(
                    Resource::Sandbox,
                    target,
                    Some(&object.resource_version),
                    patch,
                )
                .await?;
        }
        Ok(out
            .requeue_after_seconds
            .map(|s| Duration::from_secs(u64::from(s))))
    }

    /// An object whose spec cannot be read gets a status and an Event that say which field
    /// and why, once per problem; nothing else is done for it until it is fixed.
    async fn report_unreadable(
        &self,
        resource: Resource,
        target: &ObjectRef,
        bad: &Unreadable,
    ) -> Result<(), ReconcileError> {
        if bad.reported {
            return Ok(());
        }
        tracing::warn!(%target, error = %bad.error, "cannot read the spec; fix it");
        let writer = self.writer();
        let patch = bad.status_patch(resource == Resource::Sandbox);
        writer
            .write_status(resource, target, Some(&bad.resource_version), patch)
            .await?;
        let event = crate::runtime::bindings::Event {
            kind: crate::runtime::bindings::EventType::Warning,
            reason: "InvalidSpec".to_string(),
            message: bad.error.to_string(),
        };
        writer
            .post_events(resource.kind(), target, &bad.uid, &[event], true)
            .await;
        Ok(())
    }

    async fn reconcile_pool(&self, target: &ObjectRef) -> Outcome {
        let Some(object) = self.cache.pool(target) else {
            if let Some(bad) = self.cache.unreadable_pool(target) {
                self.report_unreadable(Resource::PodWarmPool, target, &bad)
                    .await?;
            }
            return Ok(None);
        };
        let input = inputs::pool_input(
            &self.cache,
            &object.pool,
            time::now(),
            self.config.max_pool_replicas,
        );
        let call = self
            .call_guest("reconcile-pool", move |module, context| {
                module.reconcile_pool(context, input)
            })
            .await?;
        let out = call.value.map_err(ReconcileError::Guest)?;
        let writer = self.writer();
        for member in &out.create {
            writer
                .create_member(target, &member.name, &member.manifest)
                .await?;
        }
        let members = self.cache.pool_members(target);
        for name in &out.delete {
            if members.iter().any(|m| &m.name == name) {
                writer.delete_member(target, name).await?;
            }
        }
        writer
            .post_events(
                "PodWarmPool",
                target,
                &object.pool.uid,
                &out.events,
                self.config.normal_events,
            )
            .await;
        if pool::as_written(&out.status, object.pool.generation) != object.pool.status {
            let patch = pool::status_patch(&out.status, object.pool.generation);
            writer
                .write_status(
                    Resource::PodWarmPool,
                    target,
                    Some(&object.resource_version),
                    patch,
                )
                .await?;
        }
        Ok(None)
    }
}

/// A fresh credential for a sandbox whose Secret is created now: 32 random bytes, hex.
pub fn fresh_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}
