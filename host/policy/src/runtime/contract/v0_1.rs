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
//!
//! 0.1 has no NetworkPolicy, so the host keeps one for each of its sandboxes: before each
//! reconcile it applies the NetworkPolicy the sandbox's spec renders (the SDK's renderer, the
//! default policy's), when the cache does not show that one already, so that the module's Pod
//! is admitted as any other (never without its NetworkPolicy); in cleanup it deletes it once
//! the Pod is gone.

use wasmtime::Store;

use crate::runtime::bindings::cubepod::controller::kube_client::Host as Current;
use crate::runtime::bindings::{self as cur, v0_1 as old};
use crate::runtime::host::HostState;

type Answer<T> = wasmtime::Result<Result<T, old::KubeError>>;

// ---------------------------------------------------------------------------------------------
// The exports: each input converted to 0.1, the export called, its output converted back

type Pre = old::PolicyModulePre<HostState>;

pub(super) async fn reconcile_sandbox(
    pre: &Pre,
    store: &mut Store<HostState>,
    input: cur::ReconcileInput,
) -> wasmtime::Result<Result<cur::ReconcileOutput, cur::KubeError>> {
    // Its contract has no NetworkPolicy: the host applies the one the spec renders first, so
    // that its Pod never runs without one.
    if let Some((name, manifest)) = network_policy(&input)
        && let Err(e) = store
            .data_mut()
            .apply_host_network_policy(&input.sandbox.namespace, &name, &manifest)
            .await
    {
        return Ok(Err(e));
    }
    let input = reconcile_input(&input);
    let out = pre
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_reconcile_sandbox(store, &input)
        .await?;
    Ok(reconcile_result(out))
}

pub(super) async fn cleanup_sandbox(
    pre: &Pre,
    store: &mut Store<HostState>,
    now: i64,
    sandbox: cur::Sandbox,
    observed: cur::ObservedChildren,
) -> wasmtime::Result<Result<cur::CleanupOutput, cur::KubeError>> {
    // The host's NetworkPolicy goes once the Pod is gone, and the cleanup is not done while it
    // is still seen (the module does not know of it).
    if let Some(name) = network_policy_to_delete(&sandbox, &observed)
        && let Err(e) = store
            .data_mut()
            .delete_host_network_policy(&sandbox.namespace, &name)
            .await
    {
        return Ok(Err(e));
    }
    let policy_left = observed.network_policy.is_some();
    let out = pre
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_cleanup_sandbox(
            store,
            now,
            &self::sandbox(&sandbox),
            &self::observed(&observed),
        )
        .await?;
    Ok(cleanup_result(out).map(|mut out| {
        out.done &= !policy_left;
        out
    }))
}

pub(super) async fn reconcile_pool(
    pre: &Pre,
    store: &mut Store<HostState>,
    input: cur::PoolInput,
) -> wasmtime::Result<Result<cur::PoolOutput, cur::KubeError>> {
    let out = pre
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_reconcile_pool(store, &pool_input(&input))
        .await?;
    Ok(pool_result(out))
}

pub(super) async fn reap(
    pre: &Pre,
    store: &mut Store<HostState>,
    now: i64,
    namespace: &str,
    sandboxes: &[cur::ReapCandidate],
) -> wasmtime::Result<Vec<cur::ReapDecision>> {
    let decisions = pre
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_reap(store, now, namespace, &reap_candidates(sandboxes))
        .await?;
    Ok(reap_decisions(decisions, namespace, sandboxes))
}

pub(super) async fn describe(
    pre: &Pre,
    store: &mut Store<HostState>,
) -> wasmtime::Result<cur::PolicyInfo> {
    let info = pre
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_describe(store)
        .await?;
    Ok(policy_info(info))
}

// ---------------------------------------------------------------------------------------------
// Inputs: current -> 0.1

fn reconcile_input(input: &cur::ReconcileInput) -> old::ReconcileInput {
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

fn sandbox(sandbox: &cur::Sandbox) -> old::Sandbox {
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

fn observed(observed: &cur::ObservedChildren) -> old::ObservedChildren {
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

fn pool_input(input: &cur::PoolInput) -> old::PoolInput {
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
fn reap_candidates(candidates: &[cur::ReapCandidate]) -> Vec<old::ReapCandidate> {
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
// The host's NetworkPolicy for a 0.1 module's sandbox

/// The NetworkPolicy the host applies before a 0.1 module's reconcile, as (name, manifest):
/// what the sandbox's spec renders, unless the cache shows that one (by its spec digest).
fn network_policy(input: &cur::ReconcileInput) -> Option<(String, String)> {
    use cubepod_policy_sdk::{bindings as sdk, manifest};
    let sandbox = &input.sandbox;
    let spec = &sandbox.spec;
    let network = sdk::NetworkSpec {
        egress: match spec.network.egress {
            cur::EgressMode::Internet => sdk::EgressMode::Internet,
            cur::EgressMode::None => sdk::EgressMode::None,
            cur::EgressMode::Cluster => sdk::EgressMode::Cluster,
        },
        allow_cidrs: spec.network.allow_cidrs.clone(),
        deny_cidrs: spec.network.deny_cidrs.clone(),
    };
    let service = spec.service.as_ref().map(|service| sdk::ServiceSpec {
        ports: service
            .ports
            .iter()
            .map(|p| sdk::ServicePort {
                name: p.name.clone(),
                port: p.port,
                protocol: match p.protocol {
                    cur::ServiceProtocol::Tcp => sdk::ServiceProtocol::Tcp,
                    cur::ServiceProtocol::Udp => sdk::ServiceProtocol::Udp,
                    cur::ServiceProtocol::Sctp => sdk::ServiceProtocol::Sctp,
                },
            })
            .collect(),
    });
    let net = &input.cluster_network;
    let cluster = sdk::ClusterNetwork {
        cluster_cidrs: net.cluster_cidrs.clone(),
        dns_namespace: net.dns_namespace.clone(),
        dns_pod_labels: net.dns_pod_labels.clone(),
        ingress_from: net.ingress_from.clone(),
        cluster_domain: net.cluster_domain.clone(),
    };
    let owner = manifest::Owner {
        kind: "Sandbox",
        name: &sandbox.name,
        uid: &sandbox.uid,
    };
    let planned = manifest::plan_network_policy_of(owner, &network, service.as_ref(), &cluster);
    let observed = input.observed.network_policy.as_ref();
    if observed.is_some_and(|p| !p.deleting && p.spec_hash.as_deref() == Some(planned.spec_hash()))
    {
        return None;
    }
    let name = crate::model::names::network_policy(&sandbox.name);
    Some((name, planned.render(&sandbox.namespace).manifest))
}

/// The NetworkPolicy the host deletes in a 0.1 module's cleanup: once the Pod is gone.
fn network_policy_to_delete(
    sandbox: &cur::Sandbox,
    observed: &cur::ObservedChildren,
) -> Option<String> {
    let held = observed
        .network_policy
        .as_ref()
        .is_some_and(|p| !p.deleting);
    (observed.pod.is_none() && held).then(|| crate::model::names::network_policy(&sandbox.name))
}

// ---------------------------------------------------------------------------------------------
// Outputs: 0.1 -> current

fn policy_info(info: old::PolicyInfo) -> cur::PolicyInfo {
    cur::PolicyInfo {
        name: info.name,
        version: info.version,
        contract_version: info.contract_version,
    }
}

fn reconcile_result(
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

fn cleanup_result(
    result: Result<old::CleanupOutput, old::KubeError>,
) -> Result<cur::CleanupOutput, cur::KubeError> {
    result
        .map(|out| cur::CleanupOutput {
            done: out.done,
            status: status_from_0_1(out.status),
        })
        .map_err(kube_error_from_0_1)
}

fn pool_result(
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
fn reap_decisions(
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
    async fn ensure_pvc(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<()> {
        answer(Current::ensure_pvc(self, namespace, name, manifest).await)
    }

    async fn delete_pvc(&mut self, namespace: String, name: String) -> Answer<()> {
        answer(Current::delete_pvc(self, namespace, name).await)
    }

    async fn ensure_pod(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<Option<String>> {
        answer(Current::ensure_pod(self, namespace, name, manifest).await)
    }

    async fn delete_pod(&mut self, namespace: String, name: String) -> Answer<()> {
        answer(Current::delete_pod(self, namespace, name).await)
    }

    async fn ensure_secret(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<()> {
        answer(Current::ensure_secret(self, namespace, name, manifest).await)
    }

    async fn delete_secret(&mut self, namespace: String, name: String) -> Answer<()> {
        answer(Current::delete_secret(self, namespace, name).await)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{children, network, pool as pool_model, sandbox as sandbox_model};

    /// A 0.2 Sandbox with every field 0.1 lacks set: labels, annotations, network, service,
    /// shutdown time, and a status with a Service FQDN and a countdown.
    fn full_sandbox(name: &str) -> cur::Sandbox {
        let object = json!({
            "apiVersion": "cubepod.io/v1alpha1",
            "kind": "Sandbox",
            "metadata": {
                "namespace": "ns", "name": name, "uid": format!("uid-{name}"), "generation": 3,
                "labels": {"team": "a", "cubepod.io/pool": "p"},
                "annotations": {"note": "x", "cubepod.io/last-activity": "2027-01-15T08:00:00Z"},
            },
            "spec": {
                "image": "img:1", "desiredState": "Running", "rootfsGeneration": 2,
                "idleTimeoutSeconds": 600,
                "resources": {"cpu": "500m", "memory": "1Gi"},
                "storage": {"storageClassName": "fast", "rootfsSize": "5Gi"},
                "network": {"egress": "None", "allowCIDRs": ["10.0.5.0/24"]},
                "service": {"ports": [{"name": "http", "port": 8080}]},
                "shutdownTime": "2027-02-01T00:00:00Z", "shutdownPolicy": "Pause",
            },
            "status": {
                "phase": "Running", "podIP": "10.1.2.3", "rootfsPVC": "r", "workspacePVC": "w",
                "observedGeneration": 3, "serviceFQDN": "a.ns.svc.cluster.local",
                "shutdownIn": "5h", "startedAt": "2027-01-15T07:00:00Z",
                "conditions": [{"type": "Ready", "status": "True", "reason": "PodReady",
                    "message": "ok", "lastTransitionTime": "2027-01-15T07:00:00Z"}],
            },
        });
        sandbox_model::from_json(&object).unwrap().sandbox
    }

    #[test]
    fn a_reconcile_input_keeps_what_0_1_has_and_drops_the_rest() {
        let sandbox = full_sandbox("a");
        assert!(!sandbox.labels.is_empty() && sandbox.spec.service.is_some());
        let mut observed = children::empty();
        observed.secret = true;
        observed.network_policy = Some(cur::ObservedObject {
            name: "a".to_string(),
            deleting: false,
            spec_hash: None,
        });
        let input = cur::ReconcileInput {
            now: 1_800_000_000,
            sandbox: sandbox.clone(),
            observed,
            fork_source: Some(full_sandbox("src")),
            pool_candidates: vec!["m1".to_string()],
            claimed_member: None,
            fresh_token: "t".to_string(),
            cluster_network: network::default_cluster_network(),
        };
        let old = reconcile_input(&input);
        assert_eq!(old.now, input.now);
        assert_eq!(old.fresh_token, "t");
        assert_eq!(old.pool_candidates, ["m1"]);
        assert_eq!(
            old.fork_source.as_ref().map(|s| s.name.as_str()),
            Some("src")
        );
        assert!(old.observed.secret && old.observed.pvcs.is_empty());
        let s = &old.sandbox;
        assert_eq!(
            (
                s.namespace.as_str(),
                s.name.as_str(),
                s.uid.as_str(),
                s.generation
            ),
            ("ns", "a", "uid-a", 3)
        );
        assert_eq!(s.pool.as_deref(), Some("p"));
        assert_eq!(s.last_activity, sandbox.last_activity);
        assert_eq!(s.spec.image, "img:1");
        assert_eq!(s.spec.desired_state, old::DesiredState::Running);
        assert_eq!(s.spec.rootfs_generation, 2);
        assert_eq!(s.spec.idle_timeout_seconds, Some(600));
        assert_eq!(s.spec.cpu.as_deref(), Some("500m"));
        assert_eq!(s.spec.storage_class.as_deref(), Some("fast"));
        assert_eq!(s.spec.rootfs_size, "5Gi");
        assert_eq!(s.status.phase, old::SandboxPhase::Running);
        assert_eq!(s.status.pod_ip.as_deref(), Some("10.1.2.3"));
        assert_eq!(s.status.started_at, sandbox.status.started_at);
        assert_eq!(s.status.conditions.len(), 1);
        assert_eq!(s.status.conditions[0].status, old::ConditionStatus::True);
        assert_eq!(s.status.conditions[0].reason, "PodReady");
    }

    #[test]
    fn a_0_1_status_comes_back_with_the_new_fields_empty() {
        let status = old::SandboxStatus {
            phase: old::SandboxPhase::Paused,
            pod_ip: None,
            rootfs_pvc: Some("r".to_string()),
            workspace_pvc: Some("w".to_string()),
            observed_generation: 4,
            conditions: vec![old::Condition {
                kind: "Paused".to_string(),
                status: old::ConditionStatus::Unknown,
                reason: "R".to_string(),
                message: "m".to_string(),
                last_transition_time: 7,
            }],
            started_at: Some(5),
            idle_paused_at: Some(6),
            claimed_member: Some("m1".to_string()),
        };
        let output = old::ReconcileOutput {
            status: status.clone(),
            requeue_after_seconds: Some(30),
            claim: Some("m1".to_string()),
            events: vec![old::Event {
                kind: old::EventType::Warning,
                reason: "W".to_string(),
                message: "w".to_string(),
            }],
        };
        let out = reconcile_result(Ok(output)).unwrap();
        assert_eq!(out.requeue_after_seconds, Some(30));
        assert_eq!(out.claim.as_deref(), Some("m1"));
        assert_eq!(out.events[0].kind, cur::EventType::Warning);
        assert_eq!(out.events[0].reason, "W");
        let s = &out.status;
        assert_eq!(s.phase, cur::SandboxPhase::Paused);
        assert_eq!(s.rootfs_pvc.as_deref(), Some("r"));
        assert_eq!(s.observed_generation, 4);
        assert_eq!(
            (s.started_at, s.idle_paused_at, s.claimed_member.as_deref()),
            (Some(5), Some(6), Some("m1"))
        );
        assert_eq!(s.conditions[0].status, cur::ConditionStatus::Unknown);
        assert_eq!(s.conditions[0].last_transition_time, 7);
        assert_eq!(
            (s.service_fqdn.as_ref(), s.shutdown_in.as_ref()),
            (None, None)
        );
        // Round trip: what 0.1 has survives both ways.
        assert_eq!(status_to_0_1(s), status);

        let cleanup = cleanup_result(Ok(old::CleanupOutput { done: true, status })).unwrap();
        assert!(cleanup.done);
        assert_eq!(cleanup.status, out.status);
    }

    #[test]
    fn errors_convert_both_ways_with_their_kind_and_message() {
        let errors = [
            cur::KubeError::NotFound("a".to_string()),
            cur::KubeError::Conflict("b".to_string()),
            cur::KubeError::Refused("c".to_string()),
            cur::KubeError::Invalid("d".to_string()),
            cur::KubeError::Retryable(cur::RetryAfter {
                delay_ms: 1500,
                message: "e".to_string(),
            }),
            cur::KubeError::Other("f".to_string()),
        ];
        for error in errors {
            let old = kube_error_to_0_1(error.clone());
            assert_eq!(format!("{old:?}"), format!("{error:?}"));
            assert_eq!(kube_error_from_0_1(old), error);
        }
        let refused = reconcile_result(Err(old::KubeError::Refused("no".to_string())));
        assert_eq!(refused, Err(cur::KubeError::Refused("no".to_string())));
    }

    #[test]
    fn a_pool_is_handed_in_0_1_names_and_its_status_read_back_in_0_2_names() {
        let object = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"namespace": "ns", "name": "p", "uid": "uid-p", "generation": 2},
            "spec": {"replicas": 3, "updateStrategy": "OnReplenish", "template": {"image": "img:1"}},
            "status": {"replicas": 2, "readyReplicas": 1, "observedGeneration": 2},
        });
        let pool = pool_model::from_json(&object).unwrap();
        let input = cur::PoolInput {
            now: 9,
            pool: pool.clone(),
            members: vec![cur::PoolMember {
                name: "p-1".to_string(),
                ready: true,
                claimed: false,
                deleting: false,
                template_hash: Some("h".to_string()),
            }],
            max_replicas: 10,
        };
        let old = pool_input(&input);
        assert_eq!((old.now, old.max_replicas), (9, 10));
        assert_eq!(old.pool.spec.replicas, 3);
        assert_eq!(old.pool.spec.template.image, "img:1");
        assert_eq!((old.pool.status.ready, old.pool.status.members), (1, 2));
        assert_eq!(old.members[0].name, "p-1");
        assert!(old.members[0].ready && !old.members[0].claimed);

        let out = pool_result(Ok(old::PoolOutput {
            create: vec![old::MemberCreate {
                name: "p-2".to_string(),
                manifest: "{}".to_string(),
            }],
            delete: vec!["p-0".to_string()],
            status: old::WarmPoolStatus {
                ready: 1,
                members: 2,
                observed_generation: 2,
                conditions: Vec::new(),
            },
            events: Vec::new(),
        }))
        .unwrap();
        assert_eq!((out.status.ready_replicas, out.status.replicas), (1, 2));
        assert_eq!(out.status.observed_generation, 2);
        assert_eq!(out.create[0].name, "p-2");
        assert_eq!(out.delete, ["p-0"]);
    }

    fn candidate(name: &str, running: bool) -> cur::ReapCandidate {
        cur::ReapCandidate {
            name: name.to_string(),
            running,
            idle_timeout_seconds: Some(60),
            last_activity: Some(1),
            started_at: Some(2),
            pool: Some("p".to_string()),
            claimed_by: None,
            claimed_member: Some("m".to_string()),
            shutdown_time: (!running).then_some(3),
            shutdown_policy: cur::ShutdownPolicy::Delete,
        }
    }

    #[test]
    fn the_reaper_of_0_1_is_handed_only_sandboxes_that_are_to_run() {
        let page = [
            candidate("a", true),
            candidate("b", false),
            candidate("c", true),
        ];
        let handed = reap_candidates(&page);
        let names: Vec<&str> = handed.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(handed[0].idle_timeout_seconds, Some(60));
        assert_eq!(
            (handed[0].last_activity, handed[0].started_at),
            (Some(1), Some(2))
        );
        assert_eq!(handed[0].pool.as_deref(), Some("p"));
        assert_eq!(handed[0].claimed_member.as_deref(), Some("m"));
    }

    #[test]
    fn decisions_of_0_1_are_idle_pauses_of_what_it_was_handed() {
        let page = [candidate("a", true), candidate("b", false)];
        let decide = |namespace: &str, name: &str| old::ReapDecision {
            namespace: namespace.to_string(),
            name: name.to_string(),
            idle_seconds: 120,
            reason: "idle".to_string(),
        };
        let decisions = reap_decisions(
            vec![decide("ns", "a"), decide("ns", "b"), decide("ns", "z")],
            "ns",
            &page,
        );
        // `b` was not handed: dropped. `z` is not on the page at all: kept, for the host's own
        // check to refuse and count as it does for any policy.
        let names: Vec<&str> = decisions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a", "z"]);
        assert!(
            decisions
                .iter()
                .all(|d| d.action == cur::ReapAction::IdlePause)
        );
        assert_eq!(
            (decisions[0].idle_seconds, decisions[0].reason.as_str()),
            (120, "idle")
        );
    }

    #[test]
    fn describe_keeps_what_the_module_said() {
        let info = policy_info(old::PolicyInfo {
            name: "p".to_string(),
            version: "1".to_string(),
            contract_version: "0.1.0".to_string(),
        });
        assert_eq!((info.name.as_str(), info.version.as_str()), ("p", "1"));
        assert_eq!(info.contract_version, "0.1.0");
    }
}
