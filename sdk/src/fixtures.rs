//! Builders for test objects (`fixtures::sandbox("a").paused().forked_from("b")`) and a way to
//! read back what a [`RecordingClient`] holds as the host's cache would show it. Native only.

use crate::prelude::*;

use crate::bindings::{
    ClusterNetwork, DesiredState, EgressMode, NetworkSpec, ObservedChildren, ObservedObject,
    ObservedPod, ObservedPvc, PoolInput, PoolMember, ReapCandidate, ReconcileInput, Sandbox,
    SandboxPhase, SandboxSpec, SandboxStatus, ShutdownPolicy, UpdateStrategy, WarmPool,
    WarmPoolSpec, WarmPoolStatus,
};
use crate::names;
use crate::recording::RecordingClient;

pub const NAMESPACE: &str = "cubepod-workloads";
pub const NOW: i64 = 1_800_000_000;

pub fn spec(image: &str) -> SandboxSpec {
    SandboxSpec {
        image: image.to_string(),
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
    }
}

/// The cluster network of the host's default flags.
pub fn cluster_network() -> ClusterNetwork {
    ClusterNetwork {
        cluster_cidrs: vec!["10.244.0.0/16".to_string(), "10.96.0.0/12".to_string()],
        dns_namespace: "kube-system".to_string(),
        dns_pod_labels: vec![("k8s-app".to_string(), "kube-dns".to_string())],
        ingress_from: Vec::new(),
        cluster_domain: "cluster.local".to_string(),
    }
}

/// No children observed.
pub fn nothing_observed() -> ObservedChildren {
    ObservedChildren {
        pvcs: Vec::new(),
        pod: None,
        secret: false,
        network_policy: None,
        service: None,
    }
}

pub fn new_status() -> SandboxStatus {
    SandboxStatus {
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
    }
}

/// A running Sandbox named `name` in [`NAMESPACE`], as the host hands it to the policy.
pub fn sandbox(name: &str) -> SandboxBuilder {
    SandboxBuilder(Sandbox {
        namespace: NAMESPACE.to_string(),
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
        spec: spec("ghcr.io/cubepod/sandbox-base:1.0"),
        status: new_status(),
    })
}

pub struct SandboxBuilder(pub Sandbox);

impl SandboxBuilder {
    pub fn paused(mut self) -> Self {
        self.0.spec.desired_state = DesiredState::Paused;
        self
    }
    pub fn forked_from(mut self, source: &str) -> Self {
        self.0.spec.fork_from = Some(source.to_string());
        self
    }
    pub fn generation(mut self, rootfs_generation: u32) -> Self {
        self.0.spec.rootfs_generation = rootfs_generation;
        self
    }
    pub fn idle_timeout(mut self, seconds: u64) -> Self {
        self.0.spec.idle_timeout_seconds = Some(seconds);
        self
    }
    pub fn last_activity(mut self, at: i64) -> Self {
        self.0.last_activity = Some(at);
        self
    }
    pub fn claiming_from(mut self, pool: &str) -> Self {
        self.0.spec.warm_pool = Some(pool.to_string());
        self
    }
    pub fn with_spec(mut self, edit: impl FnOnce(&mut SandboxSpec)) -> Self {
        edit(&mut self.0.spec);
        self
    }
    pub fn with_status(mut self, edit: impl FnOnce(&mut SandboxStatus)) -> Self {
        edit(&mut self.0.status);
        self
    }
    pub fn deleting(mut self) -> Self {
        self.0.deleting = true;
        self
    }
    pub fn build(self) -> Sandbox {
        self.0
    }
    /// What the host hands the reaper of this sandbox (the host's filter not applied).
    pub fn candidate(self) -> ReapCandidate {
        let s = self.0;
        ReapCandidate {
            name: s.name,
            running: s.spec.desired_state == DesiredState::Running
                && s.status.idle_paused_at.is_none(),
            idle_timeout_seconds: s.spec.idle_timeout_seconds,
            last_activity: s.last_activity,
            started_at: s.status.started_at,
            pool: s.pool,
            claimed_by: s.claimed_by,
            claimed_member: s.status.claimed_member,
            shutdown_time: s.spec.shutdown_time,
            shutdown_policy: s.spec.shutdown_policy,
        }
    }
    /// A reconcile input at [`NOW`] with nothing observed.
    pub fn input(self) -> ReconcileInput {
        ReconcileInput {
            now: NOW,
            sandbox: self.0,
            observed: nothing_observed(),
            fork_source: None,
            pool_candidates: Vec::new(),
            claimed_member: None,
            fresh_token: "token-0123456789abcdef".to_string(),
            cluster_network: cluster_network(),
        }
    }
}

/// The children of `sandbox` that `client` holds, as the host's cache shows them. Pods are
/// ready with `pod_ip` when `pods_ready`, as the kubelet would make them.
pub fn observe(client: &RecordingClient, sandbox: &str, pods_ready: bool) -> ObservedChildren {
    let mut observed = nothing_observed();
    for (key, manifest) in &client.objects {
        let owner = &manifest["metadata"]["labels"][names::SANDBOX_LABEL];
        if owner != sandbox {
            continue;
        }
        let Some((kind, name)) = key.split_once(' ') else {
            continue;
        };
        match kind {
            "pvc" => observed.pvcs.push(ObservedPvc {
                name: name.to_string(),
                deleting: false,
            }),
            "pod" => {
                observed.pod = Some(ObservedPod {
                    name: name.to_string(),
                    deleting: false,
                    ip: pods_ready.then(|| client.pod_ip.clone()).flatten(),
                    ready: pods_ready,
                    rootfs_generation: manifest["metadata"]["labels"][names::GENERATION_LABEL]
                        .as_str()
                        .and_then(|g| g.parse().ok()),
                })
            }
            "secret" => observed.secret = true,
            "networkpolicy" | "service" => {
                let object = Some(ObservedObject {
                    name: name.to_string(),
                    deleting: false,
                    spec_hash: manifest["metadata"]["annotations"][names::SPEC_HASH_ANNOTATION]
                        .as_str()
                        .map(str::to_string),
                });
                if kind == "service" {
                    observed.service = object;
                } else {
                    observed.network_policy = object;
                }
            }
            _ => {}
        }
    }
    observed
}

pub fn pool(name: &str, replicas: u32) -> WarmPool {
    WarmPool {
        namespace: NAMESPACE.to_string(),
        name: name.to_string(),
        uid: format!("uid-{name}"),
        generation: 1,
        spec: WarmPoolSpec {
            replicas,
            template: spec("ghcr.io/cubepod/sandbox-python:3.12"),
            update_strategy: UpdateStrategy::Recreate,
        },
        status: WarmPoolStatus {
            replicas: 0,
            ready_replicas: 0,
            observed_generation: 0,
            conditions: Vec::new(),
        },
    }
}

/// A member made from [`pool`]'s template (its `cubepod.io/template-hash`).
pub fn member(name: &str, ready: bool) -> PoolMember {
    PoolMember {
        name: name.to_string(),
        ready,
        claimed: false,
        deleting: false,
        template_hash: Some(crate::pool::template_hash(&pool("", 0).spec.template)),
    }
}

pub fn pool_input(pool: WarmPool, members: Vec<PoolMember>) -> PoolInput {
    PoolInput {
        now: NOW,
        pool,
        members,
        max_replicas: 100,
    }
}

/// The two inputs of the decision benchmarks: a new sandbox, and the same sandbox converged
/// (after its first reconcile, the children it created observed and the Pod ready).
pub fn new_and_converged(
    name: &str,
) -> Result<(ReconcileInput, ReconcileInput), crate::bindings::KubeError> {
    let new = sandbox(name).input();
    let created = crate::reconcile::reconcile(&mut crate::recording::NullClient::default(), &new)?;
    let mut converged = new.clone();
    converged.sandbox.status = created.status;
    let generation = converged.sandbox.spec.rootfs_generation;
    let pvc = |name: String| ObservedPvc {
        name,
        deleting: false,
    };
    converged.observed = ObservedChildren {
        pvcs: vec![
            pvc(names::workspace_pvc(name)),
            pvc(names::rootfs_pvc(name, generation)),
        ],
        pod: Some(ObservedPod {
            name: names::pod(name),
            deleting: false,
            ip: Some("10.0.0.1".to_string()),
            ready: true,
            rootfs_generation: Some(generation),
        }),
        secret: true,
        network_policy: Some(ObservedObject {
            name: names::network_policy(name),
            deleting: false,
            spec_hash: Some(
                crate::manifest::network_policy(
                    &new.sandbox.namespace,
                    crate::manifest::Owner {
                        kind: "Sandbox",
                        name,
                        uid: &new.sandbox.uid,
                    },
                    &new.sandbox.spec,
                    &new.cluster_network,
                )
                .spec_hash,
            ),
        }),
        service: None,
    };
    Ok((new, converged))
}
