//! The sandbox cases: a new Running sandbox converges with managed children, deterministically,
//! and a deleted one is cleaned up completely before it reports done.

use super::{Ctx, MAX_PASSES, SelfTestError, show, summaries};
use crate::controller::claims::Claims;
use crate::controller::inputs;
use crate::scenario::format::{self, Action, Scenario};
use crate::scenario::scratch::{FRESH_TOKEN, Scratch, kube_error, summary};
use cubepod_kube::Resource;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::model::SPEC_VALID;
use cubepod_policy_host::model::children::{MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL};
use cubepod_policy_host::model::sandbox::phase_name;
use cubepod_policy_host::runtime::KubeCall;
use cubepod_policy_host::runtime::bindings::{ConditionStatus, SandboxStatus};

/// The sandbox a one-step reconcile scenario is about, and its time.
fn reconcile_target(ctx: &Ctx<'_>, scenario: &Scenario) -> Result<(String, i64), SelfTestError> {
    match (&scenario.steps[0].action, scenario.steps[0].now) {
        (Action::Reconcile(name), Some(now)) => Ok((name.clone(), now)),
        _ => Err(ctx.broken("expected a reconcile step with a now")),
    }
}

pub(super) fn new_sandbox(ctx: &Ctx<'_>) -> Result<(), SelfTestError> {
    let scenario = ctx.scenario()?;
    let (name, now) = reconcile_target(ctx, &scenario)?;
    let namespace = scenario.namespace.as_str();

    // The same input on two clusters in the same state: the same calls, the same output.
    let mut first = ctx.seeded(&scenario)?;
    let mut second = ctx.seeded(&scenario)?;
    let target = ObjectRef::new(namespace, &name);
    let cache = first.refreshed().map_err(|e| ctx.step_error(e))?;
    let sandbox = cache
        .sandbox(&target)
        .ok_or_else(|| ctx.broken(format!("no sandbox {target}")))?;
    let observed = cache.observed(&target);
    let claim = Claims::default().view(cache, &sandbox, &observed);
    let input = inputs::reconcile_input(
        cache,
        &sandbox.sandbox,
        observed,
        &claim,
        now,
        FRESH_TOKEN.to_string(),
        &cubepod_policy_host::model::network::default_cluster_network(),
    );
    let one = ctx
        .module
        .reconcile_sandbox(first.context(), input.clone())
        .map_err(|e| ctx.runtime(e))?;
    second.refreshed().map_err(|e| ctx.step_error(e))?;
    let two = ctx
        .module
        .reconcile_sandbox(second.context(), input)
        .map_err(|e| ctx.runtime(e))?;
    if one.calls != two.calls || one.value != two.value {
        return Err(ctx.violation(
            "determinism (the same input makes the same calls)",
            format!(
                "first: {}; second: {}",
                summaries(&one.calls, namespace),
                summaries(&two.calls, namespace)
            ),
        ));
    }
    let output = match &one.value {
        Ok(output) => output,
        Err(error) => return Err(ctx.violation("no error on a plain input", kube_error(error))),
    };
    // A policy may decline a sandbox for a reason of its own (an image allowlist, a rule that
    // resources be named), as long as it says so; what conformance holds is that it never
    // leaves a new sandbox with neither children nor a reason.
    let declined = declined(&output.status);
    if !one.calls.iter().any(|c| c.op.starts_with("ensure-")) {
        match declined {
            Some(Declined { reason, message }) if reason.is_empty() || message.is_empty() => {
                return Err(ctx.violation(
                    "a declined sandbox says why",
                    format!(
                        "the first reconcile created nothing and set SpecValid=False with an \
                         empty reason or message; the policy answered {}",
                        answer(&output.status)
                    ),
                ));
            }
            Some(_) => {}
            None => {
                return Err(ctx.violation(
                    "a new Running sandbox gets children, or SpecValid=False saying why not",
                    format!(
                        "the first reconcile created nothing ({}); the policy answered {}",
                        summaries(&one.calls, namespace),
                        answer(&output.status)
                    ),
                ));
            }
        }
    }
    check_calls(ctx, &one.calls, &name, namespace)?;

    converge(ctx, &mut first, &scenario, &name, now)?;
    let children = first.children_of(&name);
    if children.is_empty() && declined.is_none() {
        return Err(ctx.violation(
            "a new Running sandbox gets children",
            "the converged sandbox has no child labelled with its name",
        ));
    }
    for (what, object) in &children {
        let labels = &object["metadata"]["labels"];
        if labels[MANAGED_BY_LABEL] != MANAGED_BY || object["metadata"]["namespace"] != namespace {
            return Err(ctx.violation(
                "children are managed and in the sandbox's namespace",
                format!(
                    "{what} in {}: labels {labels}",
                    object["metadata"]["namespace"]
                ),
            ));
        }
    }
    Ok(())
}

/// The reason and message of a `SpecValid=False` condition: the policy will not act on the
/// spec.
struct Declined<'a> {
    reason: &'a str,
    message: &'a str,
}

fn declined(status: &SandboxStatus) -> Option<Declined<'_>> {
    status
        .conditions
        .iter()
        .find(|c| c.kind == SPEC_VALID && c.status == ConditionStatus::False)
        .map(|c| Declined {
            reason: c.reason.as_str(),
            message: c.message.as_str(),
        })
}

/// What a policy answered, as a refusal shows it: the phase and each condition with its
/// reason and message.
fn answer(status: &SandboxStatus) -> String {
    let mut text = format!("phase {}", phase_name(status.phase));
    if status.conditions.is_empty() {
        text.push_str(", no condition");
    }
    for c in &status.conditions {
        let state = match c.status {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        };
        text.push_str(&format!(
            ", {}={state} ({}: {:?})",
            c.kind,
            if c.reason.is_empty() {
                "no reason"
            } else {
                &c.reason
            },
            c.message
        ));
    }
    text
}

/// Reconciles until a pass makes no call, then once more: that pass must make none either and
/// return the same status (a converged sandbox is left alone).
fn converge(
    ctx: &Ctx<'_>,
    scratch: &mut Scratch,
    scenario: &Scenario,
    name: &str,
    now: i64,
) -> Result<(), SelfTestError> {
    let action = Action::Reconcile(name.to_string());
    let namespace = scenario.namespace.as_str();
    let mut last = String::new();
    for _ in 0..MAX_PASSES {
        let pass = ctx.step(scratch, &action, Some(now), scenario.max_pool_replicas)?;
        check_calls(ctx, &pass.calls, name, namespace)?;
        if !pass.calls.is_empty() {
            last = summaries(&pass.calls, namespace);
            continue;
        }
        let again = ctx.step(scratch, &action, Some(now), scenario.max_pool_replicas)?;
        if !again.calls.is_empty() {
            return Err(ctx.violation(
                "a converged sandbox makes no call",
                format!(
                    "after a pass with no call, the next made: {}",
                    summaries(&again.calls, namespace)
                ),
            ));
        }
        if again.status != pass.status {
            return Err(ctx.violation(
                "a converged sandbox keeps its status",
                format!(
                    "{} became {}",
                    show(pass.status.as_ref()),
                    show(again.status.as_ref())
                ),
            ));
        }
        return Ok(());
    }
    Err(ctx.violation(
        "convergence",
        format!("still making calls after {MAX_PASSES} passes on an unchanging cluster: {last}"),
    ))
}

/// Every call succeeded, and every manifest is a managed child of `sandbox` in `namespace`.
fn check_calls(
    ctx: &Ctx<'_>,
    calls: &[KubeCall],
    sandbox: &str,
    namespace: &str,
) -> Result<(), SelfTestError> {
    for call in calls {
        if let Err(error) = &call.result {
            return Err(ctx.violation(
                "calls succeed on a plain input",
                format!("{} failed: {}", summary(call, namespace), kube_error(error)),
            ));
        }
        let Some(manifest) = &call.manifest else {
            continue;
        };
        let object: serde_json::Value = serde_json::from_str(manifest).map_err(|e| {
            ctx.violation(
                "manifests are JSON",
                format!("{}: {e}", summary(call, namespace)),
            )
        })?;
        let metadata = &object["metadata"];
        let labelled = metadata["labels"][MANAGED_BY_LABEL] == MANAGED_BY
            && metadata["labels"][SANDBOX_LABEL] == sandbox;
        if !labelled || metadata["namespace"] != namespace || call.namespace != namespace {
            return Err(ctx.violation(
                "children are labelled managed-by and cubepod.io/sandbox, in the sandbox's namespace",
                format!(
                    "{}: namespace {}, labels {}",
                    summary(call, namespace),
                    metadata["namespace"],
                    metadata["labels"]
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn deleted_sandbox(ctx: &Ctx<'_>) -> Result<(), SelfTestError> {
    let scenario = ctx.scenario()?;
    let (name, now) = reconcile_target(ctx, &scenario)?;
    let namespace = scenario.namespace.as_str();
    let mut scratch = ctx.seeded(&scenario)?;
    converge(ctx, &mut scratch, &scenario, &name, now)?;
    let delete = Action::Delete(format::ObjectName {
        resource: Resource::Sandbox,
        name: name.clone(),
    });
    ctx.step(&mut scratch, &delete, Some(now), scenario.max_pool_replicas)?;

    let action = Action::Reconcile(name.clone());
    for _ in 0..MAX_PASSES {
        let before = scratch.children_of(&name);
        let pass = ctx.step(&mut scratch, &action, Some(now), scenario.max_pool_replicas)?;
        if let Some(call) = pass.calls.iter().find(|c| !c.op.starts_with("delete-")) {
            return Err(ctx.violation(
                "cleanup only deletes",
                format!("cleanup made {}", summary(call, namespace)),
            ));
        }
        if let Some(call) = pass.calls.iter().find(|c| c.result.is_err()) {
            return Err(ctx.violation("calls succeed on a plain input", summary(call, namespace)));
        }
        if pass.done == Some(true) {
            if !before.is_empty() {
                let left: Vec<&str> = before.iter().map(|(w, _)| w.as_str()).collect();
                return Err(ctx.violation(
                    "cleanup reports done only once every child is gone",
                    format!("done while these remained: {}", left.join(", ")),
                ));
            }
            if scratch.get(Resource::Sandbox, namespace, &name).is_some() {
                return Err(ctx.broken("the finalizer was not removed after done"));
            }
            return Ok(());
        }
    }
    let left: Vec<String> = scratch
        .children_of(&name)
        .into_iter()
        .map(|(w, _)| w)
        .collect();
    Err(ctx.violation(
        "cleanup deletes every child, then reports done",
        format!(
            "not done after {MAX_PASSES} passes; children left: {}",
            if left.is_empty() {
                "none".to_string()
            } else {
                left.join(", ")
            }
        ),
    ))
}
