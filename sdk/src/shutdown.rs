//! `status.shutdownIn`: the time left before `spec.shutdownTime`, coarse on purpose. It is a
//! printer column, and every change is a status write, so it moves only at a fixed ladder of
//! bucket boundaries (weeks, then 3d, 2d, 1d, 12h, 5h, 2h, 1h, 40m, 20m, 10m) and shows the
//! bucket's lower bound: "at least this long". A sandbox whose shutdown is a week away changes
//! it about a dozen times in its life. The reconcile is requeued at the next boundary, so the
//! column moves without a watch event.

use crate::prelude::*;

use crate::bindings::{ReconcileOutput, Sandbox, Timestamp};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;

/// The buckets below a week, largest first: (lower bound in seconds, shown as).
const LADDER: &[(i64, &str)] = &[
    (3 * DAY, "3d"),
    (2 * DAY, "2d"),
    (DAY, "1d"),
    (12 * HOUR, "12h"),
    (5 * HOUR, "5h"),
    (2 * HOUR, "2h"),
    (HOUR, "1h"),
    (40 * MINUTE, "40m"),
    (20 * MINUTE, "20m"),
    (10 * MINUTE, "10m"),
];

/// Shown once the shutdown time has passed, until the reaper acts (or for good, when paused).
pub const PASSED: &str = "passed";
/// Shown in the last bucket.
pub const UNDER_TEN_MINUTES: &str = "<10m";

/// What `status.shutdownIn` shows with `left` seconds to go, and how many seconds until it
/// shows something else (`None` once passed: nothing changes after that).
pub fn bucket(left: i64) -> (String, Option<i64>) {
    if left <= 0 {
        return (PASSED.to_string(), None);
    }
    // Whole weeks, in days, so that a months-long sandbox changes once a week.
    if left >= WEEK {
        let bound = left / WEEK * WEEK;
        return (format!("{}d", bound / DAY), Some(left - bound + 1));
    }
    for (bound, shown) in LADDER {
        if left >= *bound {
            return (shown.to_string(), Some(left - bound + 1));
        }
    }
    // The last bucket ends at the shutdown time itself, when it reads "passed".
    (UNDER_TEN_MINUTES.to_string(), Some(left))
}

/// Sets `status.shutdownIn` from `spec.shutdownTime` (none without one) and asks to be
/// reconciled again when it next changes, unless the output already asks sooner.
pub fn report(out: &mut ReconcileOutput, sandbox: &Sandbox, now: Timestamp) {
    let Some(at) = sandbox.spec.shutdown_time else {
        out.status.shutdown_in = None;
        return;
    };
    let (shown, next) = bucket(at.saturating_sub(now));
    out.status.shutdown_in = Some(shown);
    if let Some(next) = next {
        let next = u32::try_from(next).unwrap_or(u32::MAX);
        out.requeue_after_seconds = Some(match out.requeue_after_seconds {
            Some(asked) => asked.min(next),
            None => next,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_show_their_lower_bound_and_end_at_the_next_boundary() {
        assert_eq!(bucket(15 * DAY), ("14d".to_string(), Some(DAY + 1)));
        assert_eq!(bucket(WEEK), ("7d".to_string(), Some(1)));
        assert_eq!(bucket(WEEK - 1), ("3d".to_string(), Some(4 * DAY)));
        assert_eq!(bucket(6 * HOUR), ("5h".to_string(), Some(HOUR + 1)));
        assert_eq!(
            bucket(45 * MINUTE),
            ("40m".to_string(), Some(5 * MINUTE + 1))
        );
        assert_eq!(bucket(9 * MINUTE), ("<10m".to_string(), Some(9 * MINUTE)));
        assert_eq!(bucket(0), ("passed".to_string(), None));
        assert_eq!(bucket(-5), ("passed".to_string(), None));
    }

    #[test]
    fn a_week_long_sandbox_changes_only_a_dozen_times() {
        let mut changes = 0;
        let mut shown = String::new();
        let mut left = WEEK;
        loop {
            let (now_shown, next) = bucket(left);
            if now_shown != shown {
                changes += 1;
                shown = now_shown;
            }
            let Some(next) = next else { break };
            // The next change is exactly `next` seconds on, not sooner.
            assert_eq!(bucket(left - next + 1).0, shown, "at {left}");
            left -= next;
        }
        assert_eq!(changes, 13, "7d, the ladder of 10, <10m, passed");
    }
}
