//! The reconcile core: one object's policy call and everything the controller does with what
//! the policy returns (status compared as written, Events, the finalizer, a claim, pool members,
//! the reaper's marks, the requeue). The control loop (`manager.rs`), `policy test` and the hot
//! swap's self-test (`scenario::scratch`) all call this code, so that what CI shows is what
//! production does. Nothing here owns a loop, a queue or a timer.

use std::any::Any;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rand::RngCore;
use serde_json::{Value, json};

use super::cache::Cache;
use super::claims::{ClaimView, Claims, Mismatch};
use super::coalesce::HeldStatuses;
use super::events::{EventQueue, Recorder, Source};
use super::inputs;
use super::policy::{Export, Outcome, PolicySlot, Progress};
use super::undo::Marks;
use super::writer::{Finalizing, Writer};
use crate::metrics::Metrics;
use cubepod_kube::{ApiError, ApiErrorKind, Cluster, Resource};
use cubepod_policy_host::containment::pools;
use cubepod_policy_host::containment::rates::Deferral;
use cubepod_policy_host::containment::{self, Containment, Refusal, Rule, Surfaced};
use cubepod_policy_host::model::{ObjectRef, Unreadable, pool, sandbox, time};
use cubepod_policy_host::runtime::bindings::{
    ClusterNetwork, Condition, ConditionStatus, Event, EventType, KubeError, ObservedChildren,
    ReapAction, ReapCandidate, ReapDecision, ReconcileOutput, SandboxSpec, SandboxStatus,
};
use cubepod_policy_host::runtime::{
    CallContext, Effect, GuestCall, KubeCall, PolicyModule, RuntimeError,
};

/// Why one reconcile failed; the loop retries it with backoff, and goes on.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The policy call failed: a trap, a timeout, the memory limit.
    #[error("policy: {0}")]
    Runtime(#[from] RuntimeError),
    /// The policy returned an error.
    #[error("the policy returned an error: {}", describe_kube_error(.0))]
    Guest(KubeError),
    /// A write of the controller's own failed.
    #[error("{what}: {source}")]
    Api {
        /// The write that failed, in words: `writing the status`.
        what: String,
        /// The API's error.
        #[source]
        source: ApiError,
    },
    /// The task running the policy call panicked or was cancelled.
    #[error("the policy task ended abnormally: {0}")]
    Join(String),
    /// The output broke a rule of the boundary: nothing of it was written.
    #[error("the policy's output was refused: {0}")]
    Refused(Refusal),
    /// The output was past a budget: nothing of it was written.
    #[error("the policy's output is past its budget: {0}")]
    Budget(Refusal),
}

impl ReconcileError {
    /// The `result` label of `cubepod_reconciles_total`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Runtime(e) => e.metric_label(),
            ReconcileError::Guest(_) => "guest_kube_error",
            ReconcileError::Api { .. } => "api_error",
            ReconcileError::Join(_) => "panic",
            ReconcileError::Refused(_) => "refused",
            ReconcileError::Budget(_) => "budget",
        }
    }

    /// A delay the cause asked for (Retry-After), over the queue's backoff.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Guest(KubeError::Retryable(r)) => {
                Some(Duration::from_millis(r.delay_ms))
            }
            ReconcileError::Api { source, .. } => source.retry_after,
            _ => None,
        }
    }
}

/// The reason of the default policy's Event for a claim handed no pool member.
const NO_READY_MEMBER: &str = "NoReadyMember";

/// `namespace/name` of the Sandbox an input is for.
fn target_words(input: &cubepod_policy_host::runtime::bindings::ReconcileInput) -> String {
    format!("{}/{}", input.sandbox.namespace, input.sandbox.name)
}

/// `kube-error` in words: `refused: ...`, `retryable after 100 ms: ...`.
pub(crate) fn describe_kube_error(error: &KubeError) -> String {
    match error {
        KubeError::NotFound(m) => format!("not-found: {m}"),
        KubeError::Conflict(m) => format!("conflict: {m}"),
        KubeError::Refused(m) => format!("refused: {m}"),
        KubeError::Invalid(m) => format!("invalid: {m}"),
        KubeError::Retryable(r) => format!("retryable after {} ms: {}", r.delay_ms, r.message),
        KubeError::Other(m) => format!("other: {m}"),
    }
}

/// Tags an API error with the write it failed.
fn api(what: &'static str) -> impl FnOnce(ApiError) -> ReconcileError {
    move |source| ReconcileError::Api {
        what: what.to_string(),
        source,
    }
}

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

/// What the loop does with a key after a reconcile that succeeded, as kube-runtime's `Action`:
/// look at it again after `requeue_after` (zero: at once, `IMMEDIATE_PASSES`), or only when
/// it or its children change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    /// When to look at the key again, if at all.
    pub requeue_after: Option<Duration>,
}

impl Action {
    /// Looked at again only when the object or its children change.
    pub(crate) const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// Looked at again after `after`, whatever changes.
    pub(crate) const fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
        }
    }

    /// The policy's `requeue-after-seconds`, no sooner than
    /// [`containment::MIN_REQUEUE_SECONDS`] (sooner would spin the controller on one key),
    /// and no later than a deferred write's `wait`: it is written when the rate allows,
    /// whatever the policy answered.
    fn asked(seconds: Option<u32>, deferred: Option<Duration>) -> Self {
        let asked = seconds
            .map(|s| Duration::from_secs(u64::from(s.max(containment::MIN_REQUEUE_SECONDS))));
        Self {
            requeue_after: match deferred {
                Some(wait) => Some(asked.map_or(wait, |r| r.min(wait))),
                None => asked,
            },
        }
    }
}

/// What one reconcile did, up to an error: for `policy test`'s expectations and reports.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Carried {
    /// The policy's `kube-client` calls, in order, refused ones included.
    pub calls: Vec<KubeCall>,
    /// The returned status as the controller writes it (the `status` of the patch), when
    /// [`Self::record_status`] asks for it.
    pub(crate) status: Option<Value>,
    /// Whether to keep `status`: `policy test` reports it, the control loop reads nothing of
    /// it and so skips the copy (a status is some thirty allocations, copied and dropped at
    /// every reconcile).
    pub(crate) record_status: bool,
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

impl Carried {
    fn skipped(&mut self, why: impl Into<String>) {
        self.skipped = Some(why.into());
    }

    /// Keeps the `status` written, if asked to: `status` makes it, only then.
    fn status_of(&mut self, status: impl FnOnce() -> Value) {
        if self.record_status {
            self.status = Some(status());
        }
    }
}

/// One policy and the cluster it decides for, behind a cache.
pub struct Reconciler {
    pub(crate) cluster: Arc<dyn Cluster>,
    pub(crate) cache: Arc<Cache>,
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
}

impl Reconciler {
    pub(crate) fn new(
        cluster: Arc<dyn Cluster>,
        cache: Arc<Cache>,
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
                    cache.clone(),
                    events.clone(),
                )
            });
        Self {
            held_statuses: HeldStatuses::new(settings.status_coalesce),
            surfaced: Surfaced::default(),
            claims: Claims::default(),
            events,
            event_queue,
            cluster,
            cache,
            policy,
            context,
            metrics,
            settings,
        }
    }

    fn writer(&self) -> Writer<'_> {
        Writer {
            cluster: self.cluster.as_ref(),
            cache: &self.cache,
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

    /// Reconciles one Sandbox: the finalizer first, then `reconcile-sandbox` (or
    /// `cleanup-sandbox` once it is being deleted), then what the policy returned; what the
    /// loop does with the key next is the returned [`Action`]. `report` keeps what was done up
    /// to an error. A failure of the policy's (a trap, its deadline or memory, a refused output)
    /// is also said on the Sandbox (`Self::report_policy_failure`).
    pub async fn sandbox(
        &self,
        target: &ObjectRef,
        report: &mut Carried,
    ) -> Result<Action, ReconcileError> {
        let result = self.sandbox_pass(target, report).await;
        self.reported(Resource::Sandbox, target, result).await
    }

    /// A pass's result, a failure of the policy's first said on its object.
    async fn reported(
        &self,
        resource: Resource,
        target: &ObjectRef,
        result: Result<Action, ReconcileError>,
    ) -> Result<Action, ReconcileError> {
        if let Err(error) = &result {
            self.report_policy_failure(resource, target, error).await;
        }
        result
    }

    /// One pass over a Sandbox, step by step: gone or unreadable, being deleted, a spec past
    /// the operator's bounds, the finalizer, the claim's offer, then the policy's call.
    async fn sandbox_pass(
        &self,
        target: &ObjectRef,
        report: &mut Carried,
    ) -> Result<Action, ReconcileError> {
        let Some(object) = self.cache.sandbox(target) else {
            self.held_statuses.forget(target);
            self.surfaced.forget(target);
            self.claims.forget(target);
            self.policy.undo.forget(target);
            let unreadable = self.cache.unreadable_sandbox(target);
            self.missing(Resource::Sandbox, target, unreadable, report)
                .await?;
            return Ok(Action::await_change());
        };
        let now = self.settings.clock.now();
        if object.sandbox.deleting {
            self.policy.undo.forget(target);
            return self.cleanup_sandbox(target, &object, report, now).await;
        }
        if let Some(bad) = self.refused_sandbox(target, &object) {
            // A spec the operator does not allow: said in the status, and nothing is made or
            // changed for it; what was started runs on.
            self.report_unreadable(Resource::Sandbox, target, &bad, report)
                .await?;
            return Ok(Action::await_change());
        }
        let Some(mut object) = self.with_finalizer(target, object, report).await? else {
            return Ok(Action::await_change());
        };
        let mut observed = self.cache.observed(target);
        self.undo_candidate(target, &mut object, &mut observed, now)
            .await?;
        let claim = self.claims.view(&self.cache, &object, &observed);
        match &claim {
            ClaimView::Wait => {
                report.skipped(format!(
                    "every ready member of the warm pool that suits Sandbox {target} is \
                     offered to another claim in flight; looking again shortly"
                ));
                return Ok(Action::requeue(CLAIM_WAIT));
            }
            ClaimView::None {
                mismatch: Some(mismatch),
            } => {
                self.no_matching_member(&object, mismatch, now).await;
            }
            _ => {}
        }
        self.reconcile_sandbox(target, &object, observed, &claim, report, now)
            .await
    }

    /// A Sandbox being deleted: `cleanup-sandbox`, its status written while it is not done,
    /// the finalizer removed once it is. A Sandbox deleted without the finalizer is the API
    /// server's to remove: no policy is called for it.
    async fn cleanup_sandbox(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
        report: &mut Carried,
        now: i64,
    ) -> Result<Action, ReconcileError> {
        if !object.has_finalizer() {
            report.skipped(format!(
                "Sandbox {target} is being deleted without the {} finalizer: the \
                 controller calls no policy for it",
                sandbox::FINALIZER
            ));
            return Ok(Action::await_change());
        }
        let observed = self.cache.observed(target);
        let handed = object.sandbox.clone();
        let shadowed = self.shadowed(Export::CleanupSandbox, &(handed.clone(), observed.clone()));
        report.export = Some(Export::CleanupSandbox);
        report.progress = Some(Progress::cleanup(false));
        let call = self
            .call_guest("cleanup-sandbox", async move |module, context| {
                module
                    .cleanup_sandbox_async(context, now, handed, observed)
                    .await
            })
            .await?;
        if let Some((shadow, (sandbox, observed))) = shadowed {
            // Beside this cleanup, on its input, writing nothing.
            let (calls, value) = (call.calls.clone(), call.value.clone());
            tokio::spawn(async move {
                shadow
                    .cleanup_sandbox(now, sandbox, observed, calls, value)
                    .await
            });
        }
        report.calls = call.calls;
        let deferred = call.deferred.as_ref();
        self.surface_calls(target, &object.sandbox.uid, deferred, &report.calls, now)
            .await;
        self.surface_name_conflicts(target, &object.sandbox.uid, &call.name_conflicts, now)
            .await;
        // A deferred write is written when the rate allows, whatever the policy answered.
        let action = Action {
            requeue_after: deferred.map(|d| d.wait),
        };
        let mut out = call.value.map_err(ReconcileError::Guest)?;
        clear_policy_failure(&mut out.status.conditions);
        report.done = Some(out.done);
        // A cleanup's status is held to the same budgets as a reconcile's, before any copy.
        let admitted = self
            .containment()
            .output
            .sandbox_status_patch(
                &format!("Sandbox {target}"),
                &out.status,
                object.sandbox.generation,
            )
            .map_err(ReconcileError::Budget);
        let patch = self
            .admitted(
                admitted,
                "cleanup-sandbox",
                "Sandbox",
                target,
                &object.sandbox.uid,
                now,
            )
            .await?;
        report.status_of(|| patch.status_value());
        if out.done {
            tracing::info!(%target, "children deleted; removing the finalizer");
            self.writer()
                .remove_finalizer(object)
                .await
                .map_err(api("removing the finalizer"))?;
            report.progress = Some(Progress::cleanup(true));
        } else {
            let status = patch.read_back();
            if status != object.sandbox.status {
                self.write_sandbox_status(object, &patch, &status, None)
                    .await?;
            }
        }
        Ok(action)
    }

    /// The Sandbox with the controller's finalizer, added if it had none; `None` when it was
    /// deleted meanwhile.
    async fn with_finalizer(
        &self,
        target: &ObjectRef,
        object: sandbox::SandboxObject,
        report: &mut Carried,
    ) -> Result<Option<sandbox::SandboxObject>, ReconcileError> {
        if object.has_finalizer() {
            return Ok(Some(object));
        }
        let found = self
            .writer()
            .add_finalizer(&object)
            .await
            .map_err(api("adding the finalizer"))?;
        let updated = match found {
            Finalizing::Present => self.cache.sandbox(target),
            Finalizing::Gone => None,
        };
        if updated.is_none() {
            // Deleted while we looked: creating children now would orphan them.
            self.held_statuses.forget(target);
            report.skipped(format!(
                "Sandbox {target} was deleted while its finalizer was added"
            ));
        }
        Ok(updated)
    }

    /// `reconcile-sandbox` and what it returned: its output admitted whole, then carried out
    /// (a claim's adoption, or the Events, the status and a claim's desiredState).
    async fn reconcile_sandbox(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
        observed: ObservedChildren,
        claim: &ClaimView,
        report: &mut Carried,
        now: i64,
    ) -> Result<Action, ReconcileError> {
        let input = inputs::reconcile_input(
            &self.cache,
            &object.sandbox,
            observed,
            claim,
            now,
            self.settings.tokens.next(),
            self.cluster_network(),
        );
        let offered = input.pool_candidates.clone();
        let shadowed = self.shadowed(Export::ReconcileSandbox, &input);
        report.export = Some(Export::ReconcileSandbox);
        let call = self
            .call_guest("reconcile-sandbox", async move |module, context| {
                module.reconcile_sandbox_async(context, input).await
            })
            .await?;
        let children = call
            .effects
            .iter()
            .fold(Marks::default(), |marks, effect| match effect {
                Effect::Applied { resource, .. } => marks.with(Marks::of(*resource)),
                Effect::Deleted { .. } => marks,
            });
        self.policy
            .candidate_wrote(target, &object.sandbox.uid, children);
        if let Some((shadow, input)) = shadowed {
            // Beside this reconcile, not in its way: the candidate's time is not the stable's.
            let (calls, value) = (call.calls.clone(), call.value.clone());
            tokio::spawn(async move {
                shadow
                    .reconcile_sandbox(target_words(&input), input, calls, value)
                    .await
            });
        }
        report.calls = call.calls;
        let deferred = call.deferred.as_ref();
        self.surface_calls(target, &object.sandbox.uid, deferred, &report.calls, now)
            .await;
        self.surface_name_conflicts(target, &object.sandbox.uid, &call.name_conflicts, now)
            .await;
        let deferred = deferred.map(|d| d.wait);
        let written_past = self.cache.take_bound(target);
        let mut out = match call.value {
            Ok(out) => out,
            Err(error) => {
                self.surface_object_bound(target, &object.sandbox.uid, written_past.as_ref(), now)
                    .await;
                return Err(ReconcileError::Guest(error));
            }
        };
        clear_policy_failure(&mut out.status.conditions);
        if let ClaimView::None { mismatch: Some(_) } = claim {
            // Handed no member, the policy says the pool has none ready; ready members exist
            // and none suits, which the host's NoMatchingMember says with the field.
            out.events.retain(|e| e.reason != NO_READY_MEMBER);
        }
        super::child_lookup::name_conflict_condition(
            &mut out.status.conditions,
            &call.name_conflicts,
            now,
        );
        // Containment judges the status the policy wrote (a status past its budget is refused,
        // not cut); the cache's bound then fits what was admitted.
        let admitted = self.admit_sandbox_output(target, object, claim, &out, &offered);
        let judged = admitted.is_ok().then(|| out.status.clone());
        let (held_back, cut) = super::object_bound::fit_status(
            &self.cache,
            target,
            &object.sandbox.status,
            &mut out.status,
            written_past,
            now,
        );
        if cut {
            self.metrics
                .policy_objects_bounded
                .with_label_values(&["status"])
                .inc();
        }
        self.surface_object_bound(target, &object.sandbox.uid, held_back.as_ref(), now)
            .await;
        report.events = out.events.iter().map(|e| e.reason.clone()).collect();
        report.requeue_after_seconds = out.requeue_after_seconds;
        report.claim = out.claim.clone();
        let admitted = match judged {
            Some(judged) if judged != out.status => {
                self.admit_sandbox_output(target, object, claim, &out, &offered)
            }
            _ => admitted,
        };
        let patch = self
            .admitted(
                admitted,
                "reconcile-sandbox",
                "Sandbox",
                target,
                &object.sandbox.uid,
                now,
            )
            .await?;
        report.status_of(|| patch.status_value());
        if out.claim.is_some() {
            return self
                .adopt_member(target, object, claim, &out.events, deferred, now)
                .await;
        }
        self.post_events("Sandbox", target, &object.sandbox.uid, &out.events, now)
            .await;
        // What the API will hold once written: a status that the API renders differently (an
        // empty reason, a time out of range) would otherwise differ on every pass.
        let status = patch.read_back();
        if status != object.sandbox.status {
            self.policy
                .candidate_wrote(target, &object.sandbox.uid, Marks::STATUS);
        }
        // A sandbox to run counts for its module's progress, Ready or not; one paused on
        // purpose (its desiredState) is not waited for.
        if object.sandbox.spec.desired_state
            == cubepod_policy_host::runtime::bindings::DesiredState::Running
        {
            report.progress = Some(Progress::start(
                super::startup::is_ready(&status),
                object.created_at,
            ));
        }
        if let Some(wait) = self
            .held_statuses
            .hold(target, &object.sandbox.status, &status, now)
        {
            return Ok(Action::requeue(wait));
        }
        report.ready_seconds = self
            .write_reconciled_status(object, claim, patch, &status, now)
            .await?;
        if let ClaimView::Bound { member, .. } = claim {
            self.carry_desired_state(object, member).await?;
        }
        Ok(Action::asked(out.requeue_after_seconds, deferred))
    }

    /// On the stable module's pass over a Sandbox that a candidate no longer serving wrote
    /// (`PolicySlot::undo`), takes away what it wrote, so that the stable module writes it
    /// again as if the candidate had never run: its Pod and Secret are deleted (the Pod also
    /// for a Secret, whose token it read at its start), and the stable module sees them going
    /// or gone; its NetworkPolicy and Service are shown with no digest, so they are applied
    /// again; of a status it wrote, the fields a pass carries to the next and the reaper reads
    /// (`idlePausedAt`, `startedAt`) are cleared. Said by one Normal Event. What is left undone (an API error) is tried again at the next pass.
    async fn undo_candidate(
        &self,
        target: &ObjectRef,
        object: &mut sandbox::SandboxObject,
        observed: &mut ObservedChildren,
        now: i64,
    ) -> Result<(), ReconcileError> {
        if !self.policy.stable_this_pass() {
            return Ok(());
        }
        let uid = object.sandbox.uid.clone();
        let Some(marks) = self.policy.undo.take(target, &uid) else {
            return Ok(());
        };
        let namespace = target.namespace.as_str();
        if marks.has(Marks::SECRET) && observed.secret {
            let name = cubepod_policy_sdk::names::secret(&target.name);
            if let Err(error) = self.delete_child(Resource::Secret, namespace, &name).await {
                self.policy.undo.record(target, &uid, marks);
                return Err(api("deleting the Secret a rolled-back policy wrote")(error));
            }
            observed.secret = false;
        }
        if (marks.has(Marks::POD) || marks.has(Marks::SECRET))
            && let Some(pod) = observed.pod.as_mut().filter(|p| !p.deleting)
        {
            if let Err(error) = self.delete_child(Resource::Pod, namespace, &pod.name).await {
                self.policy
                    .undo
                    .record(target, &uid, marks.with(Marks::POD));
                return Err(api("deleting the Pod a rolled-back policy wrote")(error));
            }
            pod.deleting = true;
        }
        for (mark, held) in [
            (Marks::NETWORK_POLICY, &mut observed.network_policy),
            (Marks::SERVICE, &mut observed.service),
        ] {
            if let Some(held) = held.as_mut().filter(|_| marks.has(mark)) {
                held.spec_hash = None;
            }
        }
        let status = &object.sandbox.status;
        if marks.has(Marks::STATUS)
            && (status.idle_paused_at.is_some() || status.started_at.is_some())
        {
            // Written, so that the stable module's status is compared with what the API holds.
            let patch = json!({"status": {"idlePausedAt": null, "startedAt": null}});
            let cleared = self
                .writer()
                .mark_status(Resource::Sandbox, target, None, patch)
                .await;
            if let Err(error) = cleared {
                self.policy.undo.record(target, &uid, marks);
                return Err(api("clearing the status a rolled-back policy wrote")(error));
            }
            match self.cache.sandbox(target) {
                Some(fresh) if fresh.sandbox.uid == uid => *object = fresh,
                _ => return Ok(()),
            }
        }
        let message = format!(
            "a policy rolled back had written {} of this sandbox: the stable module {} writes              them again",
            marks.words(),
            self.policy.current().info().name
        );
        tracing::info!(%target, "{message}");
        self.writer()
            .post_controller_event(
                "Sandbox",
                target,
                &uid,
                EventType::Normal,
                "RolledBackWrites",
                message,
                now,
            )
            .await;
        Ok(())
    }

    /// Deletes a child of the Sandbox being reconciled (the cache holds it as its own); gone
    /// already is done.
    async fn delete_child(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        match self.cluster.delete(resource, namespace, name).await {
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            other => other,
        }
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

    /// `reconcile-sandbox`'s output admitted whole before any of it is written: its status and
    /// Events within budget, a claim only of a member it was offered, and `claimedMember` only
    /// the member bound. Its conditions are admitted before any copy of the status is made (as
    /// written, the patch, its text), since a status of thousands of conditions or a huge
    /// message is megabytes, every copy resident at once.
    fn admit_sandbox_output(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
        claim: &ClaimView,
        out: &ReconcileOutput,
        offered: &[String],
    ) -> Result<sandbox::StatusPatch, ReconcileError> {
        // The whole output is admitted before any of it is written; its conditions before any
        // copy of the status is made (as written, the patch, its text), since a status of
        // thousands of conditions or a huge message is megabytes, every copy resident at once.
        let what = format!("Sandbox {target}");
        self.containment()
            .sandbox_output(
                &what,
                out,
                object.sandbox.generation,
                offered,
                bound_member(claim).map(|m| m.sandbox.name.as_str()),
            )
            .map_err(|refusal| match refusal.rule {
                Rule::Budget => ReconcileError::Budget(refusal),
                _ => ReconcileError::Refused(refusal),
            })
    }

    /// The admitted claim of a member: adopted on the version it was offered at, the policy's
    /// Events posted, and the Sandbox looked at again at once. The next pass mirrors the member
    /// (recovered from its label) and writes the claim's status once, as Running: the status of
    /// this pass would be overwritten at once.
    async fn adopt_member(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
        claim: &ClaimView,
        events: &[Event],
        deferred: Option<Duration>,
        now: i64,
    ) -> Result<Action, ReconcileError> {
        // Admitted, so the one offered.
        let ClaimView::Offered(offer) = claim else {
            return Ok(Action {
                requeue_after: deferred,
            });
        };
        match self.writer().claim_member(&object.sandbox, offer).await {
            Ok(()) => {
                if let Some(seconds) = self.claims.served(target, offer) {
                    self.metrics.sandbox_claim.observe(seconds);
                }
            }
            Err(error) if error.is(ApiErrorKind::Conflict) || error.is(ApiErrorKind::NotFound) => {
                // Taken, changed or deleted since it was offered: this claim is offered
                // another at once, never failed for it.
                tracing::debug!(%target, member = %offer.member, %error, "member moved on before its adoption");
                self.claims.conflicted(offer);
                return Ok(Action::requeue(Duration::ZERO));
            }
            Err(error) => return Err(api("claiming the member")(error)),
        }
        self.post_events("Sandbox", target, &object.sandbox.uid, events, now)
            .await;
        self.held_statuses.forget(target);
        Ok(Action::requeue(Duration::ZERO))
    }

    /// The status `reconcile-sandbox` returned (`status`, as it reads back), written if it or
    /// the bound member's uid differs from what the Sandbox holds; the first status that says
    /// Ready is marked and counted as the sandbox's startup, whose seconds are returned.
    async fn write_reconciled_status(
        &self,
        object: &sandbox::SandboxObject,
        claim: &ClaimView,
        mut patch: sandbox::StatusPatch,
        status: &SandboxStatus,
        now: i64,
    ) -> Result<Option<f64>, ReconcileError> {
        // The member's uid beside its name: what the claim trusts its member by
        // (`claims::recorded_by`), which only the controller writes.
        let member_uid = bound_member(claim)
            .filter(|m| status.claimed_member.as_deref() == Some(m.sandbox.name.as_str()))
            .map(|m| m.sandbox.uid.clone());
        if *status == object.sandbox.status && member_uid == object.claimed_member_uid {
            return Ok(None);
        }
        patch.set_claimed_member_uid(member_uid);
        let first_ready = super::startup::first_ready(object, status);
        let marked = first_ready.and_then(|_| patch.mark_first_ready(now));
        self.write_sandbox_status(object, &patch, status, marked)
            .await?;
        let startup = first_ready.zip(super::startup::since(object.created_at, now));
        if let Some((launch, seconds)) = startup {
            self.metrics
                .sandbox_startup
                .with_label_values(&[launch])
                .observe(seconds);
        }
        Ok(startup.map(|(_, seconds)| seconds))
    }

    /// A failure of the policy's, said where `kubectl` shows it: `Ready=False` with reason
    /// `PolicyFailed` and the trap, bound or rule in the message, written over the version the
    /// cache holds (once per distinct failure: a retry that fails alike writes nothing), and
    /// one Warning Event per distinct failure. The next pass the policy gets through drops the
    /// condition. Other errors (the API's) are the loop's to retry, and say nothing here.
    async fn report_policy_failure(
        &self,
        resource: Resource,
        target: &ObjectRef,
        error: &ReconcileError,
    ) {
        let Some(message) = self.policy_failure(error) else {
            return;
        };
        // A refused output or call was told once already, as a PolicyRefused Event naming the
        // rule: the condition says it too, and no second Event does.
        let told = matches!(
            error,
            ReconcileError::Refused(_)
                | ReconcileError::Budget(_)
                | ReconcileError::Guest(KubeError::Refused(_))
        );
        let now = self.settings.clock.now();
        let (uid, version, generation, mut conditions) = match resource {
            Resource::Sandbox => match self.cache.sandbox(target) {
                Some(o) => (
                    o.sandbox.uid,
                    o.resource_version,
                    o.sandbox.generation,
                    o.sandbox.status.conditions,
                ),
                None => return,
            },
            _ => match self.cache.pool(target) {
                Some(o) => (
                    o.pool.uid,
                    o.resource_version,
                    o.pool.generation,
                    o.pool.status.conditions,
                ),
                None => return,
            },
        };
        let said = conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.reason == POLICY_FAILED && c.message == message);
        if !said {
            conditions.retain(|c| c.kind != "Ready");
            conditions.push(Condition {
                kind: "Ready".to_string(),
                status: ConditionStatus::False,
                reason: POLICY_FAILED.to_string(),
                message: message.clone(),
                last_transition_time: now,
            });
            let json: Vec<_> = conditions
                .iter()
                .map(|c| cubepod_policy_host::model::status::condition_to_json(c, generation))
                .collect();
            let patch = serde_json::json!({"status": {"conditions": json}});
            if let Err(error) = self
                .writer()
                .write_status(resource, target, Some(&version), patch)
                .await
            {
                tracing::debug!(%target, %error, "the policy's failure is said on the next retry");
            }
        }
        if !told && self.surfaced.first(target, &message) {
            self.writer()
                .post_controller_event(
                    resource.kind(),
                    target,
                    &uid,
                    EventType::Warning,
                    POLICY_FAILED,
                    message,
                    now,
                )
                .await;
        }
    }

    /// What a user is told of a failure of the policy's, if it is one: a trap, the deadline,
    /// the memory bound (as a quantity), a budget, or a refused output's rule and field.
    fn policy_failure(&self, error: &ReconcileError) -> Option<String> {
        let what = match error {
            ReconcileError::Runtime(RuntimeError::MemoryExhausted { export, limit }) => format!(
                "exceeded its memory limit of {} in {export} (--guest-memory-mib)",
                cubepod_policy_host::containment::format_bytes(*limit as u128)
            ),
            ReconcileError::Runtime(RuntimeError::MemoryBudget { export, budget }) => format!(
                "could not grow its memory in {export}: the policy calls in flight hold the \
                 controller's memory budget of {} (--calls-memory-budget); retried",
                cubepod_policy_host::containment::format_bytes(*budget as u128)
            ),
            ReconcileError::Runtime(
                e @ (RuntimeError::Trap { .. }
                | RuntimeError::DeadlineExceeded { .. }
                | RuntimeError::Budget(_)),
            ) => e.to_string(),
            ReconcileError::Refused(refusal) | ReconcileError::Budget(refusal) => {
                format!("its output was refused: {refusal}")
            }
            ReconcileError::Guest(KubeError::Refused(why)) => {
                format!("a write it asked for was refused: {why}")
            }
            _ => return None,
        };
        let module = self.policy.for_this_pass();
        let info = module.info();
        Some(clip_message(&format!(
            "policy {} {}: {what}",
            info.name, info.version
        )))
    }

    /// A claim's `desiredState` is its member's: pausing a claim pauses the member that runs
    /// for it, and resuming it resumes the member. The member's own reconcile carries it out,
    /// and its status, mirrored, says so.
    async fn carry_desired_state(
        &self,
        claim: &sandbox::SandboxObject,
        member: &sandbox::SandboxObject,
    ) -> Result<(), ReconcileError> {
        let wanted = claim.sandbox.spec.desired_state;
        if member.sandbox.spec.desired_state == wanted || member.sandbox.deleting {
            return Ok(());
        }
        tracing::info!(
            claim = %claim.sandbox.name,
            member = %member.sandbox.name,
            "carrying the claim's desiredState to its member"
        );
        self.writer()
            .set_desired_state(member, wanted)
            .await
            .map_err(api("setting the member's desiredState"))
    }

    /// A claim that starts cold because no ready member of its pool is what it asks for: a
    /// Warning Event naming the first field that differs, once.
    async fn no_matching_member(
        &self,
        object: &sandbox::SandboxObject,
        mismatch: &Mismatch,
        now: i64,
    ) {
        let s = &object.sandbox;
        let pool = s.spec.warm_pool.as_deref().unwrap_or_default();
        let message = format!(
            "no ready member of warm pool {pool:?} suits this sandbox ({mismatch}): starting \
             cold; a claim gets a member only when its image, storage, network and the \
             resources, runtime class and Service it sets are the pool template's"
        );
        let target = ObjectRef::new(&s.namespace, &s.name);
        if !self.surfaced.first(&target, &message) {
            return;
        }
        tracing::info!(%target, %mismatch, "claim starts cold: no ready member suits it");
        self.writer()
            .post_controller_event(
                "Sandbox",
                &target,
                &s.uid,
                EventType::Warning,
                "NoMatchingMember",
                message,
                now,
            )
            .await;
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

    /// [`Self::refused_spec`] of a Sandbox, as its status and Events say it. A sandbox that
    /// was started (its volumes made, or its Pod there) keeps its phase and Pod: a spec edited
    /// past the bounds while it runs does not fail what runs.
    fn refused_sandbox(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
    ) -> Option<Unreadable> {
        let s = &object.sandbox;
        let (field, problem) = self.refused_spec(&s.spec, "spec")?;
        let started = s.status.rootfs_pvc.is_some()
            || s.status.pod_ip.is_some()
            || self.cache.observed(target).pod.is_some();
        let error = cubepod_policy_host::model::ModelError {
            kind: "Sandbox",
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            field,
            problem,
        };
        Some(Unreadable::of_record(
            error,
            &s.uid,
            &object.resource_version,
            s.generation,
            &s.status.conditions,
            started,
        ))
    }

    /// [`Self::refused_spec`] of a pool's template: no member is made from it.
    fn refused_pool(&self, object: &crate::controller::cache::PoolObject) -> Option<Unreadable> {
        let p = &object.pool;
        let (field, problem) = self.refused_spec(&p.spec.template, "spec.template")?;
        let error = cubepod_policy_host::model::ModelError {
            kind: "PodWarmPool",
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            field,
            problem,
        };
        Some(Unreadable::of_record(
            error,
            &p.uid,
            &object.resource_version,
            p.generation,
            &p.status.conditions,
            false,
        ))
    }

    /// A Sandbox's status, over the version it was computed from: a concurrent write (the
    /// reaper's mark, another replica) makes it a Conflict, and the key is reconciled again.
    async fn write_sandbox_status(
        &self,
        object: &sandbox::SandboxObject,
        patch: &sandbox::StatusPatch,
        status: &cubepod_policy_host::runtime::bindings::SandboxStatus,
        first_ready_at: Option<i64>,
    ) -> Result<(), ReconcileError> {
        self.writer()
            .write_sandbox_status(object, patch, status, first_ready_at)
            .await
            .map_err(api("writing the status"))
    }

    /// Reconciles one PodWarmPool: `reconcile-pool`, then its creates and deletes of members
    /// and its status. A failure of the policy's is said on the pool, as on a Sandbox.
    pub(crate) async fn pool(
        &self,
        target: &ObjectRef,
        report: &mut Carried,
    ) -> Result<Action, ReconcileError> {
        let result = self.pool_pass(target, report).await;
        self.reported(Resource::PodWarmPool, target, result).await
    }

    async fn pool_pass(
        &self,
        target: &ObjectRef,
        report: &mut Carried,
    ) -> Result<Action, ReconcileError> {
        let Some(object) = self.cache.pool(target) else {
            self.surfaced.forget(target);
            let unreadable = self.cache.unreadable_pool(target);
            self.missing(Resource::PodWarmPool, target, unreadable, report)
                .await?;
            return Ok(Action::await_change());
        };
        if let Some(bad) = self.refused_pool(&object) {
            // A template the operator does not allow: said in the status, and no member is
            // made from it.
            self.report_unreadable(Resource::PodWarmPool, target, &bad, report)
                .await?;
            return Ok(Action::await_change());
        }
        if let Some(wait) = self.claims.refill_waits(&self.cache, target) {
            // Claims of this pool are being served from its ready members: its refill starts
            // Pods, which would slow them; it runs once they are served.
            return Ok(Action::requeue(wait));
        }
        let now = self.settings.clock.now();
        let input = inputs::pool_input(
            &self.cache,
            &object.pool,
            now,
            self.settings.max_pool_replicas,
        );
        let shadowed = self.shadowed(Export::ReconcilePool, &input);
        report.export = Some(Export::ReconcilePool);
        let call = self
            .call_guest("reconcile-pool", async move |module, context| {
                module.reconcile_pool_async(context, input).await
            })
            .await?;
        if let Some((shadow, input)) = shadowed {
            let (object, value) = (target.to_string(), call.value.clone());
            tokio::spawn(async move { shadow.reconcile_pool(object, input, value).await });
        }
        report.calls = call.calls;
        let mut out = call.value.map_err(ReconcileError::Guest)?;
        clear_policy_failure(&mut out.status.conditions);
        report.events = out.events.iter().map(|e| e.reason.clone()).collect();
        report.pool_create = out.create.iter().map(|m| m.name.clone()).collect();
        report.pool_delete = out.delete.clone();
        let members = self.cache.pool_members(target);
        let admitted = self.admit_pool_output(&object.pool, &members, &out);
        let (patch, creates) = self
            .admitted(
                admitted,
                "reconcile-pool",
                "PodWarmPool",
                target,
                &object.pool.uid,
                now,
            )
            .await?;
        report.status_of(|| patch["status"].clone());
        let writer = self.writer();
        let mut taken = Vec::new();
        for (member, object) in out.create.iter().zip(creates) {
            let created = writer
                .create_member(target, &member.name, object)
                .await
                .map_err(api("creating a member"))?;
            if !created {
                taken.push(member.name.as_str());
            }
        }
        for name in &out.delete {
            writer
                .delete_member(target, name)
                .await
                .map_err(api("deleting a member"))?;
        }
        self.post_events("PodWarmPool", target, &object.pool.uid, &out.events, now)
            .await;
        self.write_pool_status(target, &object, patch, &out.status)
            .await?;
        if !taken.is_empty() {
            // Its policy chose names other Sandboxes hold: they are listed to it as taken now,
            // and it chooses again at once.
            tracing::debug!(pool = %target, names = ?taken, "member names held by other Sandboxes");
            return Ok(Action::requeue(Duration::ZERO));
        }
        Ok(Action::await_change())
    }

    /// A pool's status as `reconcile-pool` returned it (`patch`), with the pool's record of
    /// its members: the members just created, and the entries it no longer needs
    /// (`controller::membership`). Written if either changed.
    async fn write_pool_status(
        &self,
        target: &ObjectRef,
        object: &crate::controller::cache::PoolObject,
        mut patch: Value,
        returned: &cubepod_policy_host::runtime::bindings::WarmPoolStatus,
    ) -> Result<(), ReconcileError> {
        let delta = self.cache.record_delta(target);
        if delta.is_none() && pool::read_back(&patch, returned) == object.pool.status {
            return Ok(());
        }
        if let (Some(delta), Some(status)) = (&delta, patch["status"].as_object_mut()) {
            status.insert(pool::MEMBER_UIDS.to_string(), json!(delta));
        }
        let writer = self.writer();
        let written = writer
            .write_status(
                Resource::PodWarmPool,
                target,
                Some(&object.resource_version),
                patch,
            )
            .await;
        if let (Err(error), Some(delta)) = (&written, &delta)
            && error.is(ApiErrorKind::Conflict)
        {
            // The record is the controller's alone and its entries commute: it is written
            // over whatever version the pool is at, so that no member created goes
            // unrecorded while the rest of the status is computed again.
            let record = json!({"status": {pool::MEMBER_UIDS: delta}});
            writer
                .write_status(Resource::PodWarmPool, target, None, record)
                .await
                .map_err(api("recording the pool's members"))?;
        }
        written.map_err(api("writing the pool's status"))
    }

    /// One reaper pass over `namespace` (only the sandboxes named in `only`, when given): the
    /// policy decides who is idle or due to shut down, a page of candidates at a time; each
    /// admitted decision (`pools::reap`) is carried out over the version it saw: an idle
    /// pause marked in the status (`idlePausedAt`) for the next reconcile to carry out, a
    /// shutdown's `desiredState: Paused`, or the Sandbox's deletion. `report.reaped` names
    /// them. A page the policy fails ends the pass: the pages before it stay marked, the next
    /// tick starts again.
    pub async fn reap(
        &self,
        namespace: &str,
        only: Option<&[String]>,
        report: &mut Carried,
    ) -> Result<(), ReconcileError> {
        let now = self.settings.clock.now();
        // Candidates and their versions side by side, matched up only for the few the policy
        // names: a tick over every sandbox must not pay for a table of them all. In name order,
        // so that the policy sees the same pages for the same cluster.
        let mut candidates = self.cache.reap_candidates(namespace);
        if let Some(names) = only {
            candidates.retain(|(c, _)| names.contains(&c.name));
        }
        candidates.sort_unstable_by(|(a, _), (b, _)| a.name.cmp(&b.name));
        // During a canary the candidate's reaper decides for its share of the sandboxes (by
        // uid, as their reconciles), the stable module's for the rest; each page is counted.
        let canary = self.policy.canary();
        let (theirs, candidates): (Vec<_>, Vec<_>) = match &canary {
            Some(canary) => candidates.into_iter().partition(|(c, _)| {
                self.cache
                    .sandbox(&ObjectRef::new(namespace, &c.name))
                    .is_some_and(|o| canary.covers(&o.sandbox.uid))
            }),
            None => (Vec::new(), candidates),
        };
        self.reap_pages(namespace, now, candidates, report).await?;
        if let Some(canary) = canary
            && !theirs.is_empty()
        {
            let module = canary.module.clone();
            PolicySlot::scope(module, self.reap_pages(namespace, now, theirs, report)).await?;
        }
        Ok(())
    }

    /// [`Self::reap`]'s `candidates` (in name order) a page at a time, on the module of this
    /// pass; a canary counts each page of its module's and the other's.
    async fn reap_pages(
        &self,
        namespace: &str,
        now: i64,
        candidates: Vec<(ReapCandidate, String)>,
        report: &mut Carried,
    ) -> Result<(), ReconcileError> {
        let (sandboxes, versions): (Vec<_>, Vec<_>) = candidates.into_iter().unzip();
        let mut sandboxes = sandboxes.into_iter();
        for versions in versions.chunks(self.settings.reap_page.max(1)) {
            let page: Vec<_> = sandboxes.by_ref().take(versions.len()).collect();
            let result = self.reap_page(namespace, now, page, versions, report).await;
            if let Some(canary) = self.policy.canary() {
                let candidate = Arc::ptr_eq(&canary.module, &self.policy.for_this_pass());
                let outcome = match &result {
                    Ok(()) => Outcome::Ok(None),
                    Err(error) => Outcome::of_error(error),
                };
                canary.record(None, candidate, Some(Export::Reap), outcome, None);
            }
            result?;
        }
        Ok(())
    }

    /// One `reap` call over `page`, its decisions marked over `versions` (the page's own).
    async fn reap_page(
        &self,
        namespace: &str,
        now: i64,
        page: Vec<ReapCandidate>,
        versions: &[String],
        report: &mut Carried,
    ) -> Result<(), ReconcileError> {
        let handed_namespace = namespace.to_string();
        let shadowed = self.shadowed(Export::Reap, &page);
        let call = self
            .call_guest("reap", async move |module, context| {
                let call = module
                    .reap_async(context, now, &handed_namespace, &page)
                    .await?;
                Ok(call.map(|decisions| (decisions, page)))
            })
            .await?;
        let (decisions, page) = call.value;
        if let Some((shadow, page)) = shadowed {
            let (calls, stable) = (call.calls.clone(), decisions.clone());
            let namespace = namespace.to_string();
            tokio::spawn(async move { shadow.reap(now, namespace, page, calls, stable).await });
        }
        report.calls.extend(call.calls);
        if decisions.is_empty() {
            return Ok(());
        }
        let handed: HashMap<&str, (&ReapCandidate, &str)> = page
            .iter()
            .zip(versions)
            .map(|(c, version)| (c.name.as_str(), (c, version.as_str())))
            .collect();
        for decision in decisions {
            // A decision about a sandbox not handed, or a shutdown that is not due, is the
            // policy's mistake, not an instruction.
            let (_, version) = match pools::reap(namespace, &decision, &handed, now) {
                Ok(handed) => *handed,
                Err(refusal) => {
                    tracing::warn!(%refusal, "reaper decision refused");
                    self.count_refusal("reap", "sandboxes", refusal.rule.label());
                    continue;
                }
            };
            let target = ObjectRef::new(&decision.namespace, &decision.name);
            if self.carry_out_reap(&target, version, &decision, now).await {
                report.reaped.push(decision.name);
            }
        }
        Ok(())
    }

    /// One admitted reaper decision, over the version the decision saw: if the sandbox moved
    /// on since (its shutdown time moved, activity came), nothing is done and the next tick
    /// decides again on fresh data. True when it was carried out.
    async fn carry_out_reap(
        &self,
        target: &ObjectRef,
        version: &str,
        decision: &ReapDecision,
        now: i64,
    ) -> bool {
        let writer = self.writer();
        let (done, action) = match decision.action {
            ReapAction::IdlePause => {
                let idle_seconds = decision.idle_seconds;
                tracing::info!(%target, idle_seconds, "pausing idle sandbox: {}", decision.reason);
                let patch = serde_json::json!({"status": {"idlePausedAt": time::format(now)}});
                let done = writer
                    .mark_status(Resource::Sandbox, target, Some(version), patch)
                    .await;
                (done, None)
            }
            ReapAction::ShutdownPause => {
                let reason = &decision.reason;
                tracing::info!(%target, "pausing for good at spec.shutdownTime: {reason}");
                (writer.pause_for_good(target, version).await, Some("pause"))
            }
            ReapAction::ShutdownDelete => {
                let reason = &decision.reason;
                tracing::info!(%target, "deleting at spec.shutdownTime: {reason}");
                (
                    writer.delete_if_unchanged(target, version).await,
                    Some("delete"),
                )
            }
        };
        match done {
            Ok(()) => {
                match action {
                    None => self.metrics.reaps.inc(),
                    Some(action) => self.metrics.shutdowns.with_label_values(&[action]).inc(),
                }
                true
            }
            Err(error) => {
                tracing::info!(%target, %error, "reaper decision not carried out this tick");
                false
            }
        }
    }

    /// A pool's output, admitted whole: its status and Events within budget, at most the room
    /// the pool has of creates, each a member of this pool made from its template, and deletes
    /// only of its members. Returns the status patch and the objects to create.
    fn admit_pool_output(
        &self,
        pool: &cubepod_policy_host::runtime::bindings::WarmPool,
        members: &[cubepod_policy_host::runtime::bindings::PoolMember],
        out: &cubepod_policy_host::runtime::bindings::PoolOutput,
    ) -> Result<(Value, Vec<Value>), ReconcileError> {
        let containment = self.containment();
        let budget = &containment.output;
        let what = format!("PodWarmPool {}/{}", pool.namespace, pool.name);
        let patch = budget
            .pool_status_patch(&what, &pool.name, &out.status, pool.generation)
            .and_then(|patch| budget.events(&what, &out.events).map(|()| patch))
            .map_err(ReconcileError::Budget)?;
        // Members this output deletes leave room for their replacements in the same pass
        // (`updateStrategy: Recreate`): deletes are only ever of the pool's own members.
        let active = members
            .iter()
            .filter(|m| !m.claimed && !m.deleting && !out.delete.contains(&m.name))
            .count();
        let room = pools::member_room(pool, active, self.settings.max_pool_replicas);
        if out.create.len() > room {
            return Err(ReconcileError::Refused(Refusal::new(
                Rule::Pool,
                &what,
                "create",
                format!(
                    "{} creates; the pool has room for {room} (min(spec.replicas, \
                     --max-pool-replicas) less its {active} active members)",
                    out.create.len()
                ),
            )));
        }
        if let Some((index, name)) = stray_delete(members, &out.delete) {
            return Err(ReconcileError::Refused(Refusal::new(
                Rule::Pool,
                &what,
                format!("delete[{index}]"),
                format!(
                    "{:?} is not an unclaimed member of the pool",
                    containment::shown(name)
                ),
            )));
        }
        out.create
            .iter()
            .enumerate()
            .map(|(index, m)| {
                pools::member(
                    pool,
                    index,
                    &m.name,
                    &m.manifest,
                    containment.max_manifest_bytes,
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|creates| (patch, creates))
            .map_err(|refusal| match refusal.rule {
                Rule::Budget => ReconcileError::Budget(refusal),
                _ => ReconcileError::Refused(refusal),
            })
    }

    /// An output's admission: what was admitted, or the refusal, counted, logged and surfaced
    /// once as a Warning Event on the object; the error fails the reconcile.
    async fn admitted<T>(
        &self,
        admission: Result<T, ReconcileError>,
        export: &'static str,
        kind: &'static str,
        target: &ObjectRef,
        uid: &str,
        now: i64,
    ) -> Result<T, ReconcileError> {
        let error = match admission {
            Ok(admitted) => return Ok(admitted),
            Err(error) => error,
        };
        let refusal = match &error {
            ReconcileError::Refused(r) => r,
            ReconcileError::Budget(r) => {
                self.metrics
                    .guest_traps
                    .with_label_values(&[export, "budget"])
                    .inc();
                r
            }
            _ => return Err(error),
        };
        self.count_refusal("output", kind_resource(kind), refusal.rule.label());
        tracing::warn!(%target, export, rule = %refusal.rule, field = %refusal.field, "{}", refusal.reason);
        let message = refusal.to_string();
        if self.surfaced.first(target, &message) {
            self.writer()
                .post_controller_event(
                    kind,
                    target,
                    uid,
                    EventType::Warning,
                    "PolicyRefused",
                    message,
                    now,
                )
                .await;
        }
        Err(error)
    }

    /// What a Sandbox call's `kube-client` calls met at the boundary: its refusals and its
    /// deferral, each told as below.
    async fn surface_calls(
        &self,
        target: &ObjectRef,
        uid: &str,
        deferred: Option<&Deferral>,
        calls: &[KubeCall],
        now: i64,
    ) {
        self.surface_refused_calls(target, uid, calls, now).await;
        self.surface_deferral(target, uid, deferred, now).await;
    }

    /// Each `kube-client` call the boundary refused, surfaced once as a Warning Event on the
    /// Sandbox (the guest got the refusal back and decided what to do with it).
    async fn surface_refused_calls(
        &self,
        target: &ObjectRef,
        uid: &str,
        calls: &[KubeCall],
        now: i64,
    ) {
        let refused: Vec<Event> = calls
            .iter()
            .filter_map(|c| match &c.result {
                Err(KubeError::Refused(why)) => Some(why),
                _ => None,
            })
            .filter(|why| self.surfaced.first(target, why))
            .map(|why| Event {
                kind: EventType::Warning,
                reason: "PolicyRefused".to_string(),
                message: cubepod_policy_host::containment::clip(why, EVENT_MESSAGE_BYTES),
            })
            .collect();
        if !refused.is_empty() {
            self.writer()
                .post_events(
                    "Sandbox",
                    target,
                    uid,
                    &refused,
                    Source::Controller,
                    true,
                    now,
                )
                .await;
        }
    }

    /// Each object of a child's name that is not the Sandbox's own, told once as a Warning
    /// Event (`NameConflict`) on the Sandbox.
    async fn surface_name_conflicts(
        &self,
        target: &ObjectRef,
        uid: &str,
        conflicts: &[String],
        now: i64,
    ) {
        let events: Vec<Event> = conflicts
            .iter()
            .filter(|message| self.surfaced.first(target, message))
            .map(|message| Event {
                kind: EventType::Warning,
                reason: containment::NAME_CONFLICT.to_string(),
                message: clip_message(message),
            })
            .collect();
        if !events.is_empty() {
            self.writer()
                .post_events(
                    "Sandbox",
                    target,
                    uid,
                    &events,
                    Source::Controller,
                    true,
                    now,
                )
                .await;
        }
    }

    /// What the controller held back of the policy's writes or status for this Sandbox, past
    /// its bound of what policies wrote: told once by a log line and a Warning Event
    /// (`PolicyObjectsBounded`), naming the bound, the flag and the fix.
    async fn surface_object_bound(
        &self,
        target: &ObjectRef,
        uid: &str,
        past: Option<&super::cache::Past>,
        now: i64,
    ) {
        let Some(past) = past else {
            return;
        };
        if !self
            .surfaced
            .first(target, super::object_bound::POLICY_OBJECTS_BOUNDED)
        {
            return;
        }
        let message = clip_message(&format!(
            "the policy's writes or status for this Sandbox were held back: {}; counted in \
             cubepod_policy_objects_bounded_total",
            past.words()
        ));
        tracing::warn!(%target, "{message}");
        self.writer()
            .post_controller_event(
                "Sandbox",
                target,
                uid,
                EventType::Warning,
                super::object_bound::POLICY_OBJECTS_BOUNDED,
                message,
                now,
            )
            .await;
    }

    /// Writes of the policy's that its Sandbox's rate deferred (the Sandbox is looked at again
    /// when the rate allows: its [`Action`], or the delay an error the policy returns asks
    /// for): the first deferral of an episode (since the rate was last unused for a minute) is
    /// told, by a log line and a Warning Event, not each deferred write.
    async fn surface_deferral(
        &self,
        target: &ObjectRef,
        uid: &str,
        deferred: Option<&Deferral>,
        now: i64,
    ) {
        let Some(deferred) = deferred else {
            return;
        };
        if !deferred.first {
            return;
        }
        let per_minute = self.containment().rates.write_bytes_per_minute;
        let message = clip_message(&format!(
            "the policy's writes for this Sandbox are past its rate of {} a minute \
             (--max-write-bytes-per-minute): {} and {} more deferred, each written when the rate \
             allows (the next in {} s); counted in cubepod_policy_writes_deferred_total",
            cubepod_policy_host::containment::format_bytes(u128::from(per_minute)),
            deferred.what,
            deferred.count.saturating_sub(1),
            deferred.wait.as_secs().max(1),
        ));
        tracing::warn!(%target, what = %deferred.what, wait = ?deferred.wait, "{message}");
        self.writer()
            .post_controller_event(
                "Sandbox",
                target,
                uid,
                EventType::Warning,
                "WritesDeferred",
                message,
                now,
            )
            .await;
    }

    /// `cubepod_boundary_refusals_total` of a refused output (verb `output`, or `reap`).
    fn count_refusal(&self, verb: &str, resource: &str, rule: &str) {
        self.metrics
            .boundary_refusals
            .with_label_values(&[verb, resource, rule])
            .inc();
    }

    async fn post_events(
        &self,
        kind: &str,
        target: &ObjectRef,
        uid: &str,
        events: &[Event],
        now: i64,
    ) {
        let normal = self.settings.normal_events;
        match &self.event_queue {
            Some(queue) => queue.post(kind, target, uid, events, Source::Policy, normal, now),
            None => {
                self.writer()
                    .post_events(kind, target, uid, events, Source::Policy, normal, now)
                    .await
            }
        }
    }

    /// Waits until the Events handed to the queue so far are written; at once when they are
    /// written in the reconcile.
    pub async fn events_written(&self) {
        if let Some(queue) = &self.event_queue {
            queue.flush().await;
        }
    }

    /// An object the cache holds no record of: reported if it is there but unreadable, else
    /// gone (or never there); either way the policy is not called.
    async fn missing(
        &self,
        resource: Resource,
        target: &ObjectRef,
        unreadable: Option<Unreadable>,
        report: &mut Carried,
    ) -> Result<(), ReconcileError> {
        let Some(bad) = unreadable else {
            report.skipped(format!("no {} {target} in the cluster", resource.kind()));
            return Ok(());
        };
        report.skipped(format!(
            "the controller cannot read the {}: {}",
            resource.kind(),
            bad.error
        ));
        self.report_unreadable(resource, target, &bad, report).await
    }

    /// An object whose spec cannot be read gets a status and an Event that say which field
    /// and why, once per problem; nothing else is done for it until it is fixed.
    async fn report_unreadable(
        &self,
        resource: Resource,
        target: &ObjectRef,
        bad: &Unreadable,
        report: &mut Carried,
    ) -> Result<(), ReconcileError> {
        if bad.reported {
            return Ok(());
        }
        tracing::warn!(%target, error = %bad.error, "cannot act on the spec; fix it");
        let writer = self.writer();
        let now = self.settings.clock.now();
        let patch = bad.status_patch(resource == Resource::Sandbox, now);
        report.status_of(|| patch["status"].clone());
        report.events = vec!["InvalidSpec".to_string()];
        writer
            .write_status(resource, target, Some(&bad.resource_version), patch)
            .await
            .map_err(api("reporting the spec's problem"))?;
        writer
            .post_controller_event(
                resource.kind(),
                target,
                &bad.uid,
                EventType::Warning,
                "InvalidSpec",
                bad.message(),
                now,
            )
            .await;
        Ok(())
    }
}

/// Candidates handed to one `reap` call. The work and guest memory of a call stay bounded
/// however many sandboxes a namespace holds: a page of 10,000 takes under 8 MiB of the
/// default policy's linear memory (100,000 in one call took more than 24 MiB, and more than
/// the 1 s deadline in a debug build).
pub const REAP_PAGE: usize = 10_000;

/// Passes a key that asks to run again at once (`requeue` of zero: a claim that adopted its
/// member, and now reports it) gets in a row, in the loop as in `policy test`; past them it is
/// queued.
pub(crate) const IMMEDIATE_PASSES: usize = 3;

/// The reason of the `Ready` condition a failure of the policy's sets.
pub(crate) const POLICY_FAILED: &str = "PolicyFailed";

/// The policy's failure as a condition says it: `Ready=False`, reason `PolicyFailed`, set by
/// the host; a pass the policy gets through drops it (a policy copies its input's conditions
/// through, and would otherwise carry it on).
fn clear_policy_failure(conditions: &mut Vec<Condition>) {
    conditions.retain(|c| !(c.kind == "Ready" && c.reason == POLICY_FAILED));
}

/// The member a claim is bound to, if it is.
fn bound_member(claim: &ClaimView) -> Option<&sandbox::SandboxObject> {
    match claim {
        ClaimView::Bound { member, .. } => Some(member),
        _ => None,
    }
}

/// A condition's message or an Event's, at most [`EVENT_MESSAGE_BYTES`].
fn clip_message(message: &str) -> String {
    cubepod_policy_host::containment::clip(message, EVENT_MESSAGE_BYTES)
}

/// How soon a claim whose suitable members are all offered to claims in flight looks again:
/// about one reconcile, after which each of them is adopted or released.
const CLAIM_WAIT: Duration = Duration::from_millis(20);

/// The most of a refusal an Event quotes.
const EVENT_MESSAGE_BYTES: usize = 1024;

/// The plural of one of our kinds, for the `resource` label.
fn kind_resource(kind: &str) -> &'static str {
    match kind {
        "PodWarmPool" => Resource::PodWarmPool.plural(),
        _ => Resource::Sandbox.plural(),
    }
}

/// What a panic said, when it said it as text.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// The first of a pool's `deletes` that is not one of its unclaimed `members`: a pool deletes
/// only its own members, never one a claim holds.
fn stray_delete<'a>(
    members: &[cubepod_policy_host::runtime::bindings::PoolMember],
    deletes: &'a [String],
) -> Option<(usize, &'a String)> {
    deletes
        .iter()
        .enumerate()
        .find(|(_, name)| !members.iter().any(|m| &m.name == *name && !m.claimed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policys_requeue_is_no_sooner_than_a_second_and_no_later_than_a_deferred_write() {
        let secs = Duration::from_secs;
        assert_eq!(Action::asked(None, None), Action::await_change());
        assert_eq!(Action::asked(Some(0), None), Action::requeue(secs(1)));
        assert_eq!(Action::asked(Some(30), None), Action::requeue(secs(30)));
        assert_eq!(Action::asked(None, Some(secs(7))), Action::requeue(secs(7)));
        assert_eq!(
            Action::asked(Some(30), Some(secs(7))),
            Action::requeue(secs(7))
        );
        assert_eq!(
            Action::asked(Some(3), Some(secs(7))),
            Action::requeue(secs(3))
        );
    }

    #[test]
    fn a_pool_deletes_only_its_unclaimed_members() {
        use cubepod_policy_host::runtime::bindings::PoolMember;
        let member = |name: &str, claimed: bool| PoolMember {
            name: name.to_string(),
            ready: true,
            claimed,
            deleting: false,
            template_hash: None,
        };
        let members = [member("p-0", false), member("p-1", true)];
        let deletes =
            |names: &[&str]| -> Vec<String> { names.iter().map(|n| n.to_string()).collect() };
        assert_eq!(stray_delete(&members, &deletes(&["p-0"])), None);
        let claimed = deletes(&["p-0", "p-1"]);
        assert_eq!(stray_delete(&members, &claimed), Some((1, &claimed[1])));
        let stranger = deletes(&["other"]);
        assert_eq!(stray_delete(&members, &stranger), Some((0, &stranger[0])));
    }
}
