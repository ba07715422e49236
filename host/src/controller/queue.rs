//! A work queue keyed by object: a key waits at most once, is processed by one worker at a
//! time (a key added while it is processed runs again after), and failures back off per key
//! exponentially, with jitter, up to a cap. It keeps client-go's workqueue metrics (`workqueue_*`)
//! as client-go's queue does, per controller (the key's kind): one queue serves both.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashSet};
use rand::Rng;
use tokio::sync::Notify;

use prometheus::{Gauge, Histogram, IntCounter, IntGauge};

use crate::metrics::Metrics;
use cubepod_policy_host::model::ObjectRef;

/// What a worker reconciles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkKey {
    /// A Sandbox.
    Sandbox(ObjectRef),
    /// A WarmPool.
    Pool(ObjectRef),
}

impl WorkKey {
    /// Every [`WorkKey::kind`]: the controllers, as the metrics name them.
    pub(crate) const KINDS: [&'static str; 2] = ["sandbox", "podwarmpool"];

    /// Its position in [`WorkKey::KINDS`].
    fn index(&self) -> usize {
        match self {
            WorkKey::Sandbox(_) => 0,
            WorkKey::Pool(_) => 1,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            WorkKey::Sandbox(_) => "sandbox",
            WorkKey::Pool(_) => "podwarmpool",
        }
    }
}

impl std::fmt::Display for WorkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkKey::Sandbox(r) => write!(f, "sandbox {r}"),
            WorkKey::Pool(r) => write!(f, "podwarmpool {r}"),
        }
    }
}

/// The retry delays of a failing key: doubling from `base`, capped at `max`, jittered.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base: Duration,
    /// The cap on the delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(200),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The delay after `failures` failures in a row: base * 2^(failures-1), capped, with ±20%
    /// jitter so that keys that failed together do not retry together.
    pub(crate) fn delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(30);
        let raw = self.base.saturating_mul(1u32 << exponent).min(self.max);
        let jitter = rand::rng().random_range(0.8..1.2);
        raw.mul_f64(jitter).min(self.max)
    }
}

#[derive(Default)]
struct Inner {
    /// Keys served before any of `queue`'s ([`WorkQueue::set_urgent`]).
    urgent: VecDeque<WorkKey>,
    queue: VecDeque<WorkKey>,
    dirty: HashSet<WorkKey>,
    processing: HashSet<WorkKey>,
    failures: HashMap<WorkKey, u32>,
    /// When each dirty key was first added (for `workqueue_queue_duration_seconds`).
    added_at: HashMap<WorkKey, Instant>,
    /// When each key in processing was taken (for `workqueue_work_duration_seconds`).
    started_at: HashMap<WorkKey, Instant>,
    /// The delayed adds still waiting, by key (ids of [`WorkQueue::add_after`]'s timers). A
    /// key taken to be processed drops them: that reconcile reads the state afresh and asks
    /// for its own requeue, so an earlier one's would only repeat it (a new sandbox's held
    /// Pending status, written Running by the next reconcile, had cost one more that found
    /// nothing to do).
    timers: HashMap<WorkKey, Vec<u64>>,
    next_timer: u64,
    shut_down: bool,
}

/// How long a pool woken by a change of a member waits before it is queued
/// ([`WorkQueue::add_woken`]).
pub(crate) const POOL_SETTLE: Duration = Duration::from_millis(100);

/// Which keys go before the others.
type Urgency = Box<dyn Fn(&WorkKey) -> bool + Send + Sync>;

impl Inner {
    fn push(&mut self, key: WorkKey, urgent: bool) {
        if urgent {
            self.urgent.push_back(key);
        } else {
            self.queue.push_back(key);
        }
    }

    fn pop(&mut self) -> Option<WorkKey> {
        self.urgent.pop_front().or_else(|| self.queue.pop_front())
    }

    fn waiting(&self) -> usize {
        self.urgent.len() + self.queue.len()
    }
}

/// The keys to reconcile: deduplicated, each processed by one worker at a time.
pub struct WorkQueue {
    inner: Mutex<Inner>,
    urgent: std::sync::OnceLock<Urgency>,
    notify: Notify,
    backoff: Backoff,
    /// One controller's `workqueue_*` series each, by [`WorkKey::index`].
    metrics: [QueueSeries; 2],
}

/// The `workqueue_*` series of one controller (`name` and `controller` both its name).
struct QueueSeries {
    depth: IntGauge,
    adds: IntCounter,
    retries: IntCounter,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished_work: Gauge,
    longest_running_processor: Gauge,
}

impl QueueSeries {
    /// Made with the queue, so that every series exists from the start, as in client-go.
    fn of(metrics: &Metrics, kind: &str) -> Self {
        let m = &metrics.workqueue;
        let labels = [kind, kind];
        Self {
            // controller-runtime's depth has a priority label, empty without a priority queue.
            depth: m.depth.with_label_values(&[kind, kind, ""]),
            adds: m.adds.with_label_values(&labels),
            retries: m.retries.with_label_values(&labels),
            queue_duration: m.queue_duration.with_label_values(&labels),
            work_duration: m.work_duration.with_label_values(&labels),
            unfinished_work: m.unfinished_work.with_label_values(&labels),
            longest_running_processor: m.longest_running_processor.with_label_values(&labels),
        }
    }
}

impl WorkQueue {
    pub(crate) fn new(backoff: Backoff, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            urgent: std::sync::OnceLock::new(),
            notify: Notify::new(),
            backoff,
            metrics: WorkKey::KINDS.map(|kind| QueueSeries::of(&metrics, kind)),
        })
    }

    /// Keys for which `urgent` holds are taken before every other waiting key (a claim
    /// before the refill of its pool). Set once; later calls are ignored.
    pub(crate) fn set_urgent(&self, urgent: impl Fn(&WorkKey) -> bool + Send + Sync + 'static) {
        let _ = self.urgent.set(Box::new(urgent));
    }

    /// Whether `key` goes first; asked before the queue's lock is taken, since it may read
    /// other state.
    fn is_urgent(&self, key: &WorkKey) -> bool {
        self.urgent.get().is_some_and(|urgent| urgent(key))
    }

    fn series(&self, key: &WorkKey) -> &QueueSeries {
        &self.metrics[key.index()]
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A worker that panicked while holding the lock left the sets consistent: every
        // mutation below is a single insert or remove.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` (once, however often it is added before a worker takes it).
    pub fn add(&self, key: WorkKey) {
        let urgent = self.is_urgent(&key);
        let mut inner = self.lock();
        if inner.shut_down || !inner.dirty.insert(key.clone()) {
            return;
        }
        // As client-go counts: an add that is not a duplicate, waiting until taken.
        let series = self.series(&key);
        series.adds.inc();
        series.depth.inc();
        inner
            .added_at
            .entry(key.clone())
            .or_insert_with(Instant::now);
        if !inner.processing.contains(&key) {
            inner.push(key, urgent);
            drop(inner);
            self.notify.notify_one();
        }
    }

    pub(crate) fn add_after(self: &Arc<Self>, key: WorkKey, delay: Duration) {
        if self.lock().shut_down {
            return;
        }
        // client-go's delaying queue counts every AddAfter as a retry.
        self.series(&key).retries.inc();
        self.schedule(key, delay);
    }

    /// A key a watch event woke. A pool's waits [`POOL_SETTLE`], once: a burst of changes to
    /// its members (claims adopting one after another) is then one reconcile of the pool, run
    /// after the burst, rather than one per member in its midst. A sandbox's goes at once.
    pub(crate) fn add_woken(self: &Arc<Self>, key: WorkKey) {
        if matches!(key, WorkKey::Sandbox(_)) {
            return self.add(key);
        }
        {
            let inner = self.lock();
            if inner.shut_down || inner.dirty.contains(&key) || inner.timers.contains_key(&key) {
                return;
            }
        }
        self.schedule(key, POOL_SETTLE);
    }

    /// Adds `key` once `delay` has passed, unless it is taken to be processed before.
    fn schedule(self: &Arc<Self>, key: WorkKey, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let id = {
            let mut inner = self.lock();
            inner.next_timer = inner.next_timer.wrapping_add(1);
            let id = inner.next_timer;
            inner.timers.entry(key.clone()).or_default().push(id);
            id
        };
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(queue) = queue.upgrade() {
                let due = {
                    let mut inner = queue.lock();
                    match inner.timers.get_mut(&key) {
                        Some(ids) if ids.contains(&id) => {
                            ids.retain(|other| *other != id);
                            if ids.is_empty() {
                                inner.timers.remove(&key);
                            }
                            true
                        }
                        // The key was processed since: that reconcile asked for its own.
                        _ => false,
                    }
                };
                if due {
                    queue.add(key);
                }
            }
        });
    }

    /// Requeues a failed key after its backoff; returns the delay.
    pub(crate) fn add_rate_limited(self: &Arc<Self>, key: WorkKey) -> Duration {
        let failures = {
            let mut inner = self.lock();
            let count = inner.failures.entry(key.clone()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        let delay = self.backoff.delay(failures);
        self.add_after(key, delay);
        delay
    }

    /// Forgets a key's failures after it succeeded.
    pub(crate) fn forget(&self, key: &WorkKey) {
        self.lock().failures.remove(key);
    }

    /// The next key to process, or `None` once the queue is shut down.
    pub(crate) async fn next(&self) -> Option<WorkKey> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.lock();
                if inner.shut_down {
                    return None;
                }
                if let Some(key) = inner.pop() {
                    inner.dirty.remove(&key);
                    inner.timers.remove(&key);
                    inner.processing.insert(key.clone());
                    let now = Instant::now();
                    let series = self.series(&key);
                    series.depth.dec();
                    if let Some(added) = inner.added_at.remove(&key) {
                        series
                            .queue_duration
                            .observe(now.duration_since(added).as_secs_f64());
                    }
                    inner.started_at.insert(key.clone(), now);
                    let more = inner.waiting() > 0;
                    drop(inner);
                    if more {
                        // Wake another worker: notify_one stored one permit for this key only.
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// Marks a key processed; if it was added meanwhile, it is queued again.
    pub(crate) fn done(&self, key: &WorkKey) {
        let urgent = self.is_urgent(key);
        let mut inner = self.lock();
        inner.processing.remove(key);
        if let Some(started) = inner.started_at.remove(key) {
            self.series(key)
                .work_duration
                .observe(started.elapsed().as_secs_f64());
        }
        if inner.dirty.contains(key) && !inner.shut_down {
            inner.push(key.clone(), urgent);
            drop(inner);
            self.notify.notify_one();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().waiting()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys being processed now.
    pub fn in_flight(&self) -> usize {
        self.lock().processing.len()
    }

    /// Sets `workqueue_unfinished_work_seconds` (the time so far of every key in processing)
    /// and `workqueue_longest_running_processor_seconds`; client-go does this every 500 ms.
    pub(crate) fn update_unfinished_work(&self) {
        let inner = self.lock();
        let now = Instant::now();
        let mut totals = [(0.0_f64, 0.0_f64); 2];
        for (key, started) in &inner.started_at {
            let seconds = now.duration_since(*started).as_secs_f64();
            let (total, longest) = &mut totals[key.index()];
            *total += seconds;
            *longest = longest.max(seconds);
        }
        for (series, (total, longest)) in self.metrics.iter().zip(totals) {
            series.unfinished_work.set(total);
            series.longest_running_processor.set(longest);
        }
    }

    /// Resolves once the queue is shut down.
    pub(crate) async fn closed(&self) {
        loop {
            let notified = self.notify.notified();
            if self.lock().shut_down {
                return;
            }
            notified.await;
        }
    }

    pub(crate) fn shut_down(&self) {
        self.lock().shut_down = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> WorkKey {
        WorkKey::Sandbox(ObjectRef::new("ns", name))
    }

    #[tokio::test]
    async fn a_key_waits_once_and_runs_again_if_added_while_processed() {
        let queue = WorkQueue::new(Backoff::default(), Arc::new(Metrics::new()));
        queue.add(key("a"));
        queue.add(key("a"));
        queue.add(key("b"));
        assert_eq!(queue.len(), 2);
        let first = queue.next().await.unwrap();
        assert_eq!(first, key("a"));
        queue.add(key("a"));
        // While "a" is processed it is not handed to a second worker.
        assert_eq!(queue.next().await.unwrap(), key("b"));
        assert_eq!(queue.len(), 0);
        queue.done(&first);
        assert_eq!(queue.next().await.unwrap(), key("a"));
    }

    #[tokio::test]
    async fn a_requeue_is_dropped_once_the_key_was_processed_again_and_kept_otherwise() {
        let queue = WorkQueue::new(Backoff::default(), Arc::new(Metrics::new()));
        queue.add_after(key("a"), Duration::from_millis(50));
        queue.add_after(key("b"), Duration::from_millis(50));
        // "a" changes before its requeue is due: processed now, it asks for no requeue.
        queue.add(key("a"));
        let taken = queue.next().await.unwrap();
        assert_eq!(taken, key("a"));
        queue.done(&taken);
        tokio::time::sleep(Duration::from_millis(200)).await;
        // "b"'s requeue comes; "a"'s, made before its last reconcile, does not.
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.next().await.unwrap(), key("b"));
    }

    #[tokio::test]
    async fn workqueue_metrics_count_as_client_go_does() {
        let metrics = Arc::new(Metrics::new());
        let queue = WorkQueue::new(Backoff::default(), metrics.clone());
        let pool = WorkKey::Pool(ObjectRef::new("ns", "p"));
        for k in [&key("a"), &pool] {
            assert_eq!(WorkKey::KINDS[k.index()], k.kind());
        }
        let m = &metrics.workqueue;
        let depth = |kind: &str| m.depth.with_label_values(&[kind, kind, ""]).get();
        let adds = |kind: &str| m.adds.with_label_values(&[kind, kind]).get();
        queue.add(key("a"));
        queue.add(key("a")); // a duplicate is no add
        queue.add(key("b"));
        queue.add(pool.clone());
        assert_eq!((adds("sandbox"), depth("sandbox")), (2, 2));
        assert_eq!((adds("podwarmpool"), depth("podwarmpool")), (1, 1));
        let a = queue.next().await.unwrap();
        assert_eq!(depth("sandbox"), 1);
        queue.add(key("a")); // added while processed: waits again
        assert_eq!((adds("sandbox"), depth("sandbox")), (3, 2));
        queue.done(&a);
        let work = |kind: &str| m.work_duration.with_label_values(&[kind, kind]);
        assert_eq!(work("sandbox").get_sample_count(), 1);
        while !queue.is_empty() {
            let k = queue.next().await.unwrap();
            queue.done(&k);
        }
        assert_eq!((depth("sandbox"), depth("podwarmpool")), (0, 0));
        let queued = |kind: &str| m.queue_duration.with_label_values(&[kind, kind]);
        assert_eq!(queued("sandbox").get_sample_count(), 3);
        assert_eq!(queued("podwarmpool").get_sample_count(), 1);
        queue.add_rate_limited(pool);
        assert_eq!(
            m.retries
                .with_label_values(&["podwarmpool", "podwarmpool"])
                .get(),
            1
        );
    }

    #[tokio::test]
    async fn urgent_keys_are_taken_before_the_others() {
        let queue = WorkQueue::new(Backoff::default(), Arc::new(Metrics::new()));
        queue.set_urgent(|k| matches!(k, WorkKey::Sandbox(r) if r.name.starts_with("claim")));
        queue.add(WorkKey::Pool(ObjectRef::new("ns", "pool")));
        queue.add(key("member-0"));
        queue.add(key("claim-a"));
        queue.add(key("claim-b"));
        let mut order = Vec::new();
        while !queue.is_empty() {
            let k = queue.next().await.unwrap();
            order.push(k.to_string());
            queue.done(&k);
        }
        assert_eq!(
            order,
            [
                "sandbox ns/claim-a",
                "sandbox ns/claim-b",
                "podwarmpool ns/pool",
                "sandbox ns/member-0"
            ]
        );
    }

    #[tokio::test]
    async fn a_pool_woken_many_times_is_queued_once_after_it_settles() {
        let queue = WorkQueue::new(Backoff::default(), Arc::new(Metrics::new()));
        let pool = WorkKey::Pool(ObjectRef::new("ns", "p"));
        for _ in 0..50 {
            queue.add_woken(pool.clone());
        }
        queue.add_woken(key("a"));
        assert_eq!(queue.len(), 1, "a sandbox is queued at once");
        assert_eq!(queue.next().await.unwrap(), key("a"));
        tokio::time::sleep(POOL_SETTLE * 3).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.next().await.unwrap(), pool);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert!(backoff.delay(1) <= Duration::from_millis(120));
        assert!(backoff.delay(3) >= Duration::from_millis(320));
        assert!(backoff.delay(40) <= Duration::from_secs(1));
    }

    #[tokio::test]
    async fn shut_down_releases_waiting_workers() {
        let queue = WorkQueue::new(Backoff::default(), Arc::new(Metrics::new()));
        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.next().await })
        };
        tokio::task::yield_now().await;
        queue.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
