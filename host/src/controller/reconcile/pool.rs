//! A PodWarmPool's pass: `reconcile-pool`, its output admitted whole (its room, its own
//! members), then the members it creates and deletes and its status with the record of its
//! members.

use std::time::Duration;

use serde_json::{Value, json};

use super::report::clear_policy_failure;
use super::{Carried, Pass, Reconciler};
use crate::controller::action::{Action, ReconcileError, api};
use crate::controller::cache::PoolObject;
use crate::controller::export::Export;
use crate::controller::inputs;
use cubepod_kube::{ApiErrorKind, Resource};
use cubepod_policy_host::containment::{self, Refusal, Rule, pools};
use cubepod_policy_host::model::{ObjectRef, Unreadable, pool};

impl Reconciler {
    /// Reconciles one PodWarmPool: `reconcile-pool`, then its creates and deletes of members
    /// and its status. A failure of the policy's is said on the pool, as on a Sandbox.
    pub(crate) async fn pool(&self, target: &ObjectRef) -> Pass {
        let pass = self.pool_pass(target).await;
        self.reported(Resource::PodWarmPool, target, pass).await
    }

    /// One pass over a pool, step by step: gone or unreadable, a template past the operator's
    /// bounds, claims being served from it, then the policy's call.
    pub(super) async fn pool_pass(&self, target: &ObjectRef) -> Pass {
        let Some(object) = self.cache.pool(target) else {
            self.surfaced.forget(target);
            let unreadable = self.cache.unreadable_pool(target);
            return self
                .missing(Resource::PodWarmPool, target, unreadable)
                .await
                .map(|()| Action::await_change());
        };
        if let Some(bad) = self.refused_pool(&object) {
            // A template the operator does not allow: said in the status, and no member is
            // made from it.
            return self
                .report_unreadable(Resource::PodWarmPool, target, &bad)
                .await
                .map(|()| Action::await_change());
        }
        if let Some(wait) = self.claims.refill_waits(&self.cache, target) {
            // Claims of this pool are being served from its ready members: its refill starts
            // Pods, which would slow them; it runs once they are served.
            return Pass::new(Carried::default(), Ok(Action::requeue(wait)));
        }
        self.reconcile_pool(target, &object).await
    }

    /// `reconcile-pool` and what it returned: its output admitted whole, then carried out (the
    /// members it creates and deletes, its Events and its status).
    pub(super) async fn reconcile_pool(&self, target: &ObjectRef, object: &PoolObject) -> Pass {
        let mut carried = Carried::default();
        let outcome = async {
        let now = self.settings.clock.now();
        let input = inputs::pool_input(
            &self.cache,
            &object.pool,
            now,
            self.settings.max_pool_replicas,
        );
        let shadowed = self.shadowed(Export::ReconcilePool, &input);
        carried.export = Some(Export::ReconcilePool);
        let call = self
            .call_guest("reconcile-pool", async move |module, context| {
                module.reconcile_pool_async(context, input).await
            })
            .await?;
        if let Some((shadow, input)) = shadowed {
            let (object, value) = (target.to_string(), call.value.clone());
            tokio::spawn(async move { shadow.reconcile_pool(object, input, value).await });
        }
        carried.calls = call.calls;
        let mut out = call.value.map_err(ReconcileError::Guest)?;
        clear_policy_failure(&mut out.status.conditions);
        carried.events = out.events.iter().map(|e| e.reason.clone()).collect();
        carried.pool_create = out.create.iter().map(|m| m.name.clone()).collect();
        carried.pool_delete = out.delete.clone();
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
        carried.status = self.status_of(|| patch["status"].clone());
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
        self.write_pool_status(target, object, patch, &out.status)
            .await?;
        if !taken.is_empty() {
            // Its policy chose names other Sandboxes hold: they are listed to it as taken now,
            // and it chooses again at once.
            tracing::debug!(pool = %target, names = ?taken, "member names held by other Sandboxes");
            return Ok(Action::requeue(Duration::ZERO));
        }
        Ok::<_, ReconcileError>(Action::await_change())
        }
        .await;
        Pass::new(carried, outcome)
    }

    /// A pool's status as `reconcile-pool` returned it (`patch`), with the pool's record of
    /// its members: the members just created, and the entries it no longer needs
    /// (`controller::membership`). Written if either changed.
    pub(super) async fn write_pool_status(
        &self,
        target: &ObjectRef,
        object: &PoolObject,
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

    /// A pool's output, admitted whole: its status and Events within budget, at most the room
    /// the pool has of creates, each a member of this pool made from its template, and deletes
    /// only of its members. Returns the status patch and the objects to create.
    pub(super) fn admit_pool_output(
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

    /// [`Self::refused_spec`] of a pool's template: no member is made from it.
    pub(super) fn refused_pool(&self, object: &PoolObject) -> Option<Unreadable> {
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
