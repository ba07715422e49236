//! `Sandbox` objects (cubepod.io/v1alpha1) as the contract's `sandbox` record.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::meta::Meta;
use super::status::{ConditionJson, condition_from_json, condition_to_json};
use super::{ModelError, time};
use crate::runtime::bindings::{
    DesiredState, EgressMode, NetworkSpec, ReapCandidate, Sandbox, SandboxPhase, SandboxSpec,
    SandboxStatus, ServicePort, ServiceProtocol, ServiceSpec, ShutdownPolicy,
};

/// The finalizer the controller puts on each Sandbox, so that its cleanup runs before it goes.
pub const FINALIZER: &str = "cubepod.io/cleanup";
/// The annotation of a sandbox's last activity (RFC 3339), written by whatever sees its
/// traffic: the router, or a platform's own proxy.
pub const LAST_ACTIVITY: &str = "cubepod.io/last-activity";
pub use super::names::POOL_LABEL;
/// The label of a pool member claimed by a Sandbox: the claiming Sandbox's name.
pub const CLAIMED_BY_LABEL: &str = "cubepod.io/claimed-by";
pub(crate) const DEFAULT_SIZE: &str = "10Gi";
/// What a policy is handed of a Sandbox's labels, and of its annotations: at most this many
/// entries, of at most [`META_BYTES`] of keys and values together, in key order.
pub(crate) const META_ENTRIES: usize = 64;
pub(crate) const META_BYTES: usize = 16 * 1024;
/// kubectl's copy of the whole object: never handed to a policy.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Sandbox as the cache keeps it: the contract's record and what the controller needs to
/// write it back safely.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxObject {
    /// The Sandbox as the contract's record.
    pub sandbox: Sandbox,
    /// `metadata.resourceVersion` as read.
    pub resource_version: String,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// `metadata.creationTimestamp`: where the start-up metrics count from. The host's own,
    /// not the contract's.
    pub created_at: Option<i64>,
    /// `status.firstReadyAt`, the host's mark of the status write that first reported the
    /// sandbox Ready (see `controller::startup`).
    pub first_ready_at: Option<i64>,
    /// The `cubepod.io/pool` label, as anyone who may write the Sandbox set it. The record's
    /// `sandbox.pool` is the pool only when the pool's record names this Sandbox (the cache
    /// decides: `controller::cache`); until then it is this label.
    pub pool_label: Option<String>,
    /// The uid of `metadata.ownerReferences`' controller reference.
    pub controller_uid: Option<String>,
    /// `status.claimedMemberUID`: the uid of the member the controller adopted for this claim.
    pub claimed_member_uid: Option<String>,
}

impl SandboxObject {
    /// Whether the controller's finalizer is on it.
    pub fn has_finalizer(&self) -> bool {
        self.finalizers.iter().any(|f| f == FINALIZER)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecJson {
    #[serde(default)]
    image: String,
    desired_state: Option<String>,
    rootfs_generation: Option<i64>,
    fork_from: Option<String>,
    idle_timeout_seconds: Option<i64>,
    #[serde(default)]
    resources: ResourcesJson,
    #[serde(default)]
    storage: StorageJson,
    runtime_class_name: Option<String>,
    warm_pool: Option<String>,
    #[serde(default)]
    network: NetworkJson,
    service: Option<ServiceJson>,
    shutdown_time: Option<String>,
    shutdown_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkJson {
    egress: Option<String>,
    #[serde(default, rename = "allowCIDRs")]
    allow_cidrs: Vec<String>,
    #[serde(default, rename = "denyCIDRs")]
    deny_cidrs: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ServiceJson {
    #[serde(default)]
    ports: Vec<ServicePortJson>,
}

#[derive(Debug, Default, Deserialize)]
struct ServicePortJson {
    #[serde(default)]
    name: String,
    port: i64,
    protocol: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ResourcesJson {
    cpu: Option<String>,
    memory: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StorageJson {
    storage_class_name: Option<String>,
    rootfs_size: Option<String>,
    workspace_size: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "rootfsPVC")]
    rootfs_pvc: Option<String>,
    #[serde(rename = "workspacePVC")]
    workspace_pvc: Option<String>,
    observed_generation: Option<i64>,
    #[serde(default)]
    conditions: Vec<ConditionJson>,
    started_at: Option<String>,
    idle_paused_at: Option<String>,
    claimed_member: Option<String>,
    /// The host's own, beside the policy's `claimedMember`: the adopted member's uid.
    #[serde(rename = "claimedMemberUID")]
    claimed_member_uid: Option<String>,
    #[serde(rename = "serviceFQDN")]
    service_fqdn: Option<String>,
    shutdown_in: Option<String>,
    /// Written once, by the status that first reports the sandbox ready: a status written
    /// without it leaves it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first_ready_at: Option<String>,
}

/// Reads a Sandbox object; the error names the field the controller cannot act on.
pub fn from_json(object: &Value) -> Result<SandboxObject, ModelError> {
    let meta = Meta::read(object);
    if meta.name.is_empty() {
        return Err(failure(&meta, "metadata.name", "missing".to_string()));
    }
    let spec: SpecJson = match object.get("spec") {
        Some(spec) => {
            SpecJson::deserialize(spec).map_err(|e| failure(&meta, "spec", e.to_string()))?
        }
        None => return Err(failure(&meta, "spec", "missing".to_string())),
    };
    let status: StatusJson = object
        .get("status")
        .and_then(|s| StatusJson::deserialize(s).ok())
        .unwrap_or_default();
    let spec = spec_from_json(spec, &|field, problem| failure(&meta, field, problem))?;
    let first_ready_at = status
        .first_ready_at
        .as_deref()
        .and_then(|t| time::parse(t).ok());
    let claimed_member_uid = status.claimed_member_uid.clone();
    assemble(meta, spec, status_from_json(&status), first_ready_at).map(|mut read| {
        read.claimed_member_uid = claimed_member_uid;
        read
    })
}

/// What a write of the controller's own to the Sandbox `base` (a finalizer, a status) left,
/// read from the write's answer's metadata alone: `base`'s spec, the status as `written`
/// (what the API holds once it is written, and its `firstReadyAt`) or as `base` had it, and
/// the answer's metadata (its version, finalizers, labels and annotations). The write was
/// made over `base`'s version, so nothing else of the object changed, unless the server
/// rewrote the spec on the way (a mutating webhook): a generation other than `base`'s says
/// so, and then there is no answer here; the object must be read whole.
pub fn after_own_write(
    answer: &Value,
    base: &SandboxObject,
    written: Option<(&SandboxStatus, Option<i64>, Option<&str>)>,
) -> Option<SandboxObject> {
    let meta = Meta::read(answer);
    let same = meta.name == base.sandbox.name
        && meta.namespace == base.sandbox.namespace
        && meta.uid == base.sandbox.uid
        && meta.generation == base.sandbox.generation;
    if !same {
        return None;
    }
    let (status, first_ready_at, member_uid) = match written {
        Some((status, first_ready_at, member_uid)) => (
            status.clone(),
            first_ready_at.or(base.first_ready_at),
            member_uid.map(str::to_string),
        ),
        None => (
            base.sandbox.status.clone(),
            base.first_ready_at,
            base.claimed_member_uid.clone(),
        ),
    };
    let mut read = assemble(meta, base.sandbox.spec.clone(), status, first_ready_at).ok()?;
    read.claimed_member_uid = member_uid;
    Some(read)
}

/// A field of the Sandbox `meta` names that the controller cannot act on.
fn failure(meta: &Meta, field: &str, problem: String) -> ModelError {
    ModelError {
        kind: "Sandbox",
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        field: field.to_string(),
        problem,
    }
}

/// The record of a Sandbox whose metadata is `meta`, of this spec and status.
fn assemble(
    meta: Meta,
    spec: SandboxSpec,
    status: SandboxStatus,
    first_ready_at: Option<i64>,
) -> Result<SandboxObject, ModelError> {
    let last_activity =
        match meta.annotations.get(LAST_ACTIVITY) {
            Some(text) => Some(time::parse(text).map_err(|e| {
                failure(&meta, &format!("metadata.annotations[{LAST_ACTIVITY}]"), e)
            })?),
            None => None,
        };
    let (labels, labels_cut) = bounded(&meta.labels, |_| true);
    let (annotations, annotations_cut) = bounded(&meta.annotations, |key| key != LAST_APPLIED);
    let created_at = meta
        .creation_timestamp
        .as_deref()
        .and_then(|t| time::parse(t).ok());
    let controller_uid = meta.controller_uid().map(str::to_string);
    let pool_label = meta.labels.get(POOL_LABEL).cloned();
    Ok(SandboxObject {
        sandbox: Sandbox {
            pool: meta.labels.get(POOL_LABEL).cloned(),
            claimed_by: meta.labels.get(CLAIMED_BY_LABEL).cloned(),
            namespace: meta.namespace,
            name: meta.name,
            uid: meta.uid,
            generation: meta.generation,
            deleting: meta.deletion_timestamp.is_some(),
            last_activity,
            labels,
            annotations,
            meta_truncated: labels_cut || annotations_cut,
            spec,
            status,
        },
        resource_version: meta.resource_version,
        finalizers: meta.finalizers,
        created_at,
        first_ready_at,
        pool_label,
        controller_uid,
        claimed_member_uid: None,
    })
}

/// The entries of `map` a policy is handed, in key order, within [`META_ENTRIES`] and
/// [`META_BYTES`]; and whether any that `keep` accepts were left out.
fn bounded(
    map: &std::collections::BTreeMap<String, String>,
    keep: impl Fn(&str) -> bool,
) -> (Vec<(String, String)>, bool) {
    let mut entries = Vec::new();
    let mut bytes = 0;
    let mut cut = false;
    for (key, value) in map.iter().filter(|(k, _)| keep(k)) {
        let size = key.len() + value.len();
        if entries.len() == META_ENTRIES || bytes + size > META_BYTES {
            cut = true;
            continue;
        }
        bytes += size;
        entries.push((key.clone(), value.clone()));
    }
    (entries, cut)
}

/// `spec` (of a Sandbox, or a pool's template) with the CRD's defaults applied.
pub(super) fn spec_from_json_value(
    value: Option<&Value>,
    fail: &dyn Fn(&str, String) -> ModelError,
) -> Result<SandboxSpec, ModelError> {
    let spec = match value {
        Some(v) => SpecJson::deserialize(v).map_err(|e| fail("", e.to_string()))?,
        None => SpecJson::default(),
    };
    spec_from_json(spec, fail)
}

fn spec_from_json(
    spec: SpecJson,
    fail: &dyn Fn(&str, String) -> ModelError,
) -> Result<SandboxSpec, ModelError> {
    let desired_state = match spec.desired_state.as_deref() {
        None | Some("Running") => DesiredState::Running,
        Some("Paused") => DesiredState::Paused,
        Some(other) => {
            return Err(fail(
                "spec.desiredState",
                format!("{other:?} is neither \"Running\" nor \"Paused\""),
            ));
        }
    };
    let rootfs_generation = match spec.rootfs_generation {
        None => 1,
        Some(g) => u32::try_from(g).map_err(|_| {
            fail(
                "spec.rootfsGeneration",
                format!("{g} is out of range (1 to {})", u32::MAX),
            )
        })?,
    };
    let idle_timeout_seconds = match spec.idle_timeout_seconds {
        None => None,
        Some(t) => Some(u64::try_from(t).map_err(|_| {
            fail(
                "spec.idleTimeoutSeconds",
                format!("{t} is negative; use 0 or leave it out to never reap"),
            )
        })?),
    };
    let network = network_from_json(spec.network, fail)?;
    let service = match spec.service {
        None => None,
        Some(service) => Some(service_from_json(service, fail)?),
    };
    let shutdown_time = match spec.shutdown_time.as_deref() {
        None => None,
        Some(text) => Some(time::parse(text).map_err(|e| fail("spec.shutdownTime", e))?),
    };
    let shutdown_policy = match spec.shutdown_policy.as_deref() {
        None | Some("Delete") => ShutdownPolicy::Delete,
        Some("Pause") => ShutdownPolicy::Pause,
        Some(other) => {
            return Err(fail(
                "spec.shutdownPolicy",
                format!("{other:?} is neither \"Delete\" nor \"Pause\""),
            ));
        }
    };
    Ok(SandboxSpec {
        image: spec.image,
        desired_state,
        rootfs_generation,
        fork_from: spec.fork_from,
        idle_timeout_seconds,
        cpu: spec.resources.cpu,
        memory: spec.resources.memory,
        storage_class: spec.storage.storage_class_name,
        rootfs_size: spec
            .storage
            .rootfs_size
            .unwrap_or_else(|| DEFAULT_SIZE.to_string()),
        workspace_size: spec
            .storage
            .workspace_size
            .unwrap_or_else(|| DEFAULT_SIZE.to_string()),
        runtime_class: spec.runtime_class_name,
        warm_pool: spec.warm_pool,
        network,
        service,
        shutdown_time,
        shutdown_policy,
    })
}

fn network_from_json(
    network: NetworkJson,
    fail: &dyn Fn(&str, String) -> ModelError,
) -> Result<NetworkSpec, ModelError> {
    let egress = match network.egress.as_deref() {
        None | Some("Internet") => EgressMode::Internet,
        Some("None") => EgressMode::None,
        Some("Cluster") => EgressMode::Cluster,
        Some(other) => {
            return Err(fail(
                "spec.network.egress",
                format!("{other:?} is not one of \"Internet\", \"None\", \"Cluster\""),
            ));
        }
    };
    Ok(NetworkSpec {
        egress,
        allow_cidrs: network.allow_cidrs,
        deny_cidrs: network.deny_cidrs,
    })
}

/// `spec.desiredState` as the API spells it.
pub fn desired_state_name(state: DesiredState) -> &'static str {
    match state {
        DesiredState::Running => "Running",
        DesiredState::Paused => "Paused",
    }
}

/// An egress mode as the API writes it: `Internet`, `None`, ...
pub fn egress_name(egress: EgressMode) -> &'static str {
    match egress {
        EgressMode::Internet => "Internet",
        EgressMode::None => "None",
        EgressMode::Cluster => "Cluster",
    }
}

/// A Service port's protocol as the API writes it: `TCP`, `UDP`, `SCTP`.
pub fn protocol_name(protocol: ServiceProtocol) -> &'static str {
    match protocol {
        ServiceProtocol::Tcp => "TCP",
        ServiceProtocol::Udp => "UDP",
        ServiceProtocol::Sctp => "SCTP",
    }
}

fn service_from_json(
    service: ServiceJson,
    fail: &dyn Fn(&str, String) -> ModelError,
) -> Result<ServiceSpec, ModelError> {
    let mut ports = Vec::with_capacity(service.ports.len());
    for (i, port) in service.ports.into_iter().enumerate() {
        let number = u16::try_from(port.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                fail(
                    &format!("spec.service.ports[{i}].port"),
                    format!("{} is out of range (1 to 65535)", port.port),
                )
            })?;
        let protocol = match port.protocol.as_deref() {
            None | Some("TCP") => ServiceProtocol::Tcp,
            Some("UDP") => ServiceProtocol::Udp,
            Some("SCTP") => ServiceProtocol::Sctp,
            Some(other) => {
                return Err(fail(
                    &format!("spec.service.ports[{i}].protocol"),
                    format!("{other:?} is not one of \"TCP\", \"UDP\", \"SCTP\""),
                ));
            }
        };
        ports.push(ServicePort {
            name: port.name,
            port: number,
            protocol,
        });
    }
    Ok(ServiceSpec { ports })
}

fn phase_from_str(phase: Option<&str>) -> SandboxPhase {
    match phase {
        Some("Running") => SandboxPhase::Running,
        Some("Paused") => SandboxPhase::Paused,
        Some("Terminating") => SandboxPhase::Terminating,
        Some("Failed") => SandboxPhase::Failed,
        _ => SandboxPhase::Pending,
    }
}

/// A phase as the API writes it: `Pending`, `Running`, ...
pub fn phase_name(phase: SandboxPhase) -> &'static str {
    match phase {
        SandboxPhase::Pending => "Pending",
        SandboxPhase::Running => "Running",
        SandboxPhase::Paused => "Paused",
        SandboxPhase::Terminating => "Terminating",
        SandboxPhase::Failed => "Failed",
    }
}

fn status_from_json(status: &StatusJson) -> SandboxStatus {
    let parse = |t: &Option<String>| t.as_deref().and_then(|t| time::parse(t).ok());
    SandboxStatus {
        phase: phase_from_str(status.phase.as_deref()),
        pod_ip: status.pod_ip.clone(),
        rootfs_pvc: status.rootfs_pvc.clone(),
        workspace_pvc: status.workspace_pvc.clone(),
        observed_generation: status.observed_generation.unwrap_or(0),
        conditions: status.conditions.iter().map(condition_from_json).collect(),
        started_at: parse(&status.started_at),
        idle_paused_at: parse(&status.idle_paused_at),
        claimed_member: status.claimed_member.clone(),
        service_fqdn: status.service_fqdn.clone(),
        shutdown_in: status.shutdown_in.clone(),
    }
}

/// A Sandbox's whole `status` as the controller writes it, a JSON merge patch's `status`:
/// absent fields are sent as null so that they are removed, and the conditions list is
/// replaced as a whole. Typed, so that its size, how it reads back and its text are had
/// without building a JSON tree; it serializes as the patch, `{"status": ...}`.
#[derive(Debug)]
pub struct StatusPatch(StatusJson);

impl StatusPatch {
    /// The patch that writes `status` as observed at `generation`.
    pub fn new(status: &SandboxStatus, generation: i64) -> Self {
        StatusPatch(StatusJson {
            phase: Some(phase_name(status.phase).to_string()),
            pod_ip: status.pod_ip.clone(),
            rootfs_pvc: status.rootfs_pvc.clone(),
            workspace_pvc: status.workspace_pvc.clone(),
            observed_generation: Some(status.observed_generation),
            conditions: status
                .conditions
                .iter()
                .map(|c| condition_to_json(c, generation))
                .collect(),
            started_at: status.started_at.map(time::format),
            idle_paused_at: status.idle_paused_at.map(time::format),
            claimed_member: status.claimed_member.clone(),
            claimed_member_uid: None,
            service_fqdn: status.service_fqdn.clone(),
            shutdown_in: status.shutdown_in.clone(),
            first_ready_at: None,
        })
    }

    /// Records the uid of the member `claimedMember` names, as the controller adopted it.
    pub fn set_claimed_member_uid(&mut self, uid: Option<String>) {
        self.0.claimed_member_uid = uid;
    }

    /// The member uid this status records.
    pub fn claimed_member_uid(&self) -> Option<&str> {
        self.0.claimed_member_uid.as_deref()
    }

    /// The status as it reads back once written: what the API will hold, which a status the
    /// API renders differently (an empty reason, a time out of range) is compared as.
    pub fn read_back(&self) -> SandboxStatus {
        status_from_json(&self.0)
    }

    /// Marks this status as the one that first reported the sandbox Ready, at `at`
    /// (`status.firstReadyAt`); the mark as it reads back.
    pub fn mark_first_ready(&mut self, at: i64) -> Option<i64> {
        let mark = time::format(at);
        let read = time::parse(&mark).ok();
        self.0.first_ready_at = Some(mark);
        read
    }

    /// The `status` as a JSON value (what `policy test` reports of it).
    pub fn status_value(&self) -> Value {
        serde_json::to_value(&self.0).unwrap_or_default()
    }

    /// The merge patch's text, conditional on `resource_version` (409 Conflict once the object
    /// moved on).
    pub fn text_over(&self, resource_version: &str) -> serde_json::Result<String> {
        #[derive(Serialize)]
        struct Version<'a> {
            #[serde(rename = "resourceVersion")]
            resource_version: &'a str,
        }
        #[derive(Serialize)]
        struct Conditional<'a> {
            metadata: Version<'a>,
            status: &'a StatusJson,
        }
        serde_json::to_string(&Conditional {
            metadata: Version { resource_version },
            status: &self.0,
        })
    }
}

impl Serialize for StatusPatch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("status", &self.0)?;
        map.end()
    }
}

/// What the reaper is handed of `sandbox`, if anything: a sandbox not being deleted that is
/// to run and not already marked idle (it can be paused for idleness), or that has a shutdown
/// time it can still act on: any with `shutdownPolicy: Delete`, one with `Pause` while its
/// `desiredState` is not yet Paused (once it is, the shutdown is done, and handing it every
/// tick would only ask the policy to decide it again).
pub fn reap_candidate(sandbox: &Sandbox) -> Option<ReapCandidate> {
    let spec = &sandbox.spec;
    let running =
        spec.desired_state == DesiredState::Running && sandbox.status.idle_paused_at.is_none();
    let shutdown_left = spec.shutdown_time.is_some()
        && (spec.shutdown_policy == ShutdownPolicy::Delete
            || spec.desired_state == DesiredState::Running);
    let eligible = !sandbox.deleting && (running || shutdown_left);
    eligible.then(|| ReapCandidate {
        name: sandbox.name.clone(),
        running,
        idle_timeout_seconds: sandbox.spec.idle_timeout_seconds,
        last_activity: sandbox.last_activity,
        started_at: sandbox.status.started_at,
        pool: sandbox.pool.clone(),
        claimed_by: sandbox.claimed_by.clone(),
        claimed_member: sandbox.status.claimed_member.clone(),
        shutdown_time: sandbox.spec.shutdown_time,
        shutdown_policy: sandbox.spec.shutdown_policy,
    })
}

/// `status` as it reads back once written: what to compare the cached status with, so that
/// a status the API holds differently is not written again on every pass.
pub fn as_written(status: &SandboxStatus, generation: i64) -> SandboxStatus {
    StatusPatch::new(status, generation).read_back()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(spec: Value) -> Value {
        json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 2,
                          "resourceVersion": "7", "finalizers": [FINALIZER],
                          "annotations": {LAST_ACTIVITY: "2026-01-01T00:00:00Z"}},
            "spec": spec
        })
    }

    #[test]
    fn applies_the_crd_defaults() {
        let read = from_json(&object(json!({"image": "img"}))).unwrap();
        let spec = &read.sandbox.spec;
        assert_eq!(spec.desired_state, DesiredState::Running);
        assert_eq!(spec.rootfs_generation, 1);
        assert_eq!(spec.rootfs_size, "10Gi");
        assert_eq!(read.sandbox.last_activity, Some(1_767_225_600));
        assert!(read.has_finalizer());
        assert_eq!(read.sandbox.status.phase, SandboxPhase::Pending);
    }

    #[test]
    fn names_the_field_it_cannot_read() {
        let error =
            from_json(&object(json!({"image": "i", "desiredState": "Sleeping"}))).unwrap_err();
        assert_eq!(error.field, "spec.desiredState");
        let error = from_json(&object(json!({"image": "i", "rootfsGeneration": -1}))).unwrap_err();
        assert_eq!(error.field, "spec.rootfsGeneration");
        let error = from_json(&object(json!({"image": 5}))).unwrap_err();
        assert_eq!(error.field, "spec");
    }

    #[test]
    fn status_round_trips_through_the_patch() {
        let mut read = from_json(&object(json!({"image": "img"}))).unwrap();
        read.sandbox.status.phase = SandboxPhase::Paused;
        read.sandbox.status.idle_paused_at = Some(1_800_000_000);
        let patch = serde_json::to_value(StatusPatch::new(&read.sandbox.status, 2)).unwrap();
        let mut again = object(json!({"image": "img"}));
        again["status"] = patch["status"].clone();
        assert_eq!(
            from_json(&again).unwrap().sandbox.status,
            read.sandbox.status
        );
        assert_eq!(patch["status"]["podIP"], Value::Null);
    }

    #[test]
    fn the_reaper_is_handed_only_what_it_may_pause() {
        let running = from_json(&object(json!({"image": "i", "idleTimeoutSeconds": 60})))
            .unwrap()
            .sandbox;
        let candidate = reap_candidate(&running).expect("a running sandbox");
        assert_eq!(candidate.idle_timeout_seconds, Some(60));
        assert_eq!(candidate.last_activity, Some(1_767_225_600));
        let mut paused = running.clone();
        paused.spec.desired_state = DesiredState::Paused;
        let mut deleting = running.clone();
        deleting.deleting = true;
        let mut marked = running;
        marked.status.idle_paused_at = Some(1);
        for sandbox in [paused.clone(), deleting, marked.clone()] {
            assert!(reap_candidate(&sandbox).is_none(), "{sandbox:?}");
        }
        // A shutdown time makes a sandbox a candidate while the shutdown is still to do.
        let mut shut = paused;
        shut.spec.shutdown_time = Some(1);
        let candidate = reap_candidate(&shut).expect("paused, to be deleted at its time");
        assert!(!candidate.running);
        shut.spec.shutdown_policy = ShutdownPolicy::Pause;
        assert!(reap_candidate(&shut).is_none(), "paused for good already");
        marked.spec.shutdown_time = Some(1);
        marked.spec.shutdown_policy = ShutdownPolicy::Pause;
        let candidate = reap_candidate(&marked).expect("idle-paused, not yet for good");
        assert!(!candidate.running);
    }

    fn entries(n: usize, value: &str) -> std::collections::BTreeMap<String, String> {
        (0..n)
            .map(|i| (format!("k{i:03}"), value.to_string()))
            .collect()
    }

    #[test]
    fn labels_and_annotations_are_bounded_in_key_order() {
        let (kept, cut) = bounded(&entries(META_ENTRIES, "v"), |_| true);
        assert_eq!((kept.len(), cut), (META_ENTRIES, false));
        let (kept, cut) = bounded(&entries(META_ENTRIES + 1, "v"), |_| true);
        assert_eq!((kept.len(), cut), (META_ENTRIES, true));
        assert_eq!(kept.last().map(|(k, _)| k.as_str()), Some("k063"));
        // The byte bound: 5 entries of 4 KiB each fit 16 KiB only 3 at a time (key bytes too);
        // a smaller entry after a cut one still fits, and is kept.
        let mut big = entries(5, &"x".repeat(4 * 1024));
        big.insert("z".to_string(), "small".to_string());
        let (kept, cut) = bounded(&big, |_| true);
        let keys: Vec<&str> = kept.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["k000", "k001", "k002", "z"]);
        assert!(cut);
        assert!(kept.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() <= META_BYTES);
        // What `keep` leaves out is no truncation.
        let (kept, cut) = bounded(&entries(3, "v"), |k| k != "k001");
        assert_eq!((kept.len(), cut), (2, false));
    }

    #[test]
    fn last_applied_configuration_is_never_handed_and_is_no_truncation() {
        let mut o = object(json!({"image": "i"}));
        o["metadata"]["annotations"][LAST_APPLIED] = json!("x".repeat(META_BYTES * 2));
        o["metadata"]["labels"] = json!({"team": "ml"});
        let read = from_json(&o).unwrap().sandbox;
        assert!(!read.meta_truncated);
        assert!(read.annotations.iter().all(|(k, _)| k != LAST_APPLIED));
        assert_eq!(read.labels, [("team".to_string(), "ml".to_string())]);
    }

    #[test]
    fn as_written_is_what_reads_back() {
        let mut status = from_json(&object(json!({"image": "img"})))
            .unwrap()
            .sandbox
            .status;
        status.started_at = Some(i64::MAX);
        status.conditions.push(crate::runtime::bindings::Condition {
            kind: "Ready".into(),
            status: crate::runtime::bindings::ConditionStatus::False,
            reason: String::new(),
            message: "m".into(),
            last_transition_time: 1,
        });
        let written = as_written(&status, 1);
        assert_ne!(written, status);
        let mut again = object(json!({"image": "img"}));
        again["status"] = StatusPatch::new(&status, 1).status_value();
        assert_eq!(from_json(&again).unwrap().sandbox.status, written);
        assert_eq!(as_written(&written, 1), written);
    }
}
