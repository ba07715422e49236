//! The convergence checker: what the cluster must hold once the controller is quiet, given the
//! workload's ledger, and what the metrics must say. Every check returns the violations it
//! found, as sentences, rather than stopping at the first.

use std::collections::{BTreeMap, BTreeSet};

use cubepod_apiserver::MemoryCluster;
use cubepod_kube::Resource;
use serde_json::Value;

use super::workload::{Ledger, Misbehaviour, Role};
use crate::apiserver::RequestRecord;
use crate::convergence::{NS, metric_sum, samples};

const FINALIZER: &str = "cubepod.io/cleanup";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
const SANDBOX_LABEL: &str = "cubepod.io/sandbox";
const GENERATION_LABEL: &str = "cubepod.io/rootfs-generation";

/// What the cluster holds in the workload namespace, by name.
struct Snapshot {
    sandboxes: BTreeMap<String, Value>,
    /// (kind, name) → object, for PVCs, Pods and Secrets.
    children: BTreeMap<(Resource, String), Value>,
}

impl Snapshot {
    fn take(cluster: &MemoryCluster) -> Self {
        let in_ns = |resource| {
            cluster
                .objects(resource)
                .into_iter()
                .filter(|o| o["metadata"]["namespace"] == NS)
                .filter_map(|o| Some((o["metadata"]["name"].as_str()?.to_string(), o)))
                .collect::<Vec<_>>()
        };
        let sandboxes = in_ns(Resource::Sandbox).into_iter().collect();
        let mut children = BTreeMap::new();
        for resource in CHILD_KINDS {
            for (name, object) in in_ns(resource) {
                children.insert((resource, name), object);
            }
        }
        Self {
            sandboxes,
            children,
        }
    }
}

const CHILD_KINDS: [Resource; 3] = [
    Resource::PersistentVolumeClaim,
    Resource::Pod,
    Resource::Secret,
];

/// The children a live, well-behaved sandbox must have and nothing else: both PVCs of the
/// current generation, the Secret, and the Pod iff it is to run.
pub fn expected_children(name: &str, desired: &str, generation: u32) -> Vec<(Resource, String)> {
    let mut children = vec![
        (
            Resource::PersistentVolumeClaim,
            format!("{name}-rootfs-g{generation}"),
        ),
        (Resource::PersistentVolumeClaim, format!("{name}-workspace")),
        (Resource::Secret, format!("{name}-credentials")),
    ];
    if desired == "Running" {
        children.push((Resource::Pod, name.to_string()));
    }
    children
}

/// Every violation of convergence: missing, extra (orphaned or duplicated) and mislabeled
/// children, sandboxes that should be gone or should be there, untrue statuses, forks that did
/// not clone their source.
pub fn check(cluster: &MemoryCluster, ledger: &Ledger) -> Vec<String> {
    let snapshot = Snapshot::take(cluster);
    let mut violations = Vec::new();
    let mut expected: BTreeMap<(Resource, String), String> = BTreeMap::new();

    for name in snapshot.sandboxes.keys() {
        if !ledger.entries.contains_key(name) {
            violations.push(format!(
                "sandbox {name} exists but the workload never made it"
            ));
        }
    }
    for (name, entry) in &ledger.entries {
        let object = snapshot.sandboxes.get(name);
        if entry.deleted {
            if let Some(object) = object {
                violations.push(format!(
                    "sandbox {name} was deleted but is still there (deletionTimestamp {}, \
                     finalizers {}, phase {})",
                    object["metadata"]["deletionTimestamp"],
                    object["metadata"]["finalizers"],
                    object["status"]["phase"],
                ));
            }
            continue;
        }
        let Some(object) = object else {
            violations.push(format!("sandbox {name} is gone but was never deleted"));
            continue;
        };
        let spec = &object["spec"];
        let desired = spec["desiredState"].as_str().unwrap_or("Running");
        let generation = spec["rootfsGeneration"].as_u64().unwrap_or(1);
        if desired != entry.desired || generation != u64::from(entry.generation) {
            violations.push(format!(
                "sandbox {name}: spec {desired}/g{generation} is not the workload's last write \
                 {}/g{}",
                entry.desired, entry.generation
            ));
        }
        if object["metadata"]["deletionTimestamp"].is_string() {
            violations.push(format!(
                "sandbox {name} is being deleted but was never deleted"
            ));
        }
        if let Role::Faulty(misbehaviour) = entry.role {
            check_faulty(name, misbehaviour, object, &mut violations);
            continue;
        }
        let generation = u32::try_from(generation).unwrap_or(0);
        for child in expected_children(name, desired, generation) {
            expected.insert(child, name.clone());
        }
        check_status(
            name,
            desired,
            generation,
            object,
            &snapshot,
            &mut violations,
        );
        if let Role::Fork { source } = &entry.role {
            check_fork(name, source, &snapshot, &mut violations);
        }
    }

    // Exactly the expected children: none missing, none extra.
    for (key, owner) in &expected {
        if !snapshot.children.contains_key(key) {
            violations.push(format!(
                "sandbox {owner}: {} {} is missing",
                key.0.kind(),
                key.1
            ));
        }
    }
    for (key, child) in &snapshot.children {
        let labelled = child["metadata"]["labels"][SANDBOX_LABEL]
            .as_str()
            .unwrap_or("<none>");
        let Some(owner) = expected.get(key) else {
            let why = match snapshot.sandboxes.get(labelled) {
                None => "orphaned: its sandbox is gone",
                Some(_) => "not expected of its sandbox (duplicated or stale)",
            };
            violations.push(format!(
                "{} {} (sandbox label {labelled}, deletionTimestamp {}): {why}",
                key.0.kind(),
                key.1,
                child["metadata"]["deletionTimestamp"]
            ));
            continue;
        };
        check_child(
            key,
            child,
            owner,
            &snapshot.sandboxes[owner],
            &mut violations,
        );
    }
    violations
}

/// A child's labels, owner, liveness, and for a Pod its volumes, generation and readiness.
fn check_child(
    (resource, name): &(Resource, String),
    child: &Value,
    owner: &str,
    sandbox: &Value,
    violations: &mut Vec<String>,
) {
    let what = format!("{} {name}", resource.kind());
    let labels = &child["metadata"]["labels"];
    if labels[MANAGED_BY_LABEL] != "cubepod-controller" || labels[SANDBOX_LABEL] != owner {
        violations.push(format!(
            "{what}: labels {labels} do not name sandbox {owner}"
        ));
    }
    let uid = &sandbox["metadata"]["uid"];
    let owned = child["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["kind"] == "Sandbox" && r["uid"] == *uid)
        });
    if !owned {
        violations.push(format!(
            "{what}: no ownerReference to sandbox {owner} (uid {uid}): {}",
            child["metadata"]["ownerReferences"]
        ));
    }
    if child["metadata"]["deletionTimestamp"].is_string() {
        violations.push(format!("{what} is being deleted but its sandbox needs it"));
    }
    if *resource == Resource::Pod {
        let generation = sandbox["spec"]["rootfsGeneration"].as_u64().unwrap_or(1);
        if labels[GENERATION_LABEL] != generation.to_string().as_str() {
            violations.push(format!(
                "{what}: runs rootfs generation {} instead of {generation}",
                labels[GENERATION_LABEL]
            ));
        }
        let claims: BTreeSet<&str> = child["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
            .collect();
        let wanted: BTreeSet<String> = [
            format!("{owner}-rootfs-g{generation}"),
            format!("{owner}-workspace"),
        ]
        .into();
        if claims != wanted.iter().map(String::as_str).collect() {
            violations.push(format!("{what}: mounts {claims:?}, not {wanted:?}"));
        }
        if child["status"]["phase"] != "Running" {
            violations.push(format!("{what}: phase {}", child["status"]["phase"]));
        }
    }
}

/// The status tells the truth: the phase asked for, of the current generation, with its
/// volumes, the Pod's IP when running, and conditions to match; the finalizer is on.
fn check_status(
    name: &str,
    desired: &str,
    generation: u32,
    object: &Value,
    snapshot: &Snapshot,
    violations: &mut Vec<String>,
) {
    let status = &object["status"];
    let mut wrong = Vec::new();
    if status["phase"] != desired {
        wrong.push(format!("phase {} (desired {desired})", status["phase"]));
    }
    if status["observedGeneration"] != object["metadata"]["generation"] {
        wrong.push(format!(
            "observedGeneration {} (generation {})",
            status["observedGeneration"], object["metadata"]["generation"]
        ));
    }
    if status["rootfsPVC"] != format!("{name}-rootfs-g{generation}").as_str() {
        wrong.push(format!("rootfsPVC {}", status["rootfsPVC"]));
    }
    if status["workspacePVC"] != format!("{name}-workspace").as_str() {
        wrong.push(format!("workspacePVC {}", status["workspacePVC"]));
    }
    let find = |kind: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
    };
    let running = desired == "Running";
    let pod_ip = snapshot
        .children
        .get(&(Resource::Pod, name.to_string()))
        .map(|pod| pod["status"]["podIP"].clone())
        .unwrap_or(Value::Null);
    if running && (status["podIP"] != pod_ip || !pod_ip.is_string()) {
        wrong.push(format!("podIP {} (the Pod's is {pod_ip})", status["podIP"]));
    }
    if !running && !status["podIP"].is_null() {
        wrong.push(format!("podIP {} while paused", status["podIP"]));
    }
    let want = |truth: bool| if truth { "True" } else { "False" };
    for (kind, truth) in [
        ("Ready", running),
        ("Paused", !running),
        ("SpecValid", true),
    ] {
        let found = find(kind);
        let state = found.map_or("absent", |c| c["status"].as_str().unwrap_or("?"));
        if state != want(truth) {
            // Its reason too: what the controller said is wrong is the first lead.
            let reason = found
                .and_then(|c| c["reason"].as_str())
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            wrong.push(format!("condition {kind} {state}{reason}"));
        }
    }
    let finalized = object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
    if !finalized {
        wrong.push(format!("finalizers {}", object["metadata"]["finalizers"]));
    }
    if !wrong.is_empty() {
        violations.push(format!(
            "sandbox {name} ({desired}, g{generation}): {}",
            wrong.join(", ")
        ));
    }
}

/// A fork's volumes are CSI clones of its source's.
fn check_fork(name: &str, source: &str, snapshot: &Snapshot, violations: &mut Vec<String>) {
    let source_of = |pvc: &str| {
        snapshot
            .children
            .get(&(Resource::PersistentVolumeClaim, pvc.to_string()))
            .map(|p| {
                let data_source = &p["spec"]["dataSource"];
                (data_source["kind"].clone(), data_source["name"].clone())
            })
    };
    if let Some((kind, from)) = source_of(&format!("{name}-workspace"))
        && (kind != "PersistentVolumeClaim" || from != format!("{source}-workspace").as_str())
    {
        violations.push(format!(
            "fork {name}: workspace cloned from {kind} {from}, not {source}-workspace"
        ));
    }
    if let Some((kind, from)) = source_of(&format!("{name}-rootfs-g1")) {
        let from_source = (1..=2).any(|g| from == format!("{source}-rootfs-g{g}").as_str());
        if kind != "PersistentVolumeClaim" || !from_source {
            violations.push(format!(
                "fork {name}: rootfs cloned from {kind} {from}, not a rootfs of {source}"
            ));
        }
    }
}

/// A sandbox the faulty policy fails on: no child, no claim to be running.
fn check_faulty(
    name: &str,
    misbehaviour: Misbehaviour,
    object: &Value,
    violations: &mut Vec<String>,
) {
    if object["status"]["phase"] == "Running" || object["status"]["podIP"].is_string() {
        violations.push(format!(
            "sandbox {name} ({misbehaviour:?}) claims to run: {}",
            object["status"]
        ));
    }
}

/// What the ledger says the gauges must show once quiet.
pub fn expected_gauges(ledger: &Ledger) -> (usize, usize) {
    let alive = ledger
        .entries
        .values()
        .filter(|e| !e.deleted && !matches!(e.role, Role::Faulty(_)));
    let (mut active, mut paused) = (0, 0);
    for entry in alive {
        if entry.desired == "Running" {
            active += 1;
        } else {
            paused += 1;
        }
    }
    (active, paused)
}

/// The metrics of the controller that reconciled last: gauges equal to the cluster's truth,
/// and traps counted under their reasons when the faulty policy ran (none otherwise).
pub fn check_metrics(text: &str, ledger: &Ledger, faulty_policy: bool) -> Vec<String> {
    let mut violations = Vec::new();
    let (active, paused) = expected_gauges(ledger);
    let gauge = |name| metric_sum(text, name, &[]);
    let (shown_active, shown_paused) = (
        gauge("cubepod_active_sandboxes"),
        gauge("cubepod_paused_sandboxes"),
    );
    if shown_active != active as f64 || shown_paused != paused as f64 {
        violations.push(format!(
            "cubepod_active_sandboxes {shown_active} and cubepod_paused_sandboxes {shown_paused}, \
             the cluster has {active} running and {paused} paused"
        ));
    }
    if gauge("cubepod_queue_depth") != 0.0 {
        violations.push(format!(
            "cubepod_queue_depth is {} when quiet",
            gauge("cubepod_queue_depth")
        ));
    }
    let traps = |reason| {
        metric_sum(
            text,
            "cubepod_guest_traps_total",
            &[("export", "reconcile-sandbox"), ("reason", reason)],
        )
    };
    if faulty_policy {
        for misbehaviour in Misbehaviour::ALL {
            // Those still there at the end: the controller that reconciles now (perhaps a
            // replacement of a killed one) has met them.
            let present = ledger
                .entries
                .values()
                .any(|e| e.role == Role::Faulty(misbehaviour) && !e.deleted);
            let reason = misbehaviour.trap_reason();
            if present && traps(reason) < 1.0 {
                violations.push(format!(
                    "{misbehaviour:?} sandboxes ran but cubepod_guest_traps_total{{reason={reason}}} \
                     is {}",
                    traps(reason)
                ));
            }
        }
    } else if metric_sum(text, "cubepod_guest_traps_total", &[]) != 0.0 {
        violations.push(format!(
            "the default policy trapped: cubepod_guest_traps_total {}",
            metric_sum(text, "cubepod_guest_traps_total", &[])
        ));
    }
    if metric_sum(
        text,
        "cubepod_reconciles_total",
        &[("kind", "sandbox"), ("result", "ok")],
    ) < 1.0
    {
        violations.push("no successful sandbox reconcile counted".to_string());
    }
    violations
}

/// The `verb` label of `cubepod_kube_requests_total` a served request counts under; `None`
/// for watches, lists (the start's preflight lists are not counted) and discovery.
fn verb_of(record: &RequestRecord) -> Option<(&'static str, Resource)> {
    let resource = record.resource?;
    if record.watch {
        return None;
    }
    let verb = match record.method.as_str() {
        "POST" => "create",
        "DELETE" => "delete",
        "PATCH" if record.path.ends_with("/status") => "patch_status",
        "PATCH" => "patch",
        "GET" if record.path.ends_with(&format!("/{}", resource.plural())) => return None,
        "GET" => "get",
        _ => return None,
    };
    Some((verb, resource))
}

/// The `result` label a final answer counts under; `None` for answers the client retries
/// (429, 5xx, resets, a 401 before the token is re-read).
fn result_of(status: Option<u16>) -> Option<&'static str> {
    match status? {
        200..=299 => Some("ok"),
        404 => Some("not_found"),
        409 => Some("409"),
        410 => Some("gone"),
        400 | 422 => Some("invalid"),
        403 => Some("forbidden"),
        _ => None,
    }
}

/// For one controller process that saw every answer it asked for (no kill, no client-side
/// timeout): `cubepod_kube_requests_total` counts, per verb and resource, exactly the final
/// answers the API server gave (2xx, 404, 409, 410, 4xx), whatever was retried before them.
pub fn check_request_accounting(text: &str, records: &[RequestRecord]) -> Vec<String> {
    let mut served: BTreeMap<(&str, &str, &str), f64> = BTreeMap::new();
    for record in records {
        let (Some((verb, resource)), Some(result)) = (verb_of(record), result_of(record.status))
        else {
            continue;
        };
        *served.entry((verb, resource.plural(), result)).or_default() += 1.0;
    }
    let mut counted: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    for sample in samples(text) {
        if sample.metric != "cubepod_kube_requests_total" {
            continue;
        }
        let label = |k: &str| sample.labels.get(k).unwrap_or_default().to_string();
        let verb = label("verb");
        if matches!(verb.as_str(), "watch" | "list") {
            continue;
        }
        let result = match label("result").as_str() {
            "conflict" | "already_exists" => "409".to_string(),
            "unavailable" | "unauthorized" | "error" => continue,
            other => other.to_string(),
        };
        let value = match sample.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        *counted
            .entry((verb, label("resource"), result))
            .or_default() += value;
    }
    let mut violations = Vec::new();
    let keys: BTreeSet<(String, String, String)> = served
        .keys()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .chain(counted.keys().cloned())
        .collect();
    for key in keys {
        let s = served
            .get(&(key.0.as_str(), key.1.as_str(), key.2.as_str()))
            .copied()
            .unwrap_or(0.0);
        let c = counted.get(&key).copied().unwrap_or(0.0);
        if s != c {
            violations.push(format!(
                "cubepod_kube_requests_total{{verb={},resource={},result={}}} counts {c}, the \
                 API server answered {s}",
                key.0, key.1, key.2
            ));
        }
    }
    violations
}
