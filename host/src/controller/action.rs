//! What a reconcile ends in: the [`Action`] the loop takes with its key, or the
//! [`ReconcileError`] it retries. Apart from the reconcile core, so that the loop, the
//! rollouts' counts (`policy.rs`) and the shadow read them without reaching into the core.

use std::time::Duration;

use rand::Rng;

use cubepod_kube::ApiError;
use cubepod_policy_host::containment::{self, Refusal};
use cubepod_policy_host::runtime::RuntimeError;
use cubepod_policy_host::runtime::bindings::KubeError;

/// About when a call refused by the memory budget of all calls in flight is retried.
const MEMORY_BUDGET_RETRY: Duration = Duration::from_millis(500);

/// Why one reconcile failed; the loop retries it with backoff, and goes on.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The policy call failed: a trap, a timeout, the memory limit.
    #[error("policy: {0}")]
    Runtime(#[from] RuntimeError),
    /// The policy returned an error.
    #[error("the policy returned an error: {}", describe_kube_error(.0))]
    Guest(KubeError),
    /// A write of the controller's own failed.
    #[error("{what}: {source}")]
    Api {
        /// The write that failed, in words: `writing the status`.
        what: String,
        /// The API's error.
        #[source]
        source: ApiError,
    },
    /// The task running the policy call panicked or was cancelled.
    #[error("the policy task ended abnormally: {0}")]
    Join(String),
    /// The output broke a rule of the boundary: nothing of it was written.
    #[error("the policy's output was refused: {0}")]
    Refused(Refusal),
    /// The output was past a budget: nothing of it was written.
    #[error("the policy's output is past its budget: {0}")]
    Budget(Refusal),
}

impl ReconcileError {
    /// The `result` label of `cubepod_reconciles_total`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Runtime(e) => e.metric_label(),
            ReconcileError::Guest(_) => "guest_kube_error",
            ReconcileError::Api { .. } => "api_error",
            ReconcileError::Join(_) => "panic",
            ReconcileError::Refused(_) => "refused",
            ReconcileError::Budget(_) => "budget",
        }
    }

    /// A delay the cause asked for (Retry-After), over the queue's backoff. A call failed
    /// for the shared memory budget failed for the other calls in flight, which end within
    /// their deadline: it is retried soon, at a jittered delay that does not grow, as the
    /// sandboxes still calling are; with the growing backoff a sandbox refused a few times
    /// waited minutes while the others took the budget at every requeue.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Runtime(RuntimeError::MemoryBudget { .. }) => {
                Some(MEMORY_BUDGET_RETRY.mul_f64(rand::rng().random_range(0.5..1.5)))
            }
            ReconcileError::Guest(KubeError::Retryable(r)) => {
                Some(Duration::from_millis(r.delay_ms))
            }
            ReconcileError::Api { source, .. } => source.retry_after,
            _ => None,
        }
    }
}

/// `kube-error` in words: `refused: ...`, `retryable after 100 ms: ...`.
pub(crate) fn describe_kube_error(error: &KubeError) -> String {
    match error {
        KubeError::NotFound(m) => format!("not-found: {m}"),
        KubeError::Conflict(m) => format!("conflict: {m}"),
        KubeError::Refused(m) => format!("refused: {m}"),
        KubeError::Invalid(m) => format!("invalid: {m}"),
        KubeError::Retryable(r) => format!("retryable after {} ms: {}", r.delay_ms, r.message),
        KubeError::Other(m) => format!("other: {m}"),
    }
}

/// Tags an API error with the write it failed.
pub(super) fn api(what: &'static str) -> impl FnOnce(ApiError) -> ReconcileError {
    move |source| ReconcileError::Api {
        what: what.to_string(),
        source,
    }
}

/// What the loop does with a key after a reconcile that succeeded, as kube-runtime's `Action`:
/// look at it again after `requeue_after` (zero: at once, `IMMEDIATE_PASSES`), or only when
/// it or its children change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    /// When to look at the key again, if at all.
    pub requeue_after: Option<Duration>,
}

impl Action {
    /// Looked at again only when the object or its children change.
    pub(crate) const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// Looked at again after `after`, whatever changes.
    pub(crate) const fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
        }
    }

    /// The policy's `requeue-after-seconds`, no sooner than
    /// [`containment::MIN_REQUEUE_SECONDS`] (sooner would spin the controller on one key),
    /// and no later than a deferred write's `wait`: it is written when the rate allows,
    /// whatever the policy answered.
    pub(super) fn asked(seconds: Option<u32>, deferred: Option<Duration>) -> Self {
        let asked = seconds
            .map(|s| Duration::from_secs(u64::from(s.max(containment::MIN_REQUEUE_SECONDS))));
        Self {
            requeue_after: match deferred {
                Some(wait) => Some(asked.map_or(wait, |r| r.min(wait))),
                None => asked,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_refused_by_the_shared_memory_budget_is_retried_soon_however_often() {
        let refused = ReconcileError::Runtime(RuntimeError::MemoryBudget {
            export: "reconcile",
            budget: 256 << 20,
        });
        for _ in 0..100 {
            let delay = refused.retry_after().expect("a delay of its own");
            assert!(delay >= MEMORY_BUDGET_RETRY / 2 && delay <= MEMORY_BUDGET_RETRY * 3 / 2);
        }
        let trapped = ReconcileError::Runtime(RuntimeError::DeadlineExceeded {
            export: "reconcile",
            deadline: Duration::from_millis(100),
        });
        assert_eq!(
            trapped.retry_after(),
            None,
            "the module's own failure backs off"
        );
    }

    #[test]
    fn the_policys_requeue_is_no_sooner_than_a_second_and_no_later_than_a_deferred_write() {
        let secs = Duration::from_secs;
        assert_eq!(Action::asked(None, None), Action::await_change());
        assert_eq!(Action::asked(Some(0), None), Action::requeue(secs(1)));
        assert_eq!(Action::asked(Some(30), None), Action::requeue(secs(30)));
        assert_eq!(Action::asked(None, Some(secs(7))), Action::requeue(secs(7)));
        assert_eq!(
            Action::asked(Some(30), Some(secs(7))),
            Action::requeue(secs(7))
        );
        assert_eq!(
            Action::asked(Some(3), Some(secs(7))),
            Action::requeue(secs(3))
        );
    }
}
