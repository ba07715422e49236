//! The SDK's types in the host's: an input built with the SDK's fixtures, or one the default
//! policy decides on natively, as the host's bindings type it. The host's fixtures are made
//! from the SDK's through it, and a benchmark runs one decision through the component and
//! natively to compare both the time and the answer. Every record is built whole and every
//! variant matched, so that a change of the contract is flagged here.

use cubepod_policy_sdk::bindings as guest;

use crate::runtime::bindings as host;

/// The input, as the host hands it.
pub fn reconcile_input(input: &guest::ReconcileInput) -> host::ReconcileInput {
    let observed = &input.observed;
    host::ReconcileInput {
        now: input.now,
        sandbox: sandbox(&input.sandbox),
        observed: host::ObservedChildren {
            pvcs: observed
                .pvcs
                .iter()
                .map(|p| host::ObservedPvc {
                    name: p.name.clone(),
                    deleting: p.deleting,
                })
                .collect(),
            pod: observed.pod.as_ref().map(|p| host::ObservedPod {
                name: p.name.clone(),
                deleting: p.deleting,
                ip: p.ip.clone(),
                ready: p.ready,
                rootfs_generation: p.rootfs_generation,
            }),
            secret: observed.secret,
            network_policy: observed.network_policy.as_ref().map(observed_object),
            service: observed.service.as_ref().map(observed_object),
        },
        fork_source: input.fork_source.as_ref().map(sandbox),
        pool_candidates: input.pool_candidates.clone(),
        claimed_member: input.claimed_member.as_ref().map(sandbox),
        fresh_token: input.fresh_token.clone(),
        cluster_network: host::ClusterNetwork {
            cluster_cidrs: input.cluster_network.cluster_cidrs.clone(),
            dns_namespace: input.cluster_network.dns_namespace.clone(),
            dns_pod_labels: input.cluster_network.dns_pod_labels.clone(),
            ingress_from: input.cluster_network.ingress_from.clone(),
            cluster_domain: input.cluster_network.cluster_domain.clone(),
        },
    }
}

fn observed_object(o: &guest::ObservedObject) -> host::ObservedObject {
    host::ObservedObject {
        name: o.name.clone(),
        deleting: o.deleting,
        spec_hash: o.spec_hash.clone(),
    }
}

/// The Sandbox, as the host hands it.
pub fn sandbox(s: &guest::Sandbox) -> host::Sandbox {
    let spec = &s.spec;
    host::Sandbox {
        namespace: s.namespace.clone(),
        name: s.name.clone(),
        uid: s.uid.clone(),
        generation: s.generation,
        deleting: s.deleting,
        last_activity: s.last_activity,
        pool: s.pool.clone(),
        claimed_by: s.claimed_by.clone(),
        labels: s.labels.clone(),
        annotations: s.annotations.clone(),
        meta_truncated: s.meta_truncated,
        spec: host::SandboxSpec {
            image: spec.image.clone(),
            desired_state: match spec.desired_state {
                guest::DesiredState::Running => host::DesiredState::Running,
                guest::DesiredState::Paused => host::DesiredState::Paused,
            },
            rootfs_generation: spec.rootfs_generation,
            fork_from: spec.fork_from.clone(),
            idle_timeout_seconds: spec.idle_timeout_seconds,
            cpu: spec.cpu.clone(),
            memory: spec.memory.clone(),
            storage_class: spec.storage_class.clone(),
            rootfs_size: spec.rootfs_size.clone(),
            workspace_size: spec.workspace_size.clone(),
            runtime_class: spec.runtime_class.clone(),
            warm_pool: spec.warm_pool.clone(),
            network: host::NetworkSpec {
                egress: match spec.network.egress {
                    guest::EgressMode::Internet => host::EgressMode::Internet,
                    guest::EgressMode::None => host::EgressMode::None,
                    guest::EgressMode::Cluster => host::EgressMode::Cluster,
                },
                allow_cidrs: spec.network.allow_cidrs.clone(),
                deny_cidrs: spec.network.deny_cidrs.clone(),
            },
            service: spec.service.as_ref().map(|service| host::ServiceSpec {
                ports: service
                    .ports
                    .iter()
                    .map(|p| host::ServicePort {
                        name: p.name.clone(),
                        port: p.port,
                        protocol: match p.protocol {
                            guest::ServiceProtocol::Tcp => host::ServiceProtocol::Tcp,
                            guest::ServiceProtocol::Udp => host::ServiceProtocol::Udp,
                            guest::ServiceProtocol::Sctp => host::ServiceProtocol::Sctp,
                        },
                    })
                    .collect(),
            }),
            shutdown_time: spec.shutdown_time,
            shutdown_policy: match spec.shutdown_policy {
                guest::ShutdownPolicy::Delete => host::ShutdownPolicy::Delete,
                guest::ShutdownPolicy::Pause => host::ShutdownPolicy::Pause,
            },
        },
        status: sandbox_status(&s.status),
    }
}

/// The status, as the host hands it.
pub fn sandbox_status(s: &guest::SandboxStatus) -> host::SandboxStatus {
    host::SandboxStatus {
        phase: match s.phase {
            guest::SandboxPhase::Pending => host::SandboxPhase::Pending,
            guest::SandboxPhase::Running => host::SandboxPhase::Running,
            guest::SandboxPhase::Paused => host::SandboxPhase::Paused,
            guest::SandboxPhase::Terminating => host::SandboxPhase::Terminating,
            guest::SandboxPhase::Failed => host::SandboxPhase::Failed,
        },
        pod_ip: s.pod_ip.clone(),
        rootfs_pvc: s.rootfs_pvc.clone(),
        workspace_pvc: s.workspace_pvc.clone(),
        observed_generation: s.observed_generation,
        conditions: s
            .conditions
            .iter()
            .map(|c| host::Condition {
                kind: c.kind.clone(),
                status: match c.status {
                    guest::ConditionStatus::True => host::ConditionStatus::True,
                    guest::ConditionStatus::False => host::ConditionStatus::False,
                    guest::ConditionStatus::Unknown => host::ConditionStatus::Unknown,
                },
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time,
            })
            .collect(),
        started_at: s.started_at,
        idle_paused_at: s.idle_paused_at,
        claimed_member: s.claimed_member.clone(),
        service_fqdn: s.service_fqdn.clone(),
        shutdown_in: s.shutdown_in.clone(),
    }
}
