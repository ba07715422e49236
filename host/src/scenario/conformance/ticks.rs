//! The tick cases: the reaper decides only about what it was handed, and a warm pool fills
//! without over-creating.

use super::{Ctx, SelfTestError};
use crate::controller::inputs;
use crate::scenario::format::{Action, ReapTarget};
use crate::scenario::scratch::summary;
use cubepod_policy_host::model::ObjectRef;

pub(super) fn reap(ctx: &Ctx<'_>) -> Result<(), SelfTestError> {
    let scenario = ctx.scenario()?;
    let (names, now) = match (&scenario.steps[0].action, scenario.steps[0].now) {
        (Action::Reap(ReapTarget::Only(names)), Some(now)) => (names.clone(), now),
        _ => return Err(ctx.broken("expected a reap step over named sandboxes, with a now")),
    };
    let mut scratch = ctx.seeded(&scenario)?;
    let cache = scratch.refreshed().map_err(|e| ctx.step_error(e))?;
    let mut given: Vec<_> = cache
        .sandboxes()
        .into_iter()
        .filter_map(|s| cubepod_policy_host::model::sandbox::reap_candidate(&s.sandbox))
        .filter(|s| names.contains(&s.name))
        .collect();
    given.sort_by(|a, b| a.name.cmp(&b.name));
    let one = ctx
        .module
        .reap(scratch.context(), now, &scenario.namespace, &given)
        .map_err(|e| ctx.runtime(e))?;
    let two = ctx
        .module
        .reap(scratch.context(), now, &scenario.namespace, &given)
        .map_err(|e| ctx.runtime(e))?;
    if one.value != two.value {
        return Err(ctx.violation(
            "determinism (the same input makes the same decisions)",
            format!("{} then {}", reaped(&one.value), reaped(&two.value)),
        ));
    }
    if let Some(call) = one.calls.first() {
        return Err(ctx.violation(
            "reap only decides",
            format!("reap made {}", summary(call, &scenario.namespace)),
        ));
    }
    for decision in &one.value {
        let handed = given
            .iter()
            .any(|s| scenario.namespace == decision.namespace && s.name == decision.name);
        if !handed {
            return Err(ctx.violation(
                "reap returns only sandboxes it was given",
                format!(
                    "decided to pause {}/{}, which it was not given (given: {})",
                    decision.namespace,
                    decision.name,
                    names.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn warm_pool(ctx: &Ctx<'_>) -> Result<(), SelfTestError> {
    let scenario = ctx.scenario()?;
    let (name, now) = match (&scenario.steps[0].action, scenario.steps[0].now) {
        (Action::Pool(name), Some(now)) => (name.clone(), now),
        _ => return Err(ctx.broken("expected a pool step with a now")),
    };
    let max = scenario.max_pool_replicas;
    let mut scratch = ctx.seeded(&scenario)?;
    let target = ObjectRef::new(&scenario.namespace, &name);
    let cache = scratch.refreshed().map_err(|e| ctx.step_error(e))?;
    let pool = cache
        .pool(&target)
        .ok_or_else(|| ctx.broken(format!("no pool {target}")))?;
    let wanted = pool.pool.spec.replicas.min(max) as usize;
    let input = inputs::pool_input(cache, &pool.pool, now, max);
    let one = ctx
        .module
        .reconcile_pool(scratch.context(), input.clone())
        .map_err(|e| ctx.runtime(e))?;
    let two = ctx
        .module
        .reconcile_pool(scratch.context(), input)
        .map_err(|e| ctx.runtime(e))?;
    if one.value != two.value || one.calls != two.calls {
        return Err(ctx.violation(
            "determinism (the same input makes the same decisions)",
            "two reconciles of the same pool input differ",
        ));
    }

    let action = Action::Pool(name.clone());
    let first = ctx.step(&mut scratch, &action, Some(now), max)?;
    if first.pool_create.len() > wanted {
        return Err(ctx.violation(
            "a pool creates no more members than its replicas",
            format!(
                "created {} for {wanted} replicas: {}",
                first.pool_create.len(),
                first.pool_create.join(", ")
            ),
        ));
    }
    // Members created a pass ago are not ready yet: a policy that counted only ready ones, or
    // that chose fresh names, would create again and overshoot.
    let second = ctx.step(&mut scratch, &action, Some(now), max)?;
    let members = scratch
        .refreshed()
        .map_err(|e| ctx.step_error(e))?
        .pool_members(&target);
    if members.len() > wanted {
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        return Err(ctx.violation(
            "no over-create while members start",
            format!(
                "{} members for {wanted} replicas after a second pass that created {}: {}",
                members.len(),
                second.pool_create.len(),
                names.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A reap's decisions in words: `idle-pause ns/a (300 s idle: reason)`, or `no decision`.
fn reaped(decisions: &[cubepod_policy_host::runtime::bindings::ReapDecision]) -> String {
    use cubepod_policy_host::runtime::bindings::ReapAction;
    if decisions.is_empty() {
        return "no decision".to_string();
    }
    let each: Vec<String> = decisions
        .iter()
        .map(|d| {
            let action = match d.action {
                ReapAction::IdlePause => "idle-pause",
                ReapAction::ShutdownPause => "shutdown-pause",
                ReapAction::ShutdownDelete => "shutdown-delete",
            };
            format!(
                "{action} {}/{} ({} s idle: {})",
                d.namespace, d.name, d.idle_seconds, d.reason
            )
        })
        .collect();
    each.join(", ")
}
