//! What `/healthz` and `/readyz` report: the loop's heartbeat, cache sync and the policy.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::leader::{LeaderState, Leadership};
use cubepod_policy_host::model::time;
use cubepod_policy_host::runtime::PolicyModule;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ActivePolicy {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) contract_version: String,
    pub(crate) digest: String,
}

impl ActivePolicy {
    pub(crate) fn of(module: &PolicyModule) -> Self {
        let info = module.info();
        Self {
            name: info.name.clone(),
            version: info.version.clone(),
            contract_version: info.contract_version.clone(),
            digest: module.digest().to_string(),
        }
    }
}

/// What `/healthz` and `/readyz` report from: the heartbeat, cache sync, leadership and the
/// policy.
pub struct Health {
    /// Whether this replica may reconcile (leader election).
    pub(crate) leadership: Arc<Leadership>,
    /// Unix milliseconds of the control loop's last heartbeat.
    heartbeat: AtomicI64,
    synced: AtomicBool,
    policy: RwLock<Option<ActivePolicy>>,
    /// What the last look at the policy file found, when it was not a module to run: a
    /// refusal or an unreadable file. The running module stays; `/readyz` says why.
    policy_file: RwLock<Option<String>>,
}

fn now_millis() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

impl Default for Health {
    fn default() -> Self {
        Self {
            leadership: Leadership::new(LeaderState::Disabled),
            heartbeat: AtomicI64::default(),
            synced: AtomicBool::default(),
            policy: RwLock::default(),
            policy_file: RwLock::default(),
        }
    }
}

impl Health {
    pub(crate) fn beat(&self) {
        self.heartbeat.store(now_millis(), Ordering::Release);
    }

    /// Alive when the loop beat within `max_silence`.
    pub(crate) fn alive(&self, max_silence: Duration) -> bool {
        let last = self.heartbeat.load(Ordering::Acquire);
        last > 0 && now_millis().saturating_sub(last) <= max_silence.as_millis() as i64
    }

    pub(crate) fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }

    pub(crate) fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub(crate) fn set_policy(&self, policy: ActivePolicy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Some(policy);
    }

    pub(crate) fn policy(&self) -> Option<ActivePolicy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_policy_file(&self, problem: Option<String>) {
        *self.policy_file.write().unwrap_or_else(|p| p.into_inner()) = problem;
    }

    /// Why the policy file's last look did not give a module to run, if it did not.
    pub fn policy_file(&self) -> Option<String> {
        self.policy_file
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Seconds since the epoch of the last beat, for messages.
    pub(crate) fn last_beat(&self) -> String {
        time::format(self.heartbeat.load(Ordering::Acquire) / 1000)
    }
}
