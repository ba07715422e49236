//! Modules of contract 0.1.0: what the host hands them and takes back, converted from and to the
//! current contract's types, and their `kube-client` import, served by the current one's.
//!
//! Inputs lose what 0.1 has no field for (labels, annotations, the cluster network,
//! `spec.network`, `spec.service`, the shutdown time, a pool's update strategy, observed
//! NetworkPolicy and Service, ...). The reaper is handed only what 0.1's rule selected, the
//! sandboxes that are to run (`running`): the others are candidates only for a shutdown, which
//! 0.1 knows nothing of. Outputs gain what 0.1 does not say: no Service FQDN or shutdown
//! countdown in a status, a pool's `ready`/`members` as `ready-replicas`/`replicas`, and every
//! reaper decision an idle pause. The bounds, the scope and the boundary of a call are the
//! current contract's, unchanged (`call.rs`, `host/kube_client.rs`).

use super::bindings::cubepod::controller::kube_client::Host as Current;
use super::bindings::{self as cur, v0_1 as old};
use super::host::HostState;

type Answer<T> = wasmtime::Result<Result<T, old::KubeError>>;

// ---------------------------------------------------------------------------------------------
// Inputs: current -> 0.1

pub(super) fn reconcile_input(input: &cur::ReconcileInput) -> old::ReconcileInput {
    old::ReconcileInput {
        now: input.now,
        sandbox: sandbox(&input.sandbox),
        observed: observed(&input.observed),
        fork_source: input.fork_source.as_ref().map(sandbox),
        pool_candidates: input.pool_candidates.clone(),
        claimed_member: input.claimed_member.as_ref().map(sandbox),
        fresh_token: input.fresh_token.clone(),
    }
}

pub(super) fn sandbox(sandbox: &cur::Sandbox) -> old::Sandbox {
    old::Sandbox {
        namespace: sandbox.namespace.clone(),
        name: sandbox.name.clone(),
        uid: sandbox.uid.clone(),
        generation: sandbox.generation,
        deleting: sandbox.deleting,
        last_activity: sandbox.last_activity,
        pool: sandbox.pool.clone(),
        claimed_by: sandbox.claimed_by.clone(),
        spec: spec(&sandbox.spec),
        status: status_to_0_1(&sandbox.status),
    }
}

fn spec(spec: &cur::SandboxSpec) -> old::SandboxSpec {
    old::SandboxSpec {
        image: spec.image.clone(),
        desired_state: match spec.desired_state {
            cur::DesiredState::Running => old::DesiredState::Running,
            cur::DesiredState::Paused => old::DesiredState::Paused,
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
    }
}

fn status_to_0_1(status: &cur::SandboxStatus) -> old::SandboxStatus {
    old::SandboxStatus {
        phase: match status.phase {
            cur::SandboxPhase::Pending => old::SandboxPhase::Pending,
            cur::SandboxPhase::Running => old::SandboxPhase::Running,
            cur::SandboxPhase::Paused => old::SandboxPhase::Paused,
            cur::SandboxPhase::Terminating => old::SandboxPhase::Terminating,
            cur::SandboxPhase::Failed => old::SandboxPhase::Failed,
        },
        pod_ip: status.pod_ip.clone(),
        rootfs_pvc: status.rootfs_pvc.clone(),
        workspace_pvc: status.workspace_pvc.clone(),
        observed_generation: status.observed_generation,
        conditions: status.conditions.iter().map(condition_to_0_1).collect(),
        started_at: status.started_at,
        idle_paused_at: status.idle_paused_at,
        claimed_member: status.claimed_member.clone(),
    }
}

fn condition_to_0_1(condition: &cur::Condition) -> old::Condition {
    old::Condition {
        kind: condition.kind.clone(),
        status: match condition.status {
            cur::ConditionStatus::True => old::ConditionStatus::True,
            cur::ConditionStatus::False => old::ConditionStatus::False,
            cur::ConditionStatus::Unknown => old::ConditionStatus::Unknown,
        },
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        last_transition_time: condition.last_transition_time,
    }
}

pub(super) fn observed(observed: &cur::ObservedChildren) -> old::ObservedChildren {
    old::ObservedChildren {
        pvcs: observed
            .pvcs
            .iter()
            .map(|p| old::ObservedPvc {
                name: p.name.clone(),
                deleting: p.deleting,
            })
            .collect(),
        pod: observed.pod.as_ref().map(|p| old::ObservedPod {
            name: p.name.clone(),
            deleting: p.deleting,
            ip: p.ip.clone(),
            ready: p.ready,
            rootfs_generation: p.rootfs_generation,
        }),
        secret: observed.secret,
    }
}

pub(super) fn pool_input(input: &cur::PoolInput) -> old::PoolInput {
    let pool = &input.pool;
    old::PoolInput {
        now: input.now,
        pool: old::WarmPool {
            namespace: pool.namespace.clone(),
            name: pool.name.clone(),
            uid: pool.uid.clone(),
            generation: pool.generation,
            spec: old::WarmPoolSpec {
                replicas: pool.spec.replicas,
                template: spec(&pool.spec.template),
            },
            status: old::WarmPoolStatus {
                ready: pool.status.ready_replicas,
                members: pool.status.replicas,
                observed_generation: pool.status.observed_generation,
                conditions: pool
                    .status
                    .conditions
                    .iter()
                    .map(condition_to_0_1)
                    .collect(),
            },
        },
        members: input
            .members
            .iter()
            .map(|m| old::PoolMember {
                name: m.name.clone(),
                ready: m.ready,
                claimed: m.claimed,
                deleting: m.deleting,
            })
            .collect(),
        max_replicas: input.max_replicas,
    }
}

/// The candidates 0.1's reaper was handed: those that are to run and not marked idle.
pub(super) fn reap_candidates(candidates: &[cur::ReapCandidate]) -> Vec<old::ReapCandidate> {
    candidates
        .iter()
        .filter(|c| c.running)
        .map(|c| old::ReapCandidate {
            name: c.name.clone(),
            idle_timeout_seconds: c.idle_timeout_seconds,
            last_activity: c.last_activity,
            started_at: c.started_at,
            pool: c.pool.clone(),
            claimed_by: c.claimed_by.clone(),
            claimed_member: c.claimed_member.clone(),
        })
        .collect()
}

fn kube_error_to_0_1(error: cur::KubeError) -> old::KubeError {
    match error {
        cur::KubeError::NotFound(m) => old::KubeError::NotFound(m),
        cur::KubeError::Conflict(m) => old::KubeError::Conflict(m),
        cur::KubeError::Refused(m) => old::KubeError::Refused(m),
        cur::KubeError::Invalid(m) => old::KubeError::Invalid(m),
        cur::KubeError::Retryable(r) => old::KubeError::Retryable(old::RetryAfter {
            delay_ms: r.delay_ms,
            message: r.message,
        }),
        cur::KubeError::Other(m) => old::KubeError::Other(m),
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs: 0.1 -> current

pub(super) fn policy_info(info: old::PolicyInfo) -> cur::PolicyInfo {
    cur::PolicyInfo {
        name: info.name,
        version: info.version,
        contract_version: info.contract_version,
    }
}

pub(super) fn reconcile_result(
    result: Result<old::ReconcileOutput, old::KubeError>,
) -> Result<cur::ReconcileOutput, cur::KubeError> {
    result
        .map(|out| cur::ReconcileOutput {
            status: status_from_0_1(out.status),
            requeue_after_seconds: out.requeue_after_seconds,
            claim: out.claim,
            events: out.events.into_iter().map(event).collect(),
        })
        .map_err(kube_error_from_0_1)
}

pub(super) fn cleanup_result(
    result: Result<old::CleanupOutput, old::KubeError>,
) -> Result<cur::CleanupOutput, cur::KubeError> {
    result
        .map(|out| cur::CleanupOutput {
            done: out.done,
            status: status_from_0_1(out.status),
        })
        .map_err(kube_error_from_0_1)
}

pub(super) fn pool_result(
    result: Result<old::PoolOutput, old::KubeError>,
) -> Result<cur::PoolOutput, cur::KubeError> {
    result
        .map(|out| cur::PoolOutput {
            create: out
                .create
                .into_iter()
                .map(|m| cur::MemberCreate {
                    name: m.name,
                    manifest: m.manifest,
                })
                .collect(),
            delete: out.delete,
            status: cur::WarmPoolStatus {
                replicas: out.status.members,
                ready_replicas: out.status.ready,
                observed_generation: out.status.observed_generation,
                conditions: out
                    .status
                    .conditions
                    .into_iter()
                    .map(condition_from_0_1)
                    .collect(),
            },
            events: out.events.into_iter().map(event).collect(),
        })
        .map_err(kube_error_from_0_1)
}

/// 0.1's decisions as idle pauses. A decision naming a candidate of the page that the module
/// was not handed (one that is not to run) is dropped: the host checks decisions against the
/// whole page, and would otherwise mark a sandbox the module never saw.
pub(super) fn reap_decisions(
    decisions: Vec<old::ReapDecision>,
    namespace: &str,
    page: &[cur::ReapCandidate],
) -> Vec<cur::ReapDecision> {
    decisions
        .into_iter()
        .filter(|d| {
            let unseen =
                d.namespace == namespace && page.iter().any(|c| !c.running && c.name == d.name);
            if unseen {
                tracing::warn!(
                    namespace = %d.namespace,
                    name = %d.name,
                    "a 0.1 reaper decision about a sandbox it was not handed, dropped"
                );
            }
            !unseen
        })
        .map(|d| cur::ReapDecision {
            namespace: d.namespace,
            name: d.name,
            idle_seconds: d.idle_seconds,
            reason: d.reason,
            action: cur::ReapAction::IdlePause,
        })
        .collect()
}

fn status_from_0_1(status: old::SandboxStatus) -> cur::SandboxStatus {
    cur::SandboxStatus {
        phase: match status.phase {
            old::SandboxPhase::Pending => cur::SandboxPhase::Pending,
            old::SandboxPhase::Running => cur::SandboxPhase::Running,
            old::SandboxPhase::Paused => cur::SandboxPhase::Paused,
            old::SandboxPhase::Terminating => cur::SandboxPhase::Terminating,
            old::SandboxPhase::Failed => cur::SandboxPhase::Failed,
        },
        pod_ip: status.pod_ip,
        rootfs_pvc: status.rootfs_pvc,
        workspace_pvc: status.workspace_pvc,
        observed_generation: status.observed_generation,
        conditions: status
            .conditions
            .into_iter()
            .map(condition_from_0_1)
            .collect(),
        started_at: status.started_at,
        idle_paused_at: status.idle_paused_at,
        claimed_member: status.claimed_member,
        service_fqdn: None,
        shutdown_in: None,
    }
}

fn condition_from_0_1(condition: old::Condition) -> cur::Condition {
    cur::Condition {
        kind: condition.kind,
        status: match condition.status {
            old::ConditionStatus::True => cur::ConditionStatus::True,
            old::ConditionStatus::False => cur::ConditionStatus::False,
            old::ConditionStatus::Unknown => cur::ConditionStatus::Unknown,
        },
        reason: condition.reason,
        message: condition.message,
        last_transition_time: condition.last_transition_time,
    }
}

fn event(event: old::Event) -> cur::Event {
    cur::Event {
        kind: match event.kind {
            old::EventType::Normal => cur::EventType::Normal,
            old::EventType::Warning => cur::EventType::Warning,
        },
        reason: event.reason,
        message: event.message,
    }
}

fn kube_error_from_0_1(error: old::KubeError) -> cur::KubeError {
    match error {
        old::KubeError::NotFound(m) => cur::KubeError::NotFound(m),
        old::KubeError::Conflict(m) => cur::KubeError::Conflict(m),
        old::KubeError::Refused(m) => cur::KubeError::Refused(m),
        old::KubeError::Invalid(m) => cur::KubeError::Invalid(m),
        old::KubeError::Retryable(r) => cur::KubeError::Retryable(cur::RetryAfter {
            delay_ms: r.delay_ms,
            message: r.message,
        }),
        old::KubeError::Other(m) => cur::KubeError::Other(m),
    }
}

// ---------------------------------------------------------------------------------------------
// The import: each 0.1 call is the current one of the same name (the same budget, boundary,
// containment, timeout and records), its error converted.

fn answer<T>(result: wasmtime::Result<Result<T, cur::KubeError>>) -> Answer<T> {
    result.map(|r| r.map_err(kube_error_to_0_1))
}

impl old::cubepod::controller::types::Host for HostState {}

impl old::cubepod::controller::kube_client::Host for HostState {
    fn ensure_pvc(&mut self, namespace: String, name: String, manifest: String) -> Answer<()> {
        answer(Current::ensure_pvc(self, namespace, name, manifest))
    }

    fn delete_pvc(&mut self, namespace: String, name: String) -> Answer<()> {
        answer(Current::delete_pvc(self, namespace, name))
    }

    fn ensure_pod(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<Option<String>> {
        answer(Current::ensure_pod(self, namespace, name, manifest))
    }

    fn delete_pod(&mut self, namespace: String, name: String) -> Answer<()> {
        answer(Current::delete_pod(self, namespace, name))
    }

    fn ensure_secret(&mut self, namespace: String, name: String, manifest: String) -> Answer<()> {
        answer(Current::ensure_secret(self, namespace, name, manifest))
    }

    fn delete_secret(&mut self, namespace: String, name: String) -> Answer<()> {
        answer(Current::delete_secret(self, namespace, name))
    }
}
