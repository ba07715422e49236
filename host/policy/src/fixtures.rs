//! Inputs as the host hands them to a policy, for the tests of the host's side (the memo, the
//! runtime's calls, a module's answers): a Sandbox just created and its first
//! `reconcile-sandbox` input, in the host's types. A policy's own tests have the same in the
//! guest's types (`cubepod_policy_sdk::fixtures`).

use crate::model::{children, network};
use crate::runtime::bindings::{
    DesiredState, EgressMode, NetworkSpec, ReconcileInput, Sandbox, SandboxPhase, SandboxSpec,
    SandboxStatus, ShutdownPolicy,
};

/// The image of [`new_sandbox`].
pub const IMAGE: &str = "ghcr.io/cubepod/sandbox-base:1.0";

/// The token [`new_sandbox_input`] hands the policy for the Secret.
pub const FRESH_TOKEN: &str = "token-0123456789abcdef";

/// The Sandbox `name` in `namespace` (uid `uid-<name>`) as the API server holds it just after
/// its creation: its spec's defaults with [`IMAGE`], internet egress, and no status yet
/// (`Pending`, generation 0 observed).
pub fn new_sandbox(namespace: &str, name: &str) -> Sandbox {
    Sandbox {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: format!("uid-{name}"),
        generation: 1,
        deleting: false,
        last_activity: None,
        pool: None,
        claimed_by: None,
        labels: Vec::new(),
        annotations: Vec::new(),
        meta_truncated: false,
        spec: SandboxSpec {
            image: IMAGE.to_string(),
            desired_state: DesiredState::Running,
            rootfs_generation: 1,
            fork_from: None,
            idle_timeout_seconds: None,
            cpu: None,
            memory: None,
            storage_class: None,
            rootfs_size: "10Gi".to_string(),
            workspace_size: "10Gi".to_string(),
            runtime_class: None,
            warm_pool: None,
            network: NetworkSpec {
                egress: EgressMode::Internet,
                allow_cidrs: Vec::new(),
                deny_cidrs: Vec::new(),
            },
            service: None,
            shutdown_time: None,
            shutdown_policy: ShutdownPolicy::Delete,
        },
        status: SandboxStatus {
            phase: SandboxPhase::Pending,
            pod_ip: None,
            rootfs_pvc: None,
            workspace_pvc: None,
            observed_generation: 0,
            conditions: Vec::new(),
            started_at: None,
            idle_paused_at: None,
            claimed_member: None,
            service_fqdn: None,
            shutdown_in: None,
        },
    }
}

/// The first `reconcile-sandbox` input of [`new_sandbox`] at `now`: no child observed yet, no
/// fork or pool, [`FRESH_TOKEN`], the cluster network of the default flags.
pub fn new_sandbox_input(namespace: &str, name: &str, now: i64) -> ReconcileInput {
    ReconcileInput {
        now,
        sandbox: new_sandbox(namespace, name),
        observed: children::empty(),
        fork_source: None,
        pool_candidates: Vec::new(),
        claimed_member: None,
        fresh_token: FRESH_TOKEN.to_string(),
        cluster_network: network::default_cluster_network(),
    }
}
