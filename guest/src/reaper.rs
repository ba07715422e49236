//! The idle reaper: which running sandboxes have gone without activity past their timeout.
//! Activity is `cubepod.io/last-activity`; a sandbox with none since it started counts from
//! its start. The reaper only decides: the host marks the pause and the reconcile carries it out.

use crate::bindings::{DesiredState, ReapDecision, Sandbox, Timestamp};

pub fn reap(now: Timestamp, sandboxes: &[Sandbox]) -> Vec<ReapDecision> {
    let mut decisions: Vec<ReapDecision> = sandboxes
        .iter()
        .filter_map(|sandbox| decide(now, sandbox))
        .collect();
    decisions.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    decisions
}

fn decide(now: Timestamp, sandbox: &Sandbox) -> Option<ReapDecision> {
    let timeout = sandbox.spec.idle_timeout_seconds.filter(|t| *t > 0)?;
    let eligible = !sandbox.deleting
        && sandbox.spec.desired_state == DesiredState::Running
        && sandbox.status.idle_paused_at.is_none()
        // An unclaimed pool member is idle by design; a claim's member is reaped itself.
        && (sandbox.pool.is_none() || sandbox.claimed_by.is_some())
        && sandbox.status.claimed_member.is_none();
    if !eligible {
        return None;
    }
    let since = sandbox.last_activity.max(sandbox.status.started_at)?;
    let idle = u64::try_from(now.saturating_sub(since)).unwrap_or(0);
    (idle > timeout).then(|| ReapDecision {
        namespace: sandbox.namespace.clone(),
        name: sandbox.name.clone(),
        idle_seconds: idle,
        reason: format!("no activity for {idle}s, above idleTimeoutSeconds {timeout}"),
    })
}
