//! Status coalescing: a sandbox whose Pod was just started is reported Pending only if it is
//! still starting after a window; most become Running first, and one status write says so.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashMapExt};

use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::bindings::{SandboxPhase, SandboxStatus};

/// When each sandbox's Pending status was first held back. Kept here rather than read from
/// the status: a status that was never written has no start time to measure the window from,
/// and the policy would report a new one on every pass.
pub(crate) struct HeldStatuses {
    window: Duration,
    since: Mutex<HashMap<ObjectRef, Instant>>,
}

impl HeldStatuses {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            since: Mutex::new(HashMap::new()),
        }
    }

    /// How long to wait before writing `new` over `old`, or `None` to write (or skip) now.
    pub(crate) fn hold(
        &self,
        target: &ObjectRef,
        old: &SandboxStatus,
        new: &SandboxStatus,
        now: i64,
    ) -> Option<Duration> {
        let starting = new.phase == SandboxPhase::Pending
            && old.phase == SandboxPhase::Pending
            && new.started_at.is_some()
            && new != old;
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if !starting || self.window.is_zero() {
            since.remove(target);
            return None;
        }
        let held = since
            .entry(target.clone())
            .or_insert_with(Instant::now)
            .elapsed();
        // A start recorded long ago (by an earlier status) has already had its window.
        let recorded = new
            .started_at
            .map(|t| u64::try_from(now.saturating_sub(t)).unwrap_or(0))
            .map_or(Duration::ZERO, Duration::from_secs);
        let age = held.max(recorded);
        if age >= self.window {
            since.remove(target);
            return None;
        }
        Some(
            self.window
                .saturating_sub(age)
                .max(Duration::from_millis(100)),
        )
    }

    /// The sandbox is gone or written: nothing held for it.
    pub(crate) fn forget(&self, target: &ObjectRef) {
        self.since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(target);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.since.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(started_at: Option<i64>) -> SandboxStatus {
        SandboxStatus {
            phase: SandboxPhase::Pending,
            pod_ip: None,
            rootfs_pvc: None,
            workspace_pvc: None,
            observed_generation: 1,
            conditions: Vec::new(),
            started_at,
            idle_paused_at: None,
            claimed_member: None,
            service_fqdn: None,
            shutdown_in: None,
        }
    }

    #[test]
    fn the_window_ends_even_when_the_policy_restarts_its_clock_every_pass() {
        let held = HeldStatuses::new(Duration::from_millis(200));
        let target = ObjectRef::new("ns", "a");
        let old = pending(None);
        let first = held.hold(&target, &old, &pending(Some(1_000)), 1_000);
        assert!(first.is_some());
        std::thread::sleep(Duration::from_millis(250));
        // Never written, so the policy says "started now" again: the window still ends.
        assert_eq!(held.hold(&target, &old, &pending(Some(1_001)), 1_001), None);
        assert!(held.is_empty());
    }

    #[test]
    fn an_old_start_is_not_held() {
        let held = HeldStatuses::new(Duration::from_secs(2));
        let target = ObjectRef::new("ns", "a");
        assert_eq!(
            held.hold(&target, &pending(None), &pending(Some(1_000)), 1_100),
            None
        );
    }
}
