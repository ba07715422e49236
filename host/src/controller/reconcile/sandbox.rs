//! A Sandbox's pass: gone or unreadable, being deleted (`cleanup-sandbox`), a spec past the
//! operator's bounds, the finalizer, a rolled-back candidate's writes, the claim's offer, then
//! `reconcile-sandbox` and what it returned (a claim's adoption, the status, the Events).

use std::time::Duration;

use serde_json::json;

use super::report::clear_policy_failure;
use super::{Carried, Pass, Reconciler};
use crate::controller::action::{Action, ReconcileError, api};
use crate::controller::claims::{ClaimView, Mismatch};
use crate::controller::export::Export;
use crate::controller::inputs;
use crate::controller::policy::Progress;
use crate::controller::undo::Marks;
use crate::controller::writer::Finalizing;
use cubepod_kube::{ApiError, ApiErrorKind, Resource};
use cubepod_policy_host::containment::Rule;
use cubepod_policy_host::model::{ObjectRef, Unreadable, sandbox};
use cubepod_policy_host::runtime::Effect;
use cubepod_policy_host::runtime::bindings::{
    Event, EventType, ObservedChildren, ReconcileOutput, SandboxStatus,
};

impl Reconciler {
    /// Reconciles one Sandbox: the finalizer first, then `reconcile-sandbox` (or
    /// `cleanup-sandbox` once it is being deleted), then what the policy returned; what the
    /// loop does with the key next is the returned pass's [`Action`], beside what it did up to
    /// an error. A failure of the policy's (a trap, its deadline or memory, a refused output) is
    /// also said on the Sandbox (`Self::report_policy_failure`).
    pub async fn sandbox(&self, target: &ObjectRef) -> Pass {
        let pass = self.sandbox_pass(target).await;
        self.reported(Resource::Sandbox, target, pass).await
    }

    /// One pass over a Sandbox, step by step: gone or unreadable, being deleted, a spec past
    /// the operator's bounds, the finalizer, the claim's offer, then the policy's call.
    pub(super) async fn sandbox_pass(&self, target: &ObjectRef) -> Pass {
        let Some(object) = self.cache.sandbox(target) else {
            self.held_statuses.forget(target);
            self.surfaced.forget(target);
            self.claims.forget(target);
            self.policy.undo.forget(target);
            let unreadable = self.cache.unreadable_sandbox(target);
            return self
                .missing(Resource::Sandbox, target, unreadable)
                .await
                .map(|()| Action::await_change());
        };
        let now = self.settings.clock.now();
        if object.sandbox.deleting {
            self.policy.undo.forget(target);
            return self.cleanup_sandbox(target, &object, now).await;
        }
        if let Some(bad) = self.refused_sandbox(target, &object) {
            // A spec the operator does not allow: said in the status, and nothing is made or
            // changed for it; what was started runs on.
            return self
                .report_unreadable(Resource::Sandbox, target, &bad)
                .await
                .map(|()| Action::await_change());
        }
        let mut object = match self.with_finalizer(target, object).await {
            Ok(Some(object)) => object,
            Ok(None) => {
                return Pass::skipped(
                    format!("Sandbox {target} was deleted while its finalizer was added"),
                    Action::await_change(),
                );
            }
            Err(error) => return Pass::failed(error),
        };
        let mut observed = self.cache.observed(target);
        if let Err(error) = self
            .undo_candidate(target, &mut object, &mut observed, now)
            .await
        {
            return Pass::failed(error);
        }
        let claim = self.claims.view(&self.cache, &object, &observed);
        match &claim {
            ClaimView::Wait => {
                return Pass::skipped(
                    format!(
                        "every ready member of the warm pool that suits Sandbox {target} is \
                         offered to another claim in flight; looking again shortly"
                    ),
                    Action::requeue(CLAIM_WAIT),
                );
            }
            ClaimView::None {
                mismatch: Some(mismatch),
            } => {
                self.no_matching_member(&object, mismatch, now).await;
            }
            _ => {}
        }
        self.reconcile_sandbox(target, &object, observed, &claim, now)
            .await
    }

    /// A Sandbox being deleted: `cleanup-sandbox`, its status written while it is not done,
    /// the finalizer removed once it is. A Sandbox deleted without the finalizer is the API
    /// server's to remove: no policy is called for it.
    pub(super) async fn cleanup_sandbox(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
        now: i64,
    ) -> Pass {
        if !object.has_finalizer() {
            return Pass::skipped(
                format!(
                    "Sandbox {target} is being deleted without the {} finalizer: the \
                     controller calls no policy for it",
                    sandbox::FINALIZER
                ),
                Action::await_change(),
            );
        }
        let mut carried = Carried {
            export: Some(Export::CleanupSandbox),
            progress: Some(Progress::cleanup(false)),
            ..Carried::default()
        };
        let outcome = async {
            let observed = self.cache.observed(target);
            let handed = object.sandbox.clone();
            let shadowed =
                self.shadowed(Export::CleanupSandbox, &(handed.clone(), observed.clone()));
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
            self.surface_calls(target, &object.sandbox.uid, &call, now)
                .await;
            carried.calls = call.calls;
            // A deferred write is written when the rate allows, whatever the policy answered.
            let action = Action {
                requeue_after: call.deferred.as_ref().map(|d| d.wait),
            };
            let mut out = call.value.map_err(ReconcileError::Guest)?;
            clear_policy_failure(&mut out.status.conditions);
            carried.done = Some(out.done);
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
            carried.status = self.status_of(|| patch.status_value());
            if out.done {
                tracing::info!(%target, "children deleted; removing the finalizer");
                self.writer()
                    .remove_finalizer(object)
                    .await
                    .map_err(api("removing the finalizer"))?;
                carried.progress = Some(Progress::cleanup(true));
            } else {
                let status = patch.read_back();
                if status != object.sandbox.status {
                    self.write_sandbox_status(object, &patch, &status, None)
                        .await?;
                }
            }
            Ok::<_, ReconcileError>(action)
        }
        .await;
        Pass::new(carried, outcome)
    }

    /// The Sandbox with the controller's finalizer, added if it had none; `None` when it was
    /// deleted meanwhile.
    pub(super) async fn with_finalizer(
        &self,
        target: &ObjectRef,
        object: sandbox::SandboxObject,
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
        }
        Ok(updated)
    }

    /// `reconcile-sandbox` and what it returned: its output admitted whole, then carried out
    /// (a claim's adoption, or the Events, the status and a claim's desiredState).
    pub(super) async fn reconcile_sandbox(
        &self,
        target: &ObjectRef,
        object: &sandbox::SandboxObject,
        observed: ObservedChildren,
        claim: &ClaimView,
        now: i64,
    ) -> Pass {
        let mut carried = Carried::default();
        let outcome = async {
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
            carried.export = Some(Export::ReconcileSandbox);
            let call = self
                .call_guest("reconcile-sandbox", async move |module, context| {
                    module.reconcile_sandbox_async(context, input).await
                })
                .await?;
            let children =
                call.effects
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
            self.surface_calls(target, &object.sandbox.uid, &call, now)
                .await;
            carried.calls = call.calls;
            let deferred = call.deferred.as_ref().map(|d| d.wait);
            let written_past = self.writes.take_bound(target);
            let mut out = match call.value {
                Ok(out) => out,
                Err(error) => {
                    self.surface_object_bound(
                        target,
                        &object.sandbox.uid,
                        written_past.as_ref(),
                        now,
                    )
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
            crate::controller::child_lookup::name_conflict_condition(
                &mut out.status.conditions,
                &call.name_conflicts,
                now,
            );
            // Containment judges the status the policy wrote (a status past its budget is refused,
            // not cut); the cache's bound then fits what was admitted.
            let admitted = self.admit_sandbox_output(target, object, claim, &out, &offered);
            let judged = admitted.is_ok().then(|| out.status.clone());
            let (held_back, cut) = crate::controller::object_bound::fit_status(
                &self.writes,
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
            carried.events = out.events.iter().map(|e| e.reason.clone()).collect();
            carried.requeue_after_seconds = out.requeue_after_seconds;
            carried.claim = out.claim.clone();
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
            carried.status = self.status_of(|| patch.status_value());
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
                carried.progress = Some(Progress::start(
                    crate::controller::startup::is_ready(&status),
                    object.created_at,
                ));
            }
            if let Some(wait) =
                self.held_statuses
                    .hold(target, &object.sandbox.status, &status, now)
            {
                return Ok(Action::requeue(wait));
            }
            carried.ready_seconds = self
                .write_reconciled_status(object, claim, patch, &status, now)
                .await?;
            if let ClaimView::Bound { member, .. } = claim {
                self.carry_desired_state(object, member).await?;
            }
            Ok::<_, ReconcileError>(Action::asked(out.requeue_after_seconds, deferred))
        }
        .await;
        Pass::new(carried, outcome)
    }

    /// On the stable module's pass over a Sandbox that a candidate no longer serving wrote
    /// (`PolicySlot::undo`), takes away what it wrote, so that the stable module writes it
    /// again as if the candidate had never run: its Pod and Secret are deleted (the Pod also
    /// for a Secret, whose token it read at its start), and the stable module sees them going
    /// or gone; its NetworkPolicy and Service are shown with no digest, so they are applied
    /// again; of a status it wrote, the fields a pass carries to the next and the reaper reads
    /// (`idlePausedAt`, `startedAt`) are cleared. Said by one Normal Event. What is left undone (an API error) is tried again at the next pass.
    pub(super) async fn undo_candidate(
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
            "a policy rolled back had written {} of this sandbox: the stable module {} writes \
            them again",
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
    pub(super) async fn delete_child(
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

    /// `reconcile-sandbox`'s output admitted whole before any of it is written: its status and
    /// Events within budget, a claim only of a member it was offered, and `claimedMember` only
    /// the member bound. Its conditions are admitted before any copy of the status is made (as
    /// written, the patch, its text), since a status of thousands of conditions or a huge
    /// message is megabytes, every copy resident at once.
    pub(super) fn admit_sandbox_output(
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
    pub(super) async fn adopt_member(
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
    pub(super) async fn write_reconciled_status(
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
        let first_ready = crate::controller::startup::first_ready(object, status);
        let marked = first_ready.and_then(|_| patch.mark_first_ready(now));
        self.write_sandbox_status(object, &patch, status, marked)
            .await?;
        let startup = first_ready.zip(crate::controller::startup::since(object.created_at, now));
        if let Some((launch, seconds)) = startup {
            self.metrics
                .sandbox_startup
                .with_label_values(&[launch])
                .observe(seconds);
        }
        Ok(startup.map(|(_, seconds)| seconds))
    }

    /// A claim's `desiredState` is its member's: pausing a claim pauses the member that runs
    /// for it, and resuming it resumes the member. The member's own reconcile carries it out,
    /// and its status, mirrored, says so.
    pub(super) async fn carry_desired_state(
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
    pub(super) async fn no_matching_member(
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

    /// [`Self::refused_spec`] of a Sandbox, as its status and Events say it. A sandbox that
    /// was started (its volumes made, or its Pod there) keeps its phase and Pod: a spec edited
    /// past the bounds while it runs does not fail what runs.
    pub(super) fn refused_sandbox(
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

    /// A Sandbox's status, over the version it was computed from: a concurrent write (the
    /// reaper's mark, another replica) makes it a Conflict, and the key is reconciled again.
    pub(super) async fn write_sandbox_status(
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
}

/// The reason of the default policy's Event for a claim handed no pool member.
const NO_READY_MEMBER: &str = "NoReadyMember";

/// `namespace/name` of the Sandbox an input is for.
fn target_words(input: &cubepod_policy_host::runtime::bindings::ReconcileInput) -> String {
    format!("{}/{}", input.sandbox.namespace, input.sandbox.name)
}

/// The member a claim is bound to, if it is.
fn bound_member(claim: &ClaimView) -> Option<&sandbox::SandboxObject> {
    match claim {
        ClaimView::Bound { member, .. } => Some(member),
        _ => None,
    }
}

/// How soon a claim whose suitable members are all offered to claims in flight looks again:
/// about one reconcile, after which each of them is adopted or released.
const CLAIM_WAIT: Duration = Duration::from_millis(20);
