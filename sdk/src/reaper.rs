//! The idle reaper: which running sandboxes have gone without activity past their timeout.
//! Activity is `cubepod.io/last-activity`; a sandbox with none since it started counts from
//! its start. The reaper only decides: the host marks the pause and the reconcile carries it out.

use crate::bindings::{ReapAction, ReapCandidate, ReapDecision, Timestamp};

pub fn reap(now: Timestamp, namespace: &str, sandboxes: &[ReapCandidate]) -> Vec<ReapDecision> {
    let mut decisions: Vec<ReapDecision> = sandboxes
        .iter()
        .filter_map(|sandbox| decide(now, namespace, sandbox))
        .collect();
    decisions.sort_by(|a, b| a.name.cmp(&b.name));
    decisions
}

/// The host hands only sandboxes that are to run, not being deleted and not yet marked idle.
fn decide(now: Timestamp, namespace: &str, sandbox: &ReapCandidate) -> Option<ReapDecision> {
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
