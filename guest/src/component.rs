//! The wasm component: the exports of `wit/` wired to the policy's logic and the host's client.

use crate::bindings::exports::cubepod::controller::policy::Guest;
use crate::bindings::{
    CleanupOutput, KubeError, ObservedChildren, PolicyInfo, PoolInput, PoolOutput, ReapDecision,
    ReconcileInput, ReconcileOutput, Sandbox, Timestamp,
};
use crate::client::HostKubeClient;

struct DefaultPolicy;

impl Guest for DefaultPolicy {
    fn describe() -> PolicyInfo {
        crate::describe()
    }

    fn reconcile_sandbox(input: ReconcileInput) -> Result<ReconcileOutput, KubeError> {
        crate::reconcile::reconcile(&mut HostKubeClient, &input)
    }

    fn cleanup_sandbox(
        now: Timestamp,
        sandbox: Sandbox,
        observed: ObservedChildren,
    ) -> Result<CleanupOutput, KubeError> {
        crate::cleanup::cleanup(&mut HostKubeClient, now, &sandbox, &observed)
    }

    fn reconcile_pool(input: PoolInput) -> Result<PoolOutput, KubeError> {
        Ok(crate::pool::reconcile_pool(&input))
    }

    fn reap(now: Timestamp, sandboxes: Vec<Sandbox>) -> Vec<ReapDecision> {
        crate::reaper::reap(now, &sandboxes)
    }
}

crate::bindings::export!(DefaultPolicy with_types_in crate::bindings);
