//! What the start-up metrics count. `cubepod_sandbox_startup_seconds` observes, once in a
//! sandbox's life, the time from its `creationTimestamp` to the status write that first reports
//! it Ready. "First" is kept in the API, not in memory, so that a restarted controller or
//! another replica does not count it again: that write also sets the host's own
//! `status.firstReadyAt`, and a sandbox that has it, or whose status already said Ready, is
//! never counted. A pause and resume, a reset or a Pod's restart is then no start-up. A pool
//! member is not counted (nobody waits for it): its claim is, as `warm`.
//!
//! Sandboxes made before `firstReadyAt` existed and Ready since are not counted either; one
//! that was never Ready then is counted once, from its creation, when it first is.

use cubepod_policy_host::model::sandbox::SandboxObject;
use cubepod_policy_host::runtime::bindings::{ConditionStatus, SandboxStatus};

/// `warm` or `cold` when writing `written` over `object`'s status is its first report of
/// Ready; `None` otherwise.
pub(crate) fn first_ready(object: &SandboxObject, written: &SandboxStatus) -> Option<&'static str> {
    let before = &object.sandbox.status;
    let counted = object.first_ready_at.is_some() || is_ready(before);
    let member = object.sandbox.pool.is_some() && written.claimed_member.is_none();
    if counted || member || !is_ready(written) {
        return None;
    }
    Some(if written.claimed_member.is_some() {
        "warm"
    } else {
        "cold"
    })
}

/// Whether `status` says Ready.
pub(crate) fn is_ready(status: &SandboxStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == ConditionStatus::True)
}

/// Seconds from `created_at` to `now`, never negative (clocks of two machines).
pub(crate) fn since(created_at: Option<i64>, now: i64) -> Option<f64> {
    created_at.map(|created| now.saturating_sub(created).max(0) as f64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use cubepod_policy_host::model::sandbox::from_json;

    fn object(labels: serde_json::Value, status: serde_json::Value) -> SandboxObject {
        from_json(&json!({
            "metadata": {"name": "a", "namespace": "ns", "labels": labels,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"image": "i"},
            "status": status,
        }))
        .unwrap()
    }

    fn ready(mut status: SandboxStatus, claimed: Option<&str>) -> SandboxStatus {
        status.claimed_member = claimed.map(str::to_string);
        status.conditions = vec![cubepod_policy_host::runtime::bindings::Condition {
            kind: "Ready".into(),
            status: ConditionStatus::True,
            reason: "PodReady".into(),
            message: String::new(),
            last_transition_time: 10,
        }];
        status
    }

    #[test]
    fn only_the_first_report_of_ready_counts() {
        let new = object(json!({}), json!({"phase": "Pending"}));
        assert_eq!(new.created_at, Some(1_767_225_600));
        let written = ready(new.sandbox.status.clone(), None);
        assert_eq!(first_ready(&new, &written), Some("cold"));
        assert_eq!(
            first_ready(&new, &ready(new.sandbox.status.clone(), Some("p-0"))),
            Some("warm")
        );
        // Not ready yet: nothing.
        assert_eq!(first_ready(&new, &new.sandbox.status.clone()), None);
        // Already Ready before this write, or marked once: nothing, after a restart too.
        let was_ready = object(
            json!({}),
            json!({"conditions": [{"type": "Ready", "status": "True", "reason": "PodReady"}]}),
        );
        assert_eq!(first_ready(&was_ready, &written), None);
        let resumed = object(
            json!({}),
            json!({"phase": "Paused", "firstReadyAt": "2026-01-01T00:01:00Z"}),
        );
        assert_eq!(resumed.first_ready_at, Some(1_767_225_660));
        assert_eq!(first_ready(&resumed, &written), None);
        // An unclaimed pool member: nobody waits for it.
        let member = object(json!({"cubepod.io/pool": "p"}), json!({}));
        assert_eq!(first_ready(&member, &written), None);
    }

    #[test]
    fn time_since_creation_is_never_negative() {
        assert_eq!(since(Some(100), 130), Some(30.0));
        assert_eq!(since(Some(100), 90), Some(0.0));
        assert_eq!(since(None, 90), None);
    }
}
