//! The idle reaper's decisions.

use cubepod_guest::fixtures::{NOW, sandbox};
use cubepod_guest::reaper::reap;

fn started(name: &str, timeout: u64, started_at: i64) -> cubepod_guest::fixtures::SandboxBuilder {
    sandbox(name)
        .idle_timeout(timeout)
        .with_status(|s| s.started_at = Some(started_at))
}

#[test]
fn pauses_only_sandboxes_idle_past_their_timeout() {
    let sandboxes = vec![
        started("idle", 60, NOW - 61).build(),
        started("fresh", 60, NOW - 30).build(),
        started("active", 60, NOW - 600)
            .last_activity(NOW - 10)
            .build(),
        started("stale-activity", 60, NOW - 600)
            .last_activity(NOW - 120)
            .build(),
        started("no-timeout", 0, NOW - 10_000).build(),
        sandbox("never-started").idle_timeout(1).build(),
    ];
    let decisions = reap(NOW, &sandboxes);
    let names: Vec<&str> = decisions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["idle", "stale-activity"]);
    assert_eq!(decisions[0].idle_seconds, 61);
    assert!(decisions[0].reason.contains("60"));
}

#[test]
fn skips_paused_deleting_already_reaped_and_unclaimed_pool_members() {
    let mut member = started("pool-0", 60, NOW - 600).build();
    member.pool = Some("pool".to_string());
    let mut claimed = started("pool-1", 60, NOW - 600).build();
    claimed.pool = Some("pool".to_string());
    claimed.claimed_by = Some("claim".to_string());
    let sandboxes = vec![
        started("paused", 60, NOW - 600).paused().build(),
        started("deleting", 60, NOW - 600).deleting().build(),
        started("reaped", 60, NOW - 600)
            .with_status(|s| s.idle_paused_at = Some(NOW - 300))
            .build(),
        member,
        claimed,
    ];
    let names: Vec<String> = reap(NOW, &sandboxes).into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["pool-1"]);
}
