//! What a pass says on the object a person reads: a failure of the policy's (the `Ready`
//! condition and a Warning Event), a refused output or call, a deferral, a name conflict, what
//! was held back past its bound, a spec the controller cannot act on, and the policy's Events.

use super::{Carried, Pass, Reconciler};
use crate::controller::action::{ReconcileError, api};
use crate::controller::events::{Posting, Source};
use cubepod_kube::Resource;
use cubepod_policy_host::containment;
use cubepod_policy_host::containment::rates::Deferral;
use cubepod_policy_host::model::{ObjectRef, Unreadable};
use cubepod_policy_host::runtime::bindings::{
    Condition, ConditionStatus, Event, EventType, KubeError,
};
use cubepod_policy_host::runtime::{GuestCall, KubeCall, RuntimeError};

impl Reconciler {
    /// A failure of the policy's, said where `kubectl` shows it: `Ready=False` with reason
    /// `PolicyFailed` and the trap, bound or rule in the message, written over the version the
    /// cache holds (once per distinct failure: a retry that fails alike writes nothing), and
    /// one Warning Event per distinct failure. The next pass the policy gets through drops the
    /// condition. Other errors (the API's) are the loop's to retry, and say nothing here.
    pub(super) async fn report_policy_failure(
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
    pub(super) fn policy_failure(&self, error: &ReconcileError) -> Option<String> {
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

    /// An output's admission: what was admitted, or the refusal, counted, logged and surfaced
    /// once as a Warning Event on the object; the error fails the reconcile.
    pub(super) async fn admitted<T>(
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

    /// What a Sandbox call's `kube-client` calls met at the boundary: its refusals, its
    /// deferral and the objects of its children's names that are not the Sandbox's, each told
    /// as below.
    pub(super) async fn surface_calls<T>(
        &self,
        target: &ObjectRef,
        uid: &str,
        call: &GuestCall<T>,
        now: i64,
    ) {
        self.surface_refused_calls(target, uid, &call.calls, now)
            .await;
        self.surface_deferral(target, uid, call.deferred.as_ref(), now)
            .await;
        self.surface_name_conflicts(target, uid, &call.name_conflicts, now)
            .await;
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
                .post_events(&Posting::by_controller(
                    "Sandbox", target, uid, &refused, now,
                ))
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
                .post_events(&Posting::by_controller(
                    "Sandbox", target, uid, &events, now,
                ))
                .await;
        }
    }

    /// What the controller held back of the policy's writes or status for this Sandbox, past
    /// its bound of what policies wrote: told once by a log line and a Warning Event
    /// (`PolicyObjectsBounded`), naming the bound, the flag and the fix.
    pub(super) async fn surface_object_bound(
        &self,
        target: &ObjectRef,
        uid: &str,
        past: Option<&crate::controller::cache::Past>,
        now: i64,
    ) {
        let Some(past) = past else {
            return;
        };
        if !self.surfaced.first(
            target,
            crate::controller::object_bound::POLICY_OBJECTS_BOUNDED,
        ) {
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
                crate::controller::object_bound::POLICY_OBJECTS_BOUNDED,
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
    pub(super) fn count_refusal(&self, verb: &str, resource: &str, rule: &str) {
        self.metrics
            .boundary_refusals
            .with_label_values(&[verb, resource, rule])
            .inc();
    }

    pub(super) async fn post_events(
        &self,
        kind: &str,
        target: &ObjectRef,
        uid: &str,
        events: &[Event],
        now: i64,
    ) {
        let posting = Posting {
            kind,
            target,
            uid,
            events,
            source: Source::Policy,
            post_normal: self.settings.normal_events,
            now,
        };
        match &self.event_queue {
            Some(queue) => queue.post(&posting),
            None => self.writer().post_events(&posting).await,
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
    pub(super) async fn missing(
        &self,
        resource: Resource,
        target: &ObjectRef,
        unreadable: Option<Unreadable>,
    ) -> Pass<()> {
        let Some(bad) = unreadable else {
            return Pass::skipped(
                format!("no {} {target} in the cluster", resource.kind()),
                (),
            );
        };
        let mut pass = self.report_unreadable(resource, target, &bad).await;
        pass.carried.skipped = Some(format!(
            "the controller cannot read the {}: {}",
            resource.kind(),
            bad.error
        ));
        pass
    }

    /// An object whose spec cannot be read gets a status and an Event that say which field
    /// and why, once per problem; nothing else is done for it until it is fixed.
    pub(super) async fn report_unreadable(
        &self,
        resource: Resource,
        target: &ObjectRef,
        bad: &Unreadable,
    ) -> Pass<()> {
        if bad.reported {
            return Pass::new(Carried::default(), Ok(()));
        }
        tracing::warn!(%target, error = %bad.error, "cannot act on the spec; fix it");
        let writer = self.writer();
        let now = self.settings.clock.now();
        let patch = bad.status_patch(resource == Resource::Sandbox, now);
        let carried = Carried {
            status: self.status_of(|| patch["status"].clone()),
            events: vec!["InvalidSpec".to_string()],
            ..Carried::default()
        };
        if let Err(error) = writer
            .write_status(resource, target, Some(&bad.resource_version), patch)
            .await
        {
            return Pass::new(carried, Err(api("reporting the spec's problem")(error)));
        }
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
        Pass::new(carried, Ok(()))
    }
}

/// The reason of the `Ready` condition a failure of the policy's sets.
pub(crate) const POLICY_FAILED: &str = "PolicyFailed";

/// The policy's failure as a condition says it: `Ready=False`, reason `PolicyFailed`, set by
/// the host; a pass the policy gets through drops it (a policy copies its input's conditions
/// through, and would otherwise carry it on).
pub(super) fn clear_policy_failure(conditions: &mut Vec<Condition>) {
    conditions.retain(|c| !(c.kind == "Ready" && c.reason == POLICY_FAILED));
}

/// A condition's message or an Event's, at most [`EVENT_MESSAGE_BYTES`].
fn clip_message(message: &str) -> String {
    cubepod_policy_host::containment::clip(message, EVENT_MESSAGE_BYTES)
}

/// The most of a refusal an Event quotes.
const EVENT_MESSAGE_BYTES: usize = 1024;

/// The plural of one of our kinds, for the `resource` label.
fn kind_resource(kind: &str) -> &'static str {
    match kind {
        "PodWarmPool" => Resource::PodWarmPool.plural(),
        _ => Resource::Sandbox.plural(),
    }
}
