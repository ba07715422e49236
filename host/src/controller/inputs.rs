//! What the policy is handed for one object: the object and what the cache observed around
//! it. One place builds it, for the control loop and for `policy test` alike.

use super::cache::Cache;
use crate::model::ObjectRef;
use crate::runtime::bindings::{ClusterNetwork, PoolInput, ReconcileInput, Sandbox, WarmPool};

/// The input of `reconcile-sandbox` for `sandbox`.
pub fn reconcile_input(
    cache: &Cache,
    sandbox: &Sandbox,
    now: i64,
    fresh_token: String,
    cluster_network: &ClusterNetwork,
) -> ReconcileInput {
    let near = |name: &String| ObjectRef::new(&sandbox.namespace, name);
    let target = near(&sandbox.name);
    ReconcileInput {
        now,
        observed: cache.observed(&target),
        fork_source: sandbox
            .spec
            .fork_from
            .as_ref()
            .and_then(|source| cache.sandbox(&near(source)))
            .map(|s| s.sandbox),
        pool_candidates: match (&sandbox.spec.warm_pool, &sandbox.status.claimed_member) {
            (Some(pool), None) => cache.pool_candidates(&near(pool)),
            _ => Vec::new(),
        },
        claimed_member: sandbox
            .status
            .claimed_member
            .as_ref()
            .and_then(|member| cache.sandbox(&near(member)))
            .map(|s| s.sandbox),
        fresh_token,
        cluster_network: cluster_network.clone(),
        sandbox: sandbox.clone(),
    }
}

/// The input of `reconcile-pool` for `pool`.
pub fn pool_input(cache: &Cache, pool: &WarmPool, now: i64, max_replicas: u32) -> PoolInput {
    PoolInput {
        now,
        members: cache.pool_members(&ObjectRef::new(&pool.namespace, &pool.name)),
        pool: pool.clone(),
        max_replicas,
    }
}
