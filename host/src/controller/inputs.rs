//! What the policy is handed for one object: the object and what the cache observed around
//! it. One place builds it, for the control loop and for `policy test` alike.

use super::cache::Cache;
use super::claims::ClaimView;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::bindings::{
    ClusterNetwork, ObservedChildren, PoolInput, ReconcileInput, Sandbox, WarmPool,
};

/// The input of `reconcile-sandbox` for `sandbox`, whose own children are `observed` and
/// which is, to its pool, `claim` ([`super::claims::Claims::view`]).
pub fn reconcile_input(
    cache: &Cache,
    sandbox: &Sandbox,
    observed: ObservedChildren,
    claim: &ClaimView,
    now: i64,
    fresh_token: String,
    cluster_network: &ClusterNetwork,
) -> ReconcileInput {
    let near = |name: &String| ObjectRef::new(&sandbox.namespace, name);
    let mut handed = sandbox.clone();
    let (pool_candidates, claimed_member) = match claim {
        ClaimView::Offered(offer) => (vec![offer.member.clone()], None),
        ClaimView::Bound { member, recovered } => {
            if *recovered {
                // Adopted, its status not written yet: the member's label says so.
                handed.status.claimed_member = Some(member.sandbox.name.clone());
            }
            (Vec::new(), Some(member.sandbox.clone()))
        }
        ClaimView::Unclaimed | ClaimView::Wait | ClaimView::None { .. } => (Vec::new(), None),
    };
    ReconcileInput {
        now,
        observed,
        fork_source: sandbox
            .spec
            .fork_from
            .as_ref()
            .and_then(|source| cache.sandbox(&near(source)))
            .map(|s| s.sandbox),
        pool_candidates,
        claimed_member,
        fresh_token,
        cluster_network: cluster_network.clone(),
        sandbox: handed,
    }
}

/// The input of `reconcile-pool` for `pool`.
pub(crate) fn pool_input(cache: &Cache, pool: &WarmPool, now: i64, max_replicas: u32) -> PoolInput {
    PoolInput {
        now,
        members: cache.pool_members(&ObjectRef::new(&pool.namespace, &pool.name)),
        pool: pool.clone(),
        max_replicas,
    }
}
