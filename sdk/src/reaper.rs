//! The reaper: which sandboxes reached their `spec.shutdownTime`, and which running ones have
//! gone without activity past their timeout. Activity is `cubepod.io/last-activity`; a sandbox
//! with none since it started counts from its start. The reaper only decides: the host checks
//! each decision and carries it out (an idle mark the reconcile acts on, `desiredState: Paused`,
//! or the Sandbox's deletion).

use crate::prelude::*;

use crate::bindings::{ReapAction, ReapCandidate, ReapDecision, ShutdownPolicy, Timestamp};

pub fn reap(now: Timestamp, namespace: &str, sandboxes: &[ReapCandidate]) -> Vec<ReapDecision> {
    let mut decisions: Vec<ReapDecision> = sandboxes
        .iter()
        .filter_map(|sandbox| {
            shutdown(now, namespace, sandbox).or_else(|| idle(now, namespace, sandbox))
        })
        .collect();
    decisions.sort_by(|a, b| a.name.cmp(&b.name));
    decisions
}

/// A shutdown time that has passed wins over idleness: the sandbox is done either way, and an
/// idle pause would only be undone by the next activity.
fn shutdown(now: Timestamp, namespace: &str, sandbox: &ReapCandidate) -> Option<ReapDecision> {
    let at = sandbox.shutdown_time.filter(|at| *at <= now)?;
    let action = match sandbox.shutdown_policy {
        ShutdownPolicy::Delete => ReapAction::ShutdownDelete,
        ShutdownPolicy::Pause => ReapAction::ShutdownPause,
    };
    let past = now.saturating_sub(at);
    Some(ReapDecision {
        namespace: namespace.to_string(),
        name: sandbox.name.clone(),
        action,
        idle_seconds: 0,
        reason: format!("spec.shutdownTime passed {past}s ago"),
    })
}

/// The host hands idle candidates (`running`) only when they are to run, not being deleted
/// and not yet marked idle; others come for their shutdown time alone.
fn idle(now: Timestamp, namespace: &str, sandbox: &ReapCandidate) -> Option<ReapDecision> {
    if !sandbox.running {
        return None;
    }
    let timeout = sandbox.idle_timeout_seconds.filter(|t| *t > 0)?;
    // An unclaimed pool member is idle by design; a claim's member is reaped itself.
    let eligible = (sandbox.pool.is_none() || sandbox.claimed_by.is_some())
        && sandbox.claimed_member.is_none();
    if !eligible {
        return None;
    }
    let since = sandbox.last_activity.max(sandbox.started_at)?;
    let idle = u64::try_from(now.saturating_sub(since)).unwrap_or(0);
    (idle > timeout).then(|| ReapDecision {
        namespace: namespace.to_string(),
        name: sandbox.name.clone(),
        action: ReapAction::IdlePause,
        idle_seconds: idle,
        reason: format!("no activity for {idle}s, above idleTimeoutSeconds {timeout}"),
    })
}
