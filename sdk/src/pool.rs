//! Warm pools: keep `replicas` ready, unclaimed member Sandboxes. Members get deterministic
//! names (`<pool>-<index>`, lowest free index first), so a create that the cache has not shown
//! yet is chosen again under the same name and meets AlreadyExists instead of making a second
//! member: a pool never over-creates while earlier creates are in flight.
//!
//! Each member carries `cubepod.io/template-hash`, the digest of the template it was made from
//! ([`template_hash`]). A member with another digest (or none: made before digests) is stale:
//! `updateStrategy: Recreate` deletes it at once and makes a fresh one in its place;
//! `OnReplenish` keeps it until it is claimed, and only new members come from the new template.

use crate::prelude::*;

use crate::bindings::{
    ConditionStatus, MemberCreate, PoolInput, PoolMember, PoolOutput, UpdateStrategy,
    WarmPoolStatus,
};
use crate::manifest::{self, Owner};
use crate::status::{self, READY, SPEC_VALID, set_condition};
use crate::{names, validate};

pub const REPLICAS_CAPPED: &str = "ReplicasCapped";

pub fn reconcile_pool(input: &PoolInput) -> PoolOutput {
    let pool = &input.pool;
    let now = input.now;
    let mut out = PoolOutput {
        create: Vec::new(),
        delete: Vec::new(),
        status: WarmPoolStatus {
            observed_generation: pool.generation,
            ..pool.status.clone()
        },
        events: Vec::new(),
    };
    let active: Vec<&PoolMember> = input
        .members
        .iter()
        .filter(|m| !m.claimed && !m.deleting)
        .collect();
    out.status.replicas = active.len() as u32;
    out.status.ready_replicas = active.iter().filter(|m| m.ready).count() as u32;

    if let Err(problem) = check(input) {
        if !status::holds(
            &out.status.conditions,
            SPEC_VALID,
            ConditionStatus::False,
            problem.reason,
        ) {
            out.events
                .push(status::warning(problem.reason, problem.message.clone()));
        }
        set_condition(
            &mut out.status.conditions,
            SPEC_VALID,
            ConditionStatus::False,
            problem.reason,
            problem.message,
            now,
        );
        return out;
    }
    set_condition(
        &mut out.status.conditions,
        SPEC_VALID,
        ConditionStatus::True,
        "Valid",
        "",
        now,
    );

    let wanted = pool.spec.replicas.min(input.max_replicas);
    report_cap(&mut out, pool.spec.replicas, input.max_replicas, now);

    let hash = template_hash(&pool.spec.template);
    let stale: Vec<&PoolMember> = match pool.spec.update_strategy {
        UpdateStrategy::Recreate => active
            .iter()
            .copied()
            .filter(|m| m.template_hash.as_deref() != Some(hash.as_str()))
            .collect(),
        UpdateStrategy::OnReplenish => Vec::new(),
    };
    if !stale.is_empty() {
        out.delete = stale.iter().map(|m| m.name.clone()).collect();
        out.events.push(status::normal(
            "Recreating",
            format!(
                "deleting {} member(s) made from an older template",
                stale.len()
            ),
        ));
    }
    // What is left once the stale members go: the count the pool fills or trims to.
    let active: Vec<&PoolMember> = active
        .into_iter()
        .filter(|m| !stale.iter().any(|s| s.name == m.name))
        .collect();

    let have = active.len() as u32;
    if have < wanted {
        let owner = Owner {
            kind: "PodWarmPool",
            name: &pool.name,
            uid: &pool.uid,
        };
        let taken = |name: &str| input.members.iter().any(|m| m.name == name);
        let names = (0..)
            .map(|i| names::pool_member(&pool.name, i))
            .filter(|name| !taken(name))
            .take((wanted - have) as usize);
        for name in names {
            let manifest =
                manifest::pool_member(&name, &pool.namespace, owner, &pool.spec.template);
            out.create.push(MemberCreate { name, manifest });
        }
        out.events.push(status::normal(
            "Scaling",
            format!("creating {} member(s) to reach {wanted}", wanted - have),
        ));
    } else if have > wanted {
        // Surplus goes unready first (it serves no claim yet), then newest first.
        let mut surplus = active.clone();
        surplus.sort_by_key(|m| {
            (
                m.ready,
                core::cmp::Reverse(member_index(&pool.name, &m.name)),
            )
        });
        out.delete.extend(
            surplus
                .iter()
                .take((have - wanted) as usize)
                .map(|m| m.name.clone()),
        );
        out.events.push(status::normal(
            "Scaling",
            format!("deleting {} member(s) down to {wanted}", have - wanted),
        ));
    }

    // The members this pass keeps: a surplus being deleted is not one of the `wanted`.
    let kept_ready = active
        .iter()
        .filter(|m| m.ready && !out.delete.contains(&m.name))
        .count() as u32;
    let (ready_status, reason) = if kept_ready >= wanted {
        (ConditionStatus::True, "Filled")
    } else {
        (ConditionStatus::False, "Filling")
    };
    let surplus = out.status.ready_replicas.saturating_sub(kept_ready);
    let mut message = format!("{kept_ready} of {wanted} members ready");
    if surplus > 0 {
        message.push_str(&format!("; {surplus} more being deleted"));
    }
    set_condition(
        &mut out.status.conditions,
        READY,
        ready_status,
        reason,
        message,
        now,
    );
    out
}

/// The digest of a pool template, as the `cubepod.io/template-hash` label of its members.
pub use crate::manifest::template_hash;

fn check(input: &PoolInput) -> Result<(), validate::Invalid> {
    let pool = &input.pool;
    validate::spec(&pool.spec.template, "spec.template")?;
    if pool.spec.template.shutdown_time.is_some() {
        // One absolute time for every member, claimed or not, would shut the pool down at
        // once; the claim's own shutdownTime is what a user means.
        return Err(validate::Invalid {
            reason: "ShutdownTimeInTemplate",
            message: "a pool template may not set shutdownTime: set it on the Sandbox that \
                      claims from the pool"
                .to_string(),
        });
    }
    // Member names are `<pool>-<index>` and label their children, so they must fit a label.
    let longest_member = names::pool_member(&pool.name, pool.spec.replicas.max(1) * 2);
    if longest_member.len() > names::MAX_LABEL_VALUE {
        return Err(validate::Invalid {
            reason: "NameTooLong",
            message: format!(
                "member names such as {longest_member:?} exceed {} characters: recreate the \
                 pool with a shorter name",
                names::MAX_LABEL_VALUE
            ),
        });
    }
    Ok(())
}

fn report_cap(out: &mut PoolOutput, replicas: u32, cap: u32, now: i64) {
    if replicas > cap {
        let message = format!(
            "spec.replicas {replicas} is above the controller's cap of {cap}: {cap} members \
             are kept; lower spec.replicas or raise the controller's --max-pool-replicas"
        );
        if !status::holds(
            &out.status.conditions,
            REPLICAS_CAPPED,
            ConditionStatus::True,
            "AboveCap",
        ) {
            out.events
                .push(status::warning(REPLICAS_CAPPED, message.clone()));
        }
        set_condition(
            &mut out.status.conditions,
            REPLICAS_CAPPED,
            ConditionStatus::True,
            "AboveCap",
            message,
            now,
        );
    } else {
        set_condition(
            &mut out.status.conditions,
            REPLICAS_CAPPED,
            ConditionStatus::False,
            "WithinCap",
            "",
            now,
        );
    }
}

fn member_index(pool: &str, member: &str) -> u32 {
    member
        .strip_prefix(pool)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|index| index.parse().ok())
        .unwrap_or(u32::MAX)
}
