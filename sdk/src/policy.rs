//! A policy as a set of decisions, each the default one unless an implementation replaces it,
//! and [`export_policy!`](crate::export_policy) to make a type the component's exports. The
//! defaults are the default policy's decisions, kept here rather than in the default policy's
//! crate so that every policy, the default among them, is a component crate over this one
//! library: a policy that changes one decision writes that one method, and the default policy
//! (`guest/`) is `impl Policy for DefaultPolicy` with only `describe`.

use crate::prelude::*;

use crate::bindings::{
    CleanupOutput, KubeError, ObservedChildren, PolicyInfo, PoolInput, PoolOutput, ReapCandidate,
    ReapDecision, ReconcileInput, ReconcileOutput, Sandbox, Timestamp,
};
use crate::client::KubeClient;

pub trait Policy {
    /// Name, version and the contract version this policy was built against.
    fn describe() -> PolicyInfo;

    fn reconcile_sandbox(
        client: &mut impl KubeClient,
        input: ReconcileInput,
    ) -> Result<ReconcileOutput, KubeError> {
        crate::reconcile::reconcile(client, &input)
    }

    fn cleanup_sandbox(
        client: &mut impl KubeClient,
        now: Timestamp,
        sandbox: Sandbox,
        observed: ObservedChildren,
    ) -> Result<CleanupOutput, KubeError> {
        crate::cleanup::cleanup(client, now, &sandbox, &observed)
    }

    fn reconcile_pool(input: PoolInput) -> Result<PoolOutput, KubeError> {
        Ok(crate::pool::reconcile_pool(&input))
    }

    fn reap(now: Timestamp, namespace: String, sandboxes: Vec<ReapCandidate>) -> Vec<ReapDecision> {
        crate::reaper::reap(now, &namespace, &sandboxes)
    }
}

/// Exports `$policy` (a type implementing [`Policy`]) as the component's `policy` interface,
/// with the host's `kube-client` as its client. Expands to nothing outside wasm, so a policy
/// crate also builds and tests natively.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::bindings::exports::cubepod::controller::policy::Guest;
            use $crate::bindings::{
                CleanupOutput, KubeError, ObservedChildren, PolicyInfo, PoolInput, PoolOutput,
                ReapCandidate, ReapDecision, ReconcileInput, ReconcileOutput, Sandbox, Timestamp,
            };
            use $crate::client::HostKubeClient;
            use $crate::policy::Policy;

            struct Component;

            impl Guest for Component {
                fn describe() -> PolicyInfo {
                    <$policy as Policy>::describe()
                }
                fn reconcile_sandbox(input: ReconcileInput) -> Result<ReconcileOutput, KubeError> {
                    <$policy as Policy>::reconcile_sandbox(&mut HostKubeClient, input)
                }
                fn cleanup_sandbox(
                    now: Timestamp,
                    sandbox: Sandbox,
                    observed: ObservedChildren,
                ) -> Result<CleanupOutput, KubeError> {
                    <$policy as Policy>::cleanup_sandbox(
                        &mut HostKubeClient,
                        now,
                        sandbox,
                        observed,
                    )
                }
                fn reconcile_pool(input: PoolInput) -> Result<PoolOutput, KubeError> {
                    <$policy as Policy>::reconcile_pool(input)
                }
                fn reap(
                    now: Timestamp,
                    namespace: $crate::__private::String,
                    sandboxes: $crate::__private::Vec<ReapCandidate>,
                ) -> $crate::__private::Vec<ReapDecision> {
                    <$policy as Policy>::reap(now, namespace, sandboxes)
                }
            }

    $crate::bindings::export!(Component with_types_in $crate::bindings);
        };
    };
}
