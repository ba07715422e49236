//! Kubernetes Events on our objects: what `kubectl describe` shows a user.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

use foldhash::HashMap;
use rand::RngCore;

use serde_json::{Value, json};

use cubepod_policy_host::containment::rates::{
    DEFAULT_EVENT_BURST, EVENT_REFILL, Take, TokenBuckets,
};
use cubepod_policy_host::model::{ObjectRef, time};
use cubepod_policy_host::runtime::bindings::{Event, EventType};

use cubepod_kube::{Cluster, Resource};

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// This process's share of every Event name: random, so that two replicas, or a restart within
/// the same second, never pick the same names (the counter alone restarts at zero).
fn process_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| rand::rng().next_u64())
}

/// The longest object name an Event is named after: its name must stay a valid DNS subdomain
/// (253 characters) with the suffix.
const NAME_PREFIX: usize = 253 - 1 - 16 - 16 - 16;

/// A name no other Event gets: `<object>.<time><process><sequence>`, all hex. The sequence is
/// 64 bits and never wraps in a process's life; the process part tells processes apart.
pub(crate) fn event_name(object: &str, now: i64) -> String {
    let mut end = object.len().min(NAME_PREFIX);
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = object[..end].trim_end_matches(['.', '-']);
    format!(
        "{prefix}.{:x}{:016x}{:x}",
        now.max(0),
        process_id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

/// An Event's `type`, as the API spells it.
pub(crate) fn type_name(kind: EventType) -> &'static str {
    match kind {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// A core/v1 Event about `kind` `namespace/name` (uid `uid`).
pub(crate) fn event_object(
    kind: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    event: &Event,
    now: i64,
) -> Value {
    let stamp = time::format(now);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(name, now), "namespace": namespace},
        "involvedObject": {
            "apiVersion": "cubepod.io/v1alpha1", "kind": kind,
            "namespace": namespace, "name": name, "uid": uid,
        },
        "reason": event.reason,
        "message": event.message,
        "type": type_name(event.kind),
        "source": {"component": "cubepod-controller"},
        "reportingComponent": "cubepod-controller",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        // What events.k8s.io/v1 requires of every Event (its clients refuse one without):
        // when, who reported it, and what was done.
        "eventTime": micro_time(&stamp),
        "action": event.reason,
        "reportingInstance": reporting_instance(),
    })
}

/// An RFC 3339 time in seconds as a `MicroTime` (six fractional digits).
fn micro_time(stamp: &str) -> String {
    format!("{}.000000Z", stamp.trim_end_matches('Z'))
}

/// This controller's instance, as an Event's `reportingInstance`: the host (in a cluster, the
/// Pod's name), as client-go's event recorders name it.
fn reporting_instance() -> String {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE
        .get_or_init(|| match std::env::var("HOSTNAME") {
            Ok(host) if !host.is_empty() => format!("cubepod-controller-{host}"),
            _ => "cubepod-controller".to_owned(),
        })
        .clone()
}

/// Events remembered for aggregation at most, as client-go's correlator's LRU.
const REMEMBERED: usize = 4096;

/// What makes two Events the same one, as client-go's aggregator keys them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    kind: String,
    object: ObjectRef,
    uid: String,
    warning: bool,
    reason: String,
    message: String,
}

/// An Event posted, and how many times it happened.
struct Posted {
    name: String,
    count: u64,
}

/// Whose Events a bucket counts: the policy's and the controller's own have one bucket each
/// per object, so that a policy's flood never silences what the controller has to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Policy,
    Controller,
}

/// Events about one object, to be posted: by the recorder at once, or by the queue after the
/// reconcile that asked for them.
#[derive(Clone, Copy)]
pub(crate) struct Posting<'a> {
    /// The object's kind (`Sandbox`, `PodWarmPool`, `PolicyRollout`).
    pub(crate) kind: &'a str,
    pub(crate) target: &'a ObjectRef,
    pub(crate) uid: &'a str,
    pub(crate) events: &'a [Event],
    pub(crate) source: Source,
    /// Whether Normal Events are written, or only logged (Warnings always are).
    pub(crate) post_normal: bool,
    pub(crate) now: i64,
}

impl<'a> Posting<'a> {
    /// The controller's own Events, Normal ones written too.
    pub(crate) fn by_controller(
        kind: &'a str,
        target: &'a ObjectRef,
        uid: &'a str,
        events: &'a [Event],
        now: i64,
    ) -> Self {
        Self {
            kind,
            target,
            uid,
            events,
            source: Source::Controller,
            post_normal: true,
            now,
        }
    }
}

/// What the recorder does with one Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// A new Event object.
    Create(Value),
    /// A repeat: the Event `name` gets this `count` and `lastTimestamp`.
    Repeat { name: String, patch: Value },
    /// Past the object's rate: counted, not written. `first` for the first since the
    /// object's bucket was last full: the one to tell of.
    RateLimited { first: bool },
}

/// Events as client-go's recorder posts them: a repeat of an Event (the same object, type,
/// reason and message) increments the first one's `count` and `lastTimestamp` rather than
/// creating another object, and each object gets `--event-burst` Events at once, then one per
/// [`EVENT_REFILL`], whatever their reasons and messages (the bucket is the object's, per
/// `Source`); the ones past that are counted (`cubepod_events_total{result="rate_limited"}`).
pub struct Recorder {
    inner: Mutex<RecorderState>,
    buckets: TokenBuckets<(String, ObjectRef, Source)>,
    /// Where each Event's result is counted (`cubepod_events_total`).
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::with_burst(None, DEFAULT_EVENT_BURST)
    }
}

#[derive(Default)]
struct RecorderState {
    posted: HashMap<EventKey, Posted>,
    /// `posted`'s keys, oldest first.
    order: VecDeque<EventKey>,
}

impl Recorder {
    pub(crate) fn new(metrics: std::sync::Arc<crate::metrics::Metrics>, burst: u32) -> Self {
        Self::with_burst(Some(metrics), burst)
    }

    fn with_burst(metrics: Option<std::sync::Arc<crate::metrics::Metrics>>, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            inner: Mutex::default(),
            // One token per EVENT_REFILL after the burst.
            buckets: TokenBuckets::new(burst, 1.0 / EVENT_REFILL.as_secs_f64()),
            metrics,
        }
    }

    /// Counts what became of an Event of `kind`.
    pub(crate) fn count(&self, kind: EventType, result: &str) {
        if let Some(metrics) = &self.metrics {
            metrics
                .events
                .with_label_values(&[type_name(kind), result])
                .inc();
        }
    }

    /// Events an object may get at once (`--event-burst`).
    pub(crate) fn burst(&self) -> u32 {
        self.buckets.capacity() as u32
    }

    fn lock(&self) -> MutexGuard<'_, RecorderState> {
        // Each mutation below leaves the maps consistent: a panic under the lock cannot tear them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What to write for `event` of `source` about `kind` `target` (uid `uid`) at `now`.
    pub(crate) fn record(
        &self,
        kind: &str,
        target: &ObjectRef,
        uid: &str,
        event: &Event,
        source: Source,
        now: i64,
    ) -> Record {
        let bucket = (kind.to_string(), target.clone(), source);
        if let Take::Deferred { first, .. } = self.buckets.take(&bucket, 1.0, Instant::now()) {
            return Record::RateLimited { first };
        }
        let mut state = self.lock();
        let key = EventKey {
            kind: kind.to_string(),
            object: target.clone(),
            uid: uid.to_string(),
            warning: event.kind == EventType::Warning,
            reason: event.reason.clone(),
            message: event.message.clone(),
        };
        if let Some(posted) = state.posted.get_mut(&key) {
            posted.count += 1;
            return Record::Repeat {
                name: posted.name.clone(),
                patch: json!({"count": posted.count, "lastTimestamp": time::format(now)}),
            };
        }
        let object = event_object(kind, &target.namespace, &target.name, uid, event, now);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if state.order.len() >= REMEMBERED
            && let Some(oldest) = state.order.pop_front()
        {
            state.posted.remove(&oldest);
        }
        state.order.push_back(key.clone());
        state.posted.insert(key, Posted { name, count: 1 });
        Record::Create(object)
    }

    /// The repeat of `name` could not be written (the Event expired or was deleted): the next
    /// occurrence creates a new one.
    pub(crate) fn forget(&self, name: &str) {
        let mut state = self.lock();
        state.posted.retain(|_, posted| posted.name != name);
        let RecorderState { posted, order, .. } = &mut *state;
        order.retain(|key| posted.contains_key(key));
    }
}

impl Recorder {
    /// Logs every Event in plain words and posts the Warnings to `cluster`, and the Normal
    /// ones when `post_normal` (each is an API write, and the status conditions already record
    /// every transition). A failure to post is logged, never fails the reconcile. The first of
    /// the policy's Events past its object's rate is told once, by an Event of the
    /// controller's.
    pub(crate) async fn post(&self, cluster: &dyn Cluster, posting: &Posting<'_>) {
        let Posting {
            kind,
            target,
            events,
            source,
            post_normal,
            ..
        } = *posting;
        for event in events {
            tracing::info!(
                kind,
                namespace = %target.namespace,
                name = %target.name,
                reason = %event.reason,
                "{}",
                event.message
            );
            if event.kind == EventType::Normal && !post_normal {
                continue;
            }
            let result = self.write(cluster, posting, event).await;
            self.count(event.kind, result.label());
            if matches!(result, Written::RateLimited { first: true }) {
                let burst = self.burst();
                tracing::warn!(
                    kind,
                    namespace = %target.namespace,
                    name = %target.name,
                    ?source,
                    burst,
                    "Events past the object's rate: the rest are counted, not written"
                );
                if source == Source::Policy {
                    let told = Event {
                        kind: EventType::Warning,
                        reason: "EventsRateLimited".to_string(),
                        message: format!(
                            "the policy asked for more Events on this {kind} than its rate \
                             allows ({burst} at once, then one per 5 minutes: --event-burst): \
                             the rest are counted in cubepod_events_total{{result=\"rate_limited\"}}, \
                             not written"
                        ),
                    };
                    let by_controller = Posting {
                        source: Source::Controller,
                        ..*posting
                    };
                    let result = self.write(cluster, &by_controller, &told).await;
                    self.count(told.kind, result.label());
                }
            }
        }
    }

    /// Writes one Event as [`Self::record`] says: a new one, or a repeat counted on the first
    /// (a new one if that is gone: Events expire). What was done, for the metric.
    async fn write(&self, cluster: &dyn Cluster, posting: &Posting<'_>, event: &Event) -> Written {
        let Posting {
            kind,
            target,
            uid,
            source,
            now,
            ..
        } = *posting;
        let ns = &target.namespace;
        let object = match self.record(kind, target, uid, event, source, now) {
            Record::RateLimited { first } => {
                tracing::debug!(kind, %target, reason = %event.reason, "Event past its object's rate");
                return Written::RateLimited { first };
            }
            Record::Create(object) => object,
            Record::Repeat { name, patch } => {
                match cluster.patch(Resource::Event, ns, &name, patch).await {
                    Ok(_) => return Written::Aggregated,
                    Err(error) => {
                        tracing::debug!(%error, "could not count a repeat on its Event");
                        self.forget(&name);
                        match self.record(kind, target, uid, event, source, now) {
                            Record::Create(object) => object,
                            _ => return Written::Failed,
                        }
                    }
                }
            }
        };
        match cluster.create(Resource::Event, ns, object).await {
            Ok(_) => Written::Created,
            Err(error) => {
                tracing::debug!(%error, "could not record an Event");
                Written::Failed
            }
        }
    }
}

/// What became of one Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    Created,
    Aggregated,
    RateLimited { first: bool },
    Failed,
}

impl Written {
    /// The `result` of `cubepod_events_total`.
    fn label(self) -> &'static str {
        match self {
            Written::Created => "created",
            Written::Aggregated => "aggregated",
            Written::RateLimited { .. } => "rate_limited",
            Written::Failed => "failed",
        }
    }
}

/// Events queued at most before more are dropped, as client-go's broadcaster (its
/// `maxQueuedEvents`): what a burst of reconciles may hand over faster than the API takes them.
pub const DEFAULT_EVENT_QUEUE: usize = 1000;

/// Event writes in flight at once from the queue: a burst's Events are written side by side,
/// as the reconciles' other requests are, rather than one round trip after another.
const EVENTS_IN_FLIGHT: usize = 16;

/// A reconcile's Events handed over to be written after it, as client-go's recorder does: the
/// reconcile (a claim's adoption, a status) does not wait on the Event's API write. The queue
/// is bounded ([`DEFAULT_EVENT_QUEUE`]); an Event that finds it full is dropped and counted
/// (`cubepod_events_total{result="dropped"}`). The writes themselves are [`Recorder::post`]'s,
/// the same aggregation and rate as when a reconcile writes them.
pub(crate) struct EventQueue {
    sender: mpsc::Sender<Queued>,
    recorder: Arc<Recorder>,
    /// Whether Events were dropped since the queue last took one: the warning is said once per
    /// overflow, not once per Event dropped.
    overflowing: AtomicBool,
}

/// What the queue's writer task takes.
enum Queued {
    Post(Batch),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// One reconcile's Events about one object.
struct Batch {
    kind: String,
    target: ObjectRef,
    uid: String,
    events: Vec<Event>,
    source: Source,
    post_normal: bool,
    now: i64,
}

impl Batch {
    fn posting(&self) -> Posting<'_> {
        Posting {
            kind: &self.kind,
            target: &self.target,
            uid: &self.uid,
            events: &self.events,
            source: self.source,
            post_normal: self.post_normal,
            now: self.now,
        }
    }
}

impl EventQueue {
    /// A queue of `capacity` Events, written to `cluster` by a task on `runtime` that ends when
    /// the queue is dropped (after writing what it holds).
    pub(crate) fn start(
        runtime: &tokio::runtime::Handle,
        capacity: usize,
        cluster: Arc<dyn Cluster>,
        recorder: Arc<Recorder>,
    ) -> Self {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        runtime.spawn(write_queued(receiver, cluster, recorder.clone()));
        Self {
            sender,
            recorder,
            overflowing: AtomicBool::new(false),
        }
    }

    /// Hands `events` over to be written; returns at once. Past the queue's bound the Events
    /// are dropped, each counted, and the first of each overflow is warned of.
    pub(crate) fn post(&self, posting: &Posting<'_>) {
        if posting.events.is_empty() {
            return;
        }
        let batch = Batch {
            kind: posting.kind.to_string(),
            target: posting.target.clone(),
            uid: posting.uid.to_string(),
            events: posting.events.to_vec(),
            source: posting.source,
            post_normal: posting.post_normal,
            now: posting.now,
        };
        let error = match self.sender.try_send(Queued::Post(batch)) {
            Ok(()) => {
                self.overflowing.store(false, Ordering::Relaxed);
                return;
            }
            Err(error) => error,
        };
        let (mpsc::error::TrySendError::Full(Queued::Post(batch))
        | mpsc::error::TrySendError::Closed(Queued::Post(batch))) = error
        else {
            return;
        };
        for event in &batch.events {
            self.recorder.count(event.kind, "dropped");
        }
        if !self.overflowing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                kind = posting.kind,
                target = %posting.target,
                capacity = self.sender.max_capacity(),
                "the Event queue is full: Events are dropped, not written, until it drains \
                 (counted in cubepod_events_total{{result=\"dropped\"}})"
            );
        }
    }

    /// Waits until every Event queued so far has been written (or failed).
    pub(crate) async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.sender.send(Queued::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// The queue's writer: up to [`EVENTS_IN_FLIGHT`] batches written at once; a flush is answered
/// once every batch taken before it is done.
async fn write_queued(
    mut queue: mpsc::Receiver<Queued>,
    cluster: Arc<dyn Cluster>,
    recorder: Arc<Recorder>,
) {
    let write = |batch: Batch| {
        let (cluster, recorder) = (cluster.clone(), recorder.clone());
        async move {
            recorder.post(cluster.as_ref(), &batch.posting()).await;
        }
    };
    let mut in_flight = FuturesUnordered::new();
    loop {
        tokio::select! {
            taken = queue.recv(), if in_flight.len() < EVENTS_IN_FLIGHT => match taken {
                Some(Queued::Post(batch)) => in_flight.push(write(batch)),
                Some(Queued::Flush(done)) => {
                    while in_flight.next().await.is_some() {}
                    let _ = done.send(());
                }
                None => break,
            },
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
        }
    }
    while in_flight.next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_never_collide_however_many_events_an_object_gets_in_one_second() {
        // The earlier scheme kept 16 bits of the sequence: the 65,537th Event of a second
        // took the first one's name.
        let names: HashSet<String> = (0..70_000).map(|_| event_name("a", 1_000)).collect();
        assert_eq!(names.len(), 70_000);
    }

    fn warning(message: &str) -> Event {
        Event {
            kind: EventType::Warning,
            reason: "PolicyFailed".to_string(),
            message: message.to_string(),
        }
    }

    #[test]
    fn a_repeat_counts_on_the_first_event_and_another_message_is_another_event() {
        let recorder = Recorder::default();
        let target = ObjectRef::new("ns", "a");
        let Record::Create(first) =
            recorder.record("Sandbox", &target, "u", &warning("x"), Source::Policy, 10)
        else {
            panic!("the first is created");
        };
        let name = first["metadata"]["name"].as_str().unwrap().to_string();
        for count in 2..=4u64 {
            assert_eq!(
                recorder.record("Sandbox", &target, "u", &warning("x"), Source::Policy, 20),
                Record::Repeat {
                    name: name.clone(),
                    patch: json!({"count": count, "lastTimestamp": time::format(20)}),
                }
            );
        }
        assert!(matches!(
            recorder.record("Sandbox", &target, "u", &warning("y"), Source::Policy, 20),
            Record::Create(_)
        ));
        // Once its repeat could not be written, the next is a new Event.
        recorder.forget(&name);
        assert!(matches!(
            recorder.record("Sandbox", &target, "u", &warning("x"), Source::Policy, 30),
            Record::Create(_)
        ));
    }

    #[test]
    fn each_object_gets_a_burst_whatever_its_reasons_then_is_rate_limited_alone() {
        let recorder = Recorder::default();
        let (a, b) = (ObjectRef::new("ns", "a"), ObjectRef::new("ns", "b"));
        // A new reason and message each time: each would be an Event of its own, but the
        // bucket is the object's.
        let records: Vec<Record> = (0..30)
            .map(|i| {
                let event = Event {
                    kind: EventType::Warning,
                    reason: format!("Reason{i}"),
                    message: i.to_string(),
                };
                recorder.record("Sandbox", &a, "u", &event, Source::Policy, 1)
            })
            .collect();
        let limited: Vec<&Record> = records
            .iter()
            .filter(|r| matches!(r, Record::RateLimited { .. }))
            .collect();
        assert_eq!(limited.len(), 30 - DEFAULT_EVENT_BURST as usize);
        // The first past the burst is the one to tell of, and only it.
        assert_eq!(*limited[0], Record::RateLimited { first: true });
        assert!(
            limited[1..]
                .iter()
                .all(|r| **r == Record::RateLimited { first: false })
        );
        assert!(matches!(
            recorder.record("Sandbox", &b, "v", &warning("0"), Source::Policy, 1),
            Record::Create(_)
        ));
        // The controller's own Events on the flooded object are still written.
        assert!(matches!(
            recorder.record("Sandbox", &a, "u", &warning("0"), Source::Controller, 1),
            Record::Create(_)
        ));
    }

    #[test]
    fn the_burst_is_the_operators() {
        let recorder = Recorder::with_burst(None, 3);
        let a = ObjectRef::new("ns", "a");
        let created = (0..10)
            .filter(|i| {
                matches!(
                    recorder.record(
                        "Sandbox",
                        &a,
                        "u",
                        &warning(&i.to_string()),
                        Source::Policy,
                        1
                    ),
                    Record::Create(_)
                )
            })
            .count();
        assert_eq!(created, 3);
    }

    /// Posting to the queue returns before anything is written (on this one-thread runtime the
    /// writer runs only once the test awaits), Events past its bound are dropped and counted,
    /// and the queued ones are written, each once, by the time a flush returns.
    #[tokio::test]
    async fn queued_events_are_written_after_the_post_returns_and_a_full_queue_drops_the_rest() {
        use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};

        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let recorder = Arc::new(Recorder::new(metrics.clone(), DEFAULT_EVENT_BURST));
        let queue = EventQueue::start(
            &tokio::runtime::Handle::current(),
            2,
            cluster.clone(),
            recorder,
        );
        let target = ObjectRef::new("ns", "a");
        for i in 0..5 {
            let event = warning(&i.to_string());
            queue.post(&Posting {
                source: Source::Policy,
                ..Posting::by_controller("Sandbox", &target, "u", &[event], 1)
            });
        }
        assert!(
            cluster.objects(Resource::Event).is_empty(),
            "the post waited on the API"
        );
        let counted = |result: &str| metrics.events.with_label_values(&["Warning", result]).get();
        assert_eq!(counted("dropped"), 3);
        queue.flush().await;
        let mut messages: Vec<String> = cluster
            .objects(Resource::Event)
            .iter()
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect();
        messages.sort();
        assert_eq!(messages, ["0", "1"]);
        assert_eq!(counted("created"), 2);
    }

    #[test]
    fn a_long_object_name_still_gives_a_valid_event_name() {
        let long = "a".repeat(253);
        let name = event_name(&long, 1_000);
        assert!(name.len() <= 253, "{} characters", name.len());
        assert!(name.starts_with("aaa"));
    }
}
