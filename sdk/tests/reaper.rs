//! The idle reaper's decisions.

use cubepod_policy_sdk::fixtures::{NAMESPACE, NOW, sandbox};
use cubepod_policy_sdk::reaper::reap;

fn started(
    name: &str,
    timeout: u64,
    started_at: i64,
) -> cubepod_policy_sdk::fixtures::SandboxBuilder {
    sandbox(name)
        .idle_timeout(timeout)
        .with_status(|s| s.started_at = Some(started_at))
}

#[test]
fn pauses_only_sandboxes_idle_past_their_timeout() {
    let sandboxes = vec![
        started("idle", 60, NOW - 61).candidate(),
        started("fresh", 60, NOW - 30).candidate(),
        started("active", 60, NOW - 600)
            .last_activity(NOW - 10)
            .candidate(),
        started("stale-activity", 60, NOW - 600)
            .last_activity(NOW - 120)
            .candidate(),
        started("no-timeout", 0, NOW - 10_000).candidate(),
        sandbox("never-started").idle_timeout(1).candidate(),
    ];
    let decisions = reap(NOW, NAMESPACE, &sandboxes);
    let names: Vec<&str> = decisions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["idle", "stale-activity"]);
    assert_eq!(decisions[0].idle_seconds, 61);
    assert!(decisions[0].reason.contains("60"));
}

/// Paused, deleting and already reaped sandboxes are not handed over by the host (its
/// `model::sandbox::reap_candidate`); of what is, a pool member is reaped only once claimed,
/// and a claim never (its member is).
#[test]
fn skips_unclaimed_pool_members_and_claims() {
    let mut member = started("pool-0", 60, NOW - 600).candidate();
    member.pool = Some("pool".to_string());
    let mut claimed = started("pool-1", 60, NOW - 600).candidate();
    claimed.pool = Some("pool".to_string());
    claimed.claimed_by = Some("claim".to_string());
    let mut claim = started("claim", 60, NOW - 600).candidate();
    claim.claimed_member = Some("pool-1".to_string());
    let sandboxes = vec![member, claimed, claim];
    let names: Vec<String> = reap(NOW, NAMESPACE, &sandboxes)
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["pool-1"]);
}

/// At its shutdown time a sandbox is shut down as its policy says, whatever its idleness, and
/// even when it is not running (a paused sandbox with `Delete` is still deleted).
#[test]
fn a_passed_shutdown_time_wins_over_idleness() {
    use cubepod_policy_sdk::bindings::{ReapAction, ShutdownPolicy};
    let due = |name: &str, policy: ShutdownPolicy, at: i64| {
        started(name, 60, NOW - 600)
            .with_spec(|s| {
                s.shutdown_time = Some(at);
                s.shutdown_policy = policy;
            })
            .candidate()
    };
    let mut paused = due("paused", ShutdownPolicy::Delete, NOW - 1);
    paused.running = false;
    let sandboxes = vec![
        due("delete", ShutdownPolicy::Delete, NOW),
        due("pause", ShutdownPolicy::Pause, NOW - 3600),
        // Idle, but its shutdown is still ahead: only idle-paused.
        due("later", ShutdownPolicy::Delete, NOW + 1),
        paused,
    ];
    let decisions: Vec<(String, ReapAction)> = reap(NOW, NAMESPACE, &sandboxes)
        .into_iter()
        .map(|d| (d.name, d.action))
        .collect();
    assert_eq!(
        decisions,
        [
            ("delete".to_string(), ReapAction::ShutdownDelete),
            ("later".to_string(), ReapAction::IdlePause),
            ("pause".to_string(), ReapAction::ShutdownPause),
            ("paused".to_string(), ReapAction::ShutdownDelete),
        ]
    );
}

/// A candidate handed only for its shutdown time (not running) is never paused for idleness.
#[test]
fn a_sandbox_not_running_is_not_idle_paused() {
    let mut candidate = started("paused", 60, NOW - 600)
        .with_spec(|s| s.shutdown_time = Some(NOW + 3600))
        .candidate();
    candidate.running = false;
    assert!(reap(NOW, NAMESPACE, &[candidate]).is_empty());
}
