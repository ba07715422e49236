//! The reconcile core: one object's policy call and everything the controller does with what
//! the policy returns (status compared as written, Events, the finalizer, a claim, pool members,
//! the reaper's marks, the requeue). The control loop (`manager.rs`), `policy test` and the hot
//! swap's self-test (`scenario::scratch`) all call this code, so that what CI shows is what
//! production does. Nothing here owns a loop, a queue or a timer.
//!
//! One file a pass, beside what they share here (the [`Reconciler`], its settings, the policy
//! call): `sandbox.rs` a Sandbox's pass (its cleanup, finalizer, claim and status), `pool.rs` a
//! warm pool's, `reap.rs` the reaper's, and `report.rs` what a pass says on its object (a
//! failure of the policy's, a refusal, a spec it cannot act on, the Events).

mod pool;
mod reap;
mod report;
mod sandbox;

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rand::RngCore;
use serde_json::Value;

use super::cache::{Cache, CacheWriter};
use super::claims::Claims;
use super::coalesce::HeldStatuses;
use super::events::{EventQueue, Recorder};
use super::export::Export;
use super::policy::{PolicySlot, Progress};
use super::writer::Writer;
use crate::metrics::Metrics;
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::containment::{Containment, Surfaced};
use cubepod_policy_host::model::{ObjectRef, time};
use cubepod_policy_host::runtime::bindings::{ClusterNetwork, SandboxSpec};
use cubepod_policy_host::runtime::{CallContext, GuestCall, KubeCall, PolicyModule, RuntimeError};

pub use super::action::{Action, ReconcileError};
pub use reap::REAP_PAGE;

/// The time the policy is told it is. The controller reads the system clock; `policy test` sets
/// each step's time, so that a scenario is the same on every run.
#[derive(Clone, Debug)]
pub enum Clock {
    /// The system clock.
    System,
    /// A fixed time, seconds since the epoch, that [`Clock::set`] moves.
    Fixed(Arc<AtomicI64>),
}

impl Clock {
    /// A clock stopped at `at` (seconds since the epoch), moved by [`Self::set`].
    pub fn fixed(at: i64) -> Self {
        Clock::Fixed(Arc::new(AtomicI64::new(at)))
    }

    /// Seconds since the epoch.
    pub fn now(&self) -> i64 {
        match self {
            Clock::System => time::now(),
            Clock::Fixed(at) => at.load(Ordering::Relaxed),
        }
    }

    /// Moves a fixed clock to `at`; the system clock cannot be set.
    pub fn set(&self, at: i64) {
        if let Clock::Fixed(now) = self {
            now.store(at, Ordering::Relaxed);
        }
    }
}

/// The credential handed to the policy for a sandbox whose Secret it creates now.
#[derive(Clone, Copy, Debug)]
pub enum Tokens {
    /// 32 random bytes, hex: what the controller hands.
    Random,
    /// The same text every time, so that a scenario's manifests are the same on every run.
    Fixed(&'static str),
}

impl Tokens {
    fn next(self) -> String {
        match self {
            Tokens::Random => {
                let mut bytes = [0u8; 32];
                rand::rng().fill_bytes(&mut bytes);
                hex::encode(bytes)
            }
            Tokens::Fixed(text) => text.to_string(),
        }
    }
}

/// What a reconcile may do besides the policy's decisions: the one copy of these settings,
/// shared by the control loop's configuration ([`ManagerConfig::reconcile`]) and its reconciler.
///
/// [`ManagerConfig::reconcile`]: super::manager::ManagerConfig::reconcile
#[derive(Clone, Debug)]
pub struct Settings {
    /// Post Normal Events (Started, Paused, ...) as well as Warnings: each is an API write,
    /// or a repeat's patch.
    pub normal_events: bool,
    /// The most members a pool may have, whatever its spec says.
    pub max_pool_replicas: u32,
    /// A sandbox whose Pod was just started is reported Pending only if it is still starting
    /// after this long: most become Running first, and one status write then says so (zero:
    /// never held).
    pub status_coalesce: Duration,
    /// The clock the policy is handed: the system's, or a fixed one that a test moves.
    pub clock: Clock,
    /// The credential handed to the policy for a Sandbox's new Secret.
    pub tokens: Tokens,
    /// Candidates handed to one `reap` call ([`REAP_PAGE`]).
    pub reap_page: usize,
    /// How much the cache may hold of what policies wrote (`--max-policy-object-bytes`).
    pub object_bounds: super::cache::ObjectBounds,
    /// The policy's Events are handed to a queue of this many and written after the reconcile,
    /// off its path ([`EventQueue`]); 0 writes them in the reconcile, before it goes on (what
    /// `policy test` and a test that reads the Events right after a reconcile need). The
    /// controller queues [`DEFAULT_EVENT_QUEUE`](super::events::DEFAULT_EVENT_QUEUE).
    pub event_queue: usize,
}

impl Default for Settings {
    /// The controller's: the command line's defaults, the system clock, random credentials.
    fn default() -> Self {
        Self {
            normal_events: true,
            max_pool_replicas: 100,
            status_coalesce: Duration::from_secs(2),
            clock: Clock::System,
            tokens: Tokens::Random,
            reap_page: REAP_PAGE,
            object_bounds: super::cache::ObjectBounds::default(),
            event_queue: 0,
        }
    }
}

/// What one reconcile did, up to an error: for `policy test`'s expectations and reports.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Carried {
    /// The policy's `kube-client` calls, in order, refused ones included.
    pub calls: Vec<KubeCall>,
    /// The returned status as the controller writes it (the `status` of the patch), when
    /// [`Reconciler::record_status`] asks for it.
    pub(crate) status: Option<Value>,
    /// Reasons of the Events the policy asked for.
    pub(crate) events: Vec<String>,
    /// The policy's own `requeue-after-seconds`.
    pub requeue_after_seconds: Option<u32>,
    pub(crate) claim: Option<String>,
    /// `cleanup-sandbox`'s `done`.
    pub(crate) done: Option<bool>,
    /// Sandboxes the reaper acted on: marked idle, paused for good or deleted at their
    /// shutdown time.
    pub(crate) reaped: Vec<String>,
    pub(crate) pool_create: Vec<String>,
    pub(crate) pool_delete: Vec<String>,
    /// Why the object was not handed to the policy, when it was not.
    pub(crate) skipped: Option<String>,
    /// Seconds from creation to Ready, when this pass's status first reported the sandbox
    /// Ready: a canary's gate compares the candidate's with the stable module's.
    pub(crate) ready_seconds: Option<f64>,
    /// The export the pass called, if it called one: what a canary counts the calls of.
    pub(crate) export: Option<Export>,
    /// What the pass left of the sandbox's progress (Ready or not, its cleanup done or not):
    /// a canary's progress gate compares the candidate's with the stable module's.
    pub(crate) progress: Option<Progress>,
}

/// How one pass ended: what the loop does with its key next ([`Action`]; a reaper pass ends
/// in `()`), or why it failed, beside what it did up to there (`policy test` reports both).
#[derive(Debug)]
#[must_use = "a pass's outcome says what to do with its key, or why it failed"]
pub struct Pass<T = Action> {
    /// What the loop does next, or why the pass failed.
    pub outcome: Result<T, ReconcileError>,
    /// What the pass did, up to its error if it failed.
    pub carried: Carried,
}

impl<T> Pass<T> {
    /// A pass that did what `carried` says and ended in `outcome`.
    fn new(carried: Carried, outcome: Result<T, ReconcileError>) -> Self {
        Self { outcome, carried }
    }

    /// A pass that failed before it did anything.
    fn failed(error: ReconcileError) -> Self {
        Self::new(Carried::default(), Err(error))
    }

    /// A pass that did not hand the object to the policy, and why.
    fn skipped(why: impl Into<String>, then: T) -> Self {
        let carried = Carried {
            skipped: Some(why.into()),
            ..Carried::default()
        };
        Self::new(carried, Ok(then))
    }

    /// The same pass, its success mapped by `next`.
    fn map<U>(self, next: impl FnOnce(T) -> U) -> Pass<U> {
        Pass::new(self.carried, self.outcome.map(next))
    }
}

/// One policy and the cluster it decides for, behind a cache.
pub struct Reconciler {
    pub(crate) cluster: Arc<dyn Cluster>,
    /// What a pass reads: the cache, shared read-only.
    pub(crate) cache: Arc<Cache>,
    /// The cache's writer, for the controller's own writes ([`Self::writer`]) and the room a
    /// status takes of the bound: a pass changes the cache only through them.
    writes: CacheWriter,
    pub(crate) policy: Arc<PolicySlot>,
    pub(crate) context: CallContext,
    pub(crate) metrics: Arc<Metrics>,
    /// Its settings, shared with the manager's configuration.
    pub settings: Arc<Settings>,
    held_statuses: HeldStatuses,
    surfaced: Surfaced,
    /// Claims in flight in this process: the members they are offered.
    pub(crate) claims: Claims,
    /// Events as client-go's recorder posts them: repeats counted, each object rate-limited.
    events: Arc<Recorder>,
    /// Where the policy's Events go when they are written after the reconcile.
    event_queue: Option<EventQueue>,
    /// Whether a pass keeps the status it wrote in its [`Carried`]: `policy test` reports
    /// it, the control loop reads nothing of it and so skips the copy (a status is some thirty
    /// allocations, copied and dropped at every reconcile).
    pub(crate) record_status: bool,
}

impl Reconciler {
    pub(crate) fn new(
        cluster: Arc<dyn Cluster>,
        writes: CacheWriter,
        policy: Arc<PolicySlot>,
        context: CallContext,
        metrics: Arc<Metrics>,
        settings: Arc<Settings>,
    ) -> Self {
        let events = Arc::new(Recorder::new(
            metrics.clone(),
            policy
                .current()
                .engine()
                .config()
                .containment
                .rates
                .event_burst,
        ));
        // The queue's writer runs on the runtime the reconciler is made on; made outside one
        // (`policy test`'s scratch cluster), the Events are written in the reconcile.
        let event_queue = (settings.event_queue > 0)
            .then(tokio::runtime::Handle::try_current)
            .and_then(Result::ok)
            .map(|runtime| {
                EventQueue::start(
                    &runtime,
                    settings.event_queue,
                    cluster.clone(),
                    events.clone(),
                )
            });
        Self {
            held_statuses: HeldStatuses::new(settings.status_coalesce),
            surfaced: Surfaced::default(),
            claims: Claims::default(),
            events,
            event_queue,
            record_status: false,
            cluster,
            cache: writes.reader(),
            writes,
            policy,
            context,
            metrics,
            settings,
        }
    }

    fn writer(&self) -> Writer<'_> {
        Writer {
            cluster: self.cluster.as_ref(),
            cache: &self.writes,
            events: &self.events,
        }
    }

    /// Runs one export with a fresh Store, on this task (the guest's requests are awaited
    /// here too), and records what it cost. What the policy wrote is in the cache already: the
    /// host put each write's answer there as it came (`ChildLookup::written`).
    async fn call_guest<T>(
        &self,
        export: &'static str,
        call: impl AsyncFnOnce(&PolicyModule, &CallContext) -> Result<GuestCall<T>, RuntimeError>,
    ) -> Result<GuestCall<T>, ReconcileError> {
        let module = self.policy.for_this_pass();
        let started = Instant::now();
        // A panic under the call (in the host's code: a guest cannot panic the host) ends
        // this reconcile as an error, as a panicking thread of its own did before.
        let result = AssertUnwindSafe(call(&module, &self.context))
            .catch_unwind()
            .await
            .map_err(|panic| ReconcileError::Join(panic_message(panic.as_ref())))?;
        self.metrics
            .guest_call_duration
            .with_label_values(&[export])
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(call) => Ok(call),
            Err(error) => {
                self.metrics
                    .guest_traps
                    .with_label_values(&[export, error.metric_label()])
                    .inc();
                Err(error.into())
            }
        }
    }

    /// A pass, a failure of the policy's first said on its object.
    async fn reported(&self, resource: Resource, target: &ObjectRef, pass: Pass) -> Pass {
        if let Err(error) = &pass.outcome {
            self.report_policy_failure(resource, target, error).await;
        }
        pass
    }

    /// The `status` written, kept if [`Self::record_status`] asks for it: `status` makes it,
    /// only then.
    fn status_of(&self, status: impl FnOnce() -> Value) -> Option<Value> {
        self.record_status.then(status)
    }

    /// A copy of `input` for a rollout's shadowed candidate, when one runs, this reconcile is
    /// of its share, and the stable module runs it (not a canary's candidate).
    fn shadowed<I: Clone>(
        &self,
        export: Export,
        input: &I,
    ) -> Option<(Arc<super::shadow::Shadow>, I)> {
        let shadow = self.policy.shadow()?;
        let stable = self.policy.current();
        let running = self.policy.for_this_pass();
        (Arc::ptr_eq(&stable, &running) && shadow.sampled(export)).then(|| (shadow, input.clone()))
    }

    /// The cluster network every reconcile is handed and a spec's `allowCIDRs` are checked
    /// against: the boundary's, which checks the policy's NetworkPolicies against it.
    fn cluster_network(&self) -> &ClusterNetwork {
        &self.context.boundary.network
    }

    /// The rules the running module is held to: they ride on its engine, so that `policy
    /// test`, the swap self-test and the controller apply the same ones.
    fn containment(&self) -> Arc<Containment> {
        self.policy.current().engine().config().containment.clone()
    }

    /// A Sandbox spec (`prefix` `spec`) or a pool's template (`spec.template`) past the
    /// operator's bounds ([`Containment::refused_spec`]): the field at fault and why.
    fn refused_spec(&self, spec: &SandboxSpec, prefix: &str) -> Option<(String, String)> {
        let cluster_cidrs = &self.cluster_network().cluster_cidrs;
        self.containment().refused_spec(spec, prefix, cluster_cidrs)
    }
}

/// Passes a key that asks to run again at once (`requeue` of zero: a claim that adopted its
/// member, and now reports it) gets in a row, in the loop as in `policy test`; past them it is
/// queued.
pub(crate) const IMMEDIATE_PASSES: usize = 3;

/// What a panic said, when it said it as text.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}
