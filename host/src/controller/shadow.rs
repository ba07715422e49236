//! A rollout's shadow stage: the candidate runs beside the stable module on a share of the
//! reconciles, on each one's exact input, against a cluster that answers and never writes
//! ([`Discarding`]) and a read-only view of the cache; what it would have done differently
//! (its calls, status, Events, claim, requeue, or a failure) is counted by export and kind and
//! kept as a few short examples. Its calls have a context of their own, so its write rates and
//! traps never touch the stable module's work; its CPU is bounded by the share.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::action::describe_kube_error;
use super::cache::Cache;
use super::events::type_name;
use super::export::Export;
use crate::metrics::Metrics;
use crate::scenario::diff;
use cubepod_kube::{Discarding, Resource};
use cubepod_policy_host::model::pool;
use cubepod_policy_host::model::sandbox::StatusPatch;
use cubepod_policy_host::runtime::bindings::{
    CleanupOutput, Event, KubeError, ObservedChildren, PoolInput, PoolOutput, ReapAction,
    ReapCandidate, ReapDecision, ReconcileInput, ReconcileOutput, Sandbox,
};
use cubepod_policy_host::runtime::{
    CallContext, ChildHeld, ChildLookup, GuestCall, KubeCall, PolicyModule, RuntimeError,
};

/// Every (export, kind) a difference may be of, for the metric's series to show from the
/// start.
pub(crate) const SERIES: [(&str, &[&str]); 4] = [
    (
        "reconcile-sandbox",
        &[
            "calls", "status", "events", "claim", "requeue", "error", "trap",
        ],
    ),
    (
        "cleanup-sandbox",
        &["calls", "done", "status", "error", "trap"],
    ),
    (
        "reconcile-pool",
        &["members", "status", "events", "error", "trap"],
    ),
    ("reap", &["calls", "decisions", "trap"]),
];

/// Examples kept, at most, and the most characters of each.
const EXAMPLES: usize = 5;
const EXAMPLE_CHARS: usize = 240;

/// The shadow's answer to a write it never makes: the object or patch sent, with the metadata
/// the API would add.
fn answered(resource: Resource, mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".into(), json!("shadow"));
        meta.insert("resourceVersion".into(), json!("0"));
    }
    if let Some(fields) = object.as_object_mut() {
        fields.insert("kind".into(), json!(resource.kind()));
    }
    object
}

/// The cache as the delete rule reads it, and nothing of the shadow's writes put into it.
struct ReadOnly(Arc<Cache>);

impl ChildLookup for ReadOnly {
    fn child(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> ChildHeld {
        self.0.child_held(resource, namespace, name, sandbox, uid)
    }
    fn holds(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> bool {
        self.0.holds_child(resource, namespace, name, sandbox, uid)
    }
    fn owned_pvcs(&self, namespace: &str, sandbox: &str, uid: &str) -> Vec<String> {
        self.0.owned_pvcs(namespace, sandbox, uid)
    }
    fn written(&self, _: Resource, _: &serde_json::Value) {}
}

/// What the shadow found so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Findings {
    /// Calls run by both modules.
    pub(crate) compared: u64,
    /// The same by export.
    pub(crate) compared_by_export: BTreeMap<&'static str, u64>,
    /// Calls of the stable module's while the shadow ran, by export, sampled or not: an
    /// export called that the shadow compared too few of was not judged.
    pub(crate) offered_by_export: BTreeMap<&'static str, u64>,
    /// Compared calls with at least one difference.
    pub(crate) differing: u64,
    /// Differences by (export, kind).
    pub(crate) differences: BTreeMap<(&'static str, &'static str), u64>,
    /// The first few, in words: the object, the kind, what differed (no manifest: a Secret's
    /// holds a credential).
    pub(crate) examples: Vec<String>,
}

/// A candidate run in the shadow of the stable module.
pub(crate) struct Shadow {
    pub(crate) module: Arc<PolicyModule>,
    /// Percent of reconciles the candidate runs beside the stable module.
    share: u8,
    /// Calls offered, by export ([`Export::ALL`]'s order): each export is sampled on its own
    /// count, so that a rarely called one (a cleanup, the reaper) has its first call compared.
    seen: [AtomicU64; 4],
    context: CallContext,
    findings: Mutex<Findings>,
    metrics: Arc<Metrics>,
}

impl Shadow {
    /// A shadow of `module` over `share` percent of reconciles, its calls through a recording
    /// cluster and the read-only `cache` (the stable context's boundary).
    pub(crate) fn new(
        module: Arc<PolicyModule>,
        share: u8,
        stable: &CallContext,
        cache: Arc<Cache>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let context = CallContext::new(
            Arc::new(Discarding::answering(answered)),
            stable.boundary.clone(),
            tokio::runtime::Handle::current(),
        )
        .with_children(Arc::new(ReadOnly(cache)));
        Self {
            module,
            share: share.min(100),
            seen: Default::default(),
            context,
            findings: Mutex::default(),
            metrics,
        }
    }

    /// Whether this reconcile is one of the share the candidate runs on.
    pub(crate) fn sampled(&self, export: Export) -> bool {
        let n = self.seen[export as usize].fetch_add(1, Ordering::Relaxed);
        n % 100 < u64::from(self.share)
    }

    pub(crate) fn findings(&self) -> Findings {
        let mut findings = self
            .findings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for export in Export::ALL {
            let offered = self.seen[export as usize].load(Ordering::Relaxed);
            if offered > 0 {
                findings.offered_by_export.insert(export.name(), offered);
            }
        }
        findings
    }

    /// Runs the candidate's `cleanup-sandbox` on the stable module's input and compares what
    /// it did (`calls`, then `stable`'s output or error): its deletes, `done`, its status.
    pub(crate) async fn cleanup_sandbox(
        &self,
        now: i64,
        sandbox: Sandbox,
        observed: ObservedChildren,
        calls: Vec<KubeCall>,
        stable: Result<CleanupOutput, KubeError>,
    ) {
        let object = format!("{}/{}", sandbox.namespace, sandbox.name);
        let candidate = self
            .module
            .cleanup_sandbox_async(&self.context, now, sandbox, observed)
            .await;
        let found = differences(&calls, &stable, &candidate, cleanup_differences);
        self.record("cleanup-sandbox", &object, found);
    }

    /// Runs the candidate's `reap` on the stable module's page of candidates and compares
    /// its decisions (and calls, which the host refuses) with the stable module's.
    pub(crate) async fn reap(
        &self,
        now: i64,
        namespace: String,
        page: Vec<ReapCandidate>,
        calls: Vec<KubeCall>,
        stable: Vec<ReapDecision>,
    ) {
        let object = format!("the reaper's page of {} in {namespace}", page.len());
        let candidate = self
            .module
            .reap_async(&self.context, now, &namespace, &page)
            .await
            .map(|call| call.map(Ok));
        let found = differences(&calls, &Ok(stable), &candidate, reap_differences);
        self.record("reap", &object, found);
    }

    /// Runs the candidate's `reconcile-sandbox` on `input` and compares what it did with what
    /// the stable module did (`calls`, then `stable`: its output, or its error).
    pub(crate) async fn reconcile_sandbox(
        &self,
        object: String,
        input: ReconcileInput,
        calls: Vec<KubeCall>,
        stable: Result<ReconcileOutput, KubeError>,
    ) {
        let candidate = self
            .module
            .reconcile_sandbox_async(&self.context, input)
            .await;
        let found = differences(&calls, &stable, &candidate, sandbox_differences);
        self.record("reconcile-sandbox", &object, found);
    }

    /// Runs the candidate's `reconcile-pool` on `input` and compares its output with the
    /// stable module's (`stable`; a pool's reconcile makes no calls).
    pub(crate) async fn reconcile_pool(
        &self,
        object: String,
        input: PoolInput,
        stable: Result<PoolOutput, KubeError>,
    ) {
        let candidate = self.module.reconcile_pool_async(&self.context, input).await;
        let found = differences(&[], &stable, &candidate, pool_differences);
        self.record("reconcile-pool", &object, found);
    }

    fn record(&self, export: &'static str, object: &str, found: Vec<(&'static str, String)>) {
        let mut findings = self.findings.lock().unwrap_or_else(|p| p.into_inner());
        findings.compared += 1;
        *findings.compared_by_export.entry(export).or_default() += 1;
        findings.differing += u64::from(!found.is_empty());
        for (kind, what) in found {
            *findings.differences.entry((export, kind)).or_default() += 1;
            self.metrics
                .policy_shadow_differences
                .with_label_values(&[export, kind])
                .inc();
            if findings.examples.len() < EXAMPLES {
                let example: String = format!("{export} {object}: {kind}: {what}")
                    .chars()
                    .take(EXAMPLE_CHARS)
                    .collect();
                findings.examples.push(example);
            }
        }
    }
}

/// `op namespace/name`, or `none`.
fn call_words(call: Option<&KubeCall>) -> String {
    call.map_or_else(
        || "none".to_string(),
        |c| format!("{} {}/{}", c.op, c.namespace, c.name),
    )
}

/// Names in words: `a, b`, or `none`.
fn list_words(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// What the candidate did differently from the stable module, by kind: `calls`, then what
/// `outputs` finds between two outputs, `error` (one failed where the other did not), `trap`.
pub(crate) fn differences<T>(
    stable_calls: &[KubeCall],
    stable: &Result<T, KubeError>,
    candidate: &Result<GuestCall<Result<T, KubeError>>, RuntimeError>,
    outputs: fn(&T, &T) -> Vec<(&'static str, String)>,
) -> Vec<(&'static str, String)> {
    let call = match candidate {
        Ok(call) => call,
        Err(error) => return vec![("trap", error.to_string())],
    };
    let mut found = Vec::new();
    if call.calls != stable_calls {
        let at = stable_calls
            .iter()
            .zip(&call.calls)
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| stable_calls.len().min(call.calls.len()));
        found.push((
            "calls",
            format!(
                "call {}: stable {}, candidate {}",
                at + 1,
                call_words(stable_calls.get(at)),
                call_words(call.calls.get(at))
            ),
        ));
    }
    let error = describe_kube_error;
    match (stable, &call.value) {
        (Ok(a), Ok(b)) => found.extend(outputs(a, b)),
        (Ok(_), Err(e)) => found.push((
            "error",
            format!("stable succeeded, candidate returned {}", error(e)),
        )),
        (Err(e), Ok(_)) => found.push((
            "error",
            format!("stable returned {}, candidate succeeded", error(e)),
        )),
        (Err(a), Err(b)) => {
            if a != b {
                found.push((
                    "error",
                    format!("stable returned {}, candidate {}", error(a), error(b)),
                ));
            }
        }
    }
    found
}

/// Each field of two statuses (as the API holds them) that differs: its path and both values,
/// the telling ones first (an example is cut at [`EXAMPLE_CHARS`]), each value cut short.
fn status_differs(stable: &Value, candidate: &Value) -> Option<(&'static str, String)> {
    const VALUE_CHARS: usize = 60;
    let cut = |value: String| {
        if value.chars().count() <= VALUE_CHARS {
            value
        } else {
            let kept: String = value.chars().take(VALUE_CHARS).collect();
            format!("{kept}...")
        }
    };
    let mut fields = diff::fields("status", &stable["status"], &candidate["status"]);
    // What tells the decision apart first: the phase, a condition's status and reason; the
    // times that follow from them last.
    fields.sort_by_key(|(path, _, _)| {
        if path == "status.phase" {
            0
        } else if path.ends_with("].status") {
            1
        } else if path.ends_with("].reason") {
            2
        } else if path.ends_with(".lastTransitionTime") {
            4
        } else {
            3
        }
    });
    (!fields.is_empty()).then(|| {
        let each: Vec<String> = fields
            .into_iter()
            .map(|(path, a, b)| format!("{path}: stable {}, candidate {}", cut(a), cut(b)))
            .collect();
        ("status", each.join("; "))
    })
}

/// Two lists of Events that differ (type, reason or message): the first that differs, in words.
fn events_differ(a: &[Event], b: &[Event]) -> Option<(&'static str, String)> {
    let words = |event: Option<&Event>| {
        event.map_or_else(
            || "none".to_string(),
            |e| format!("{} {}: {}", type_name(e.kind), e.reason, e.message),
        )
    };
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then_some(a.len().min(b.len())))?;
    Some((
        "events",
        format!(
            "event {}: stable {}, candidate {}",
            at + 1,
            words(a.get(at)),
            words(b.get(at))
        ),
    ))
}

/// `reconcile-sandbox`'s outputs compared: `status`, `events`, `claim`, `requeue`.
fn sandbox_differences(a: &ReconcileOutput, b: &ReconcileOutput) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    if a.status != b.status {
        let status = |o: &ReconcileOutput| StatusPatch::new(&o.status, 0).status_value();
        found.extend(status_differs(
            &json!({"status": status(a)}),
            &json!({"status": status(b)}),
        ));
    }
    found.extend(events_differ(&a.events, &b.events));
    if a.claim != b.claim {
        let claim = |c: &Option<String>| c.clone().unwrap_or_else(|| "none".to_string());
        found.push((
            "claim",
            format!(
                "stable claims {}, candidate claims {}",
                claim(&a.claim),
                claim(&b.claim)
            ),
        ));
    }
    if a.requeue_after_seconds != b.requeue_after_seconds {
        let requeue = |r: Option<u32>| r.map_or_else(|| "none".to_string(), |s| format!("{s} s"));
        found.push((
            "requeue",
            format!(
                "stable requeues after {}, candidate after {}",
                requeue(a.requeue_after_seconds),
                requeue(b.requeue_after_seconds)
            ),
        ));
    }
    found
}

/// `cleanup-sandbox`'s outputs compared: `done`, `status`.
fn cleanup_differences(a: &CleanupOutput, b: &CleanupOutput) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    if a.done != b.done {
        let done = |d: bool| if d { "done" } else { "not done" };
        found.push((
            "done",
            format!("stable {}, candidate {}", done(a.done), done(b.done)),
        ));
    }
    if a.status != b.status {
        let status = |o: &CleanupOutput| StatusPatch::new(&o.status, 0).status_value();
        found.extend(status_differs(
            &json!({"status": status(a)}),
            &json!({"status": status(b)}),
        ));
    }
    found
}

/// `reap`'s decisions compared, as sets: each sandbox one module acts on and the other does
/// not, or acts on otherwise.
#[expect(
    clippy::ptr_arg,
    reason = "`differences` compares outputs of one type: reap's is a Vec"
)]
fn reap_differences(a: &Vec<ReapDecision>, b: &Vec<ReapDecision>) -> Vec<(&'static str, String)> {
    let words = |d: &ReapDecision| {
        let action = match d.action {
            ReapAction::IdlePause => "idle-pause",
            ReapAction::ShutdownPause => "shutdown-pause",
            ReapAction::ShutdownDelete => "shutdown-delete",
        };
        format!("{action} {}/{}", d.namespace, d.name)
    };
    let mut stable: Vec<String> = a.iter().map(words).collect();
    let mut candidate: Vec<String> = b.iter().map(words).collect();
    stable.sort();
    candidate.sort();
    if stable == candidate {
        return Vec::new();
    }
    vec![(
        "decisions",
        format!(
            "stable decides {}, candidate decides {}",
            list_words(&stable),
            list_words(&candidate)
        ),
    )]
}

/// `reconcile-pool`'s outputs compared: `members` (created or deleted), `status`, `events`.
fn pool_differences(a: &PoolOutput, b: &PoolOutput) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    let created =
        |o: &PoolOutput| -> Vec<String> { o.create.iter().map(|m| m.name.clone()).collect() };
    if a.create != b.create || a.delete != b.delete {
        found.push((
            "members",
            format!(
                "stable creates {} and deletes {}, candidate creates {} and deletes {}",
                list_words(&created(a)),
                list_words(&a.delete),
                list_words(&created(b)),
                list_words(&b.delete)
            ),
        ));
    }
    if a.status != b.status {
        let status = |o: &PoolOutput| {
            let mut patch = pool::status_patch("", &o.status, 0);
            // Contract 0.1's names of `replicas` and `readyReplicas`: the same values again.
            if let Some(fields) = patch["status"].as_object_mut() {
                fields.remove("members");
                fields.remove("ready");
            }
            patch
        };
        found.extend(status_differs(&status(a), &status(b)));
    }
    found.extend(events_differ(&a.events, &b.events));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_policy_host::runtime::bindings::{EventType, MemberCreate, WarmPoolStatus};

    fn pool_output(members: &[&str], ready: u32) -> PoolOutput {
        PoolOutput {
            create: members
                .iter()
                .map(|name| MemberCreate {
                    name: name.to_string(),
                    manifest: "{}".to_string(),
                })
                .collect(),
            delete: Vec::new(),
            status: WarmPoolStatus {
                replicas: 3,
                ready_replicas: ready,
                observed_generation: 1,
                conditions: Vec::new(),
            },
            events: vec![Event {
                kind: EventType::Normal,
                reason: "Scaled".to_string(),
                message: "to 3".to_string(),
            }],
        }
    }

    fn answered(
        value: PoolOutput,
    ) -> Result<GuestCall<Result<PoolOutput, KubeError>>, RuntimeError> {
        Ok(GuestCall {
            value: Ok(value),
            effects: Vec::new(),
            host_calls: 0,
            calls: Vec::new(),
            deferred: None,
            name_conflicts: Vec::new(),
        })
    }

    fn kinds(found: &[(&'static str, String)]) -> Vec<&'static str> {
        found.iter().map(|(kind, _)| *kind).collect()
    }

    #[test]
    fn a_sandbox_s_differences_name_the_field_and_both_values_in_words() {
        use cubepod_policy_host::runtime::bindings::{SandboxPhase, SandboxStatus};
        let output = |phase, events: Vec<Event>| ReconcileOutput {
            status: SandboxStatus {
                phase,
                pod_ip: None,
                rootfs_pvc: None,
                workspace_pvc: None,
                observed_generation: 1,
                conditions: Vec::new(),
                started_at: None,
                idle_paused_at: None,
                claimed_member: None,
                service_fqdn: None,
                shutdown_in: None,
            },
            events,
            claim: None,
            requeue_after_seconds: Some(30),
        };
        let declined = Event {
            kind: EventType::Warning,
            reason: "ImageNotAllowed".to_string(),
            message: "not on the list".to_string(),
        };
        let stable = output(SandboxPhase::Running, Vec::new());
        let mut candidate = output(SandboxPhase::Failed, vec![declined]);
        candidate.requeue_after_seconds = None;
        let found = sandbox_differences(&stable, &candidate);
        assert_eq!(
            found,
            [
                (
                    "status",
                    "status.phase: stable \"Running\", candidate \"Failed\"".to_string()
                ),
                (
                    "events",
                    "event 1: stable none, candidate Warning ImageNotAllowed: not on the list"
                        .to_string()
                ),
                (
                    "requeue",
                    "stable requeues after 30 s, candidate after none".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_pool_reconcile_compares_its_members_status_and_events() {
        let stable = Ok(pool_output(&["p-1"], 2));
        let same = differences(
            &[],
            &stable,
            &answered(pool_output(&["p-1"], 2)),
            pool_differences,
        );
        assert!(same.is_empty(), "{same:?}");

        let other = answered(pool_output(&["p-1", "p-2"], 1));
        let found = differences(&[], &stable, &other, pool_differences);
        assert_eq!(kinds(&found), ["members", "status"], "{found:?}");
        assert_eq!(
            found[0].1,
            "stable creates p-1 and deletes none, candidate creates p-1, p-2 and deletes none"
        );
        // The fields that differ, by path, with both values.
        assert_eq!(found[1].1, "status.readyReplicas: stable 2, candidate 1");

        let mut quiet = pool_output(&["p-1"], 2);
        quiet.events.clear();
        let found = differences(&[], &stable, &answered(quiet), pool_differences);
        assert_eq!(kinds(&found), ["events"], "{found:?}");

        let failed = Ok(GuestCall {
            value: Err(KubeError::Refused("no".to_string())),
            effects: Vec::new(),
            host_calls: 0,
            calls: Vec::new(),
            deferred: None,
            name_conflicts: Vec::new(),
        });
        let found = differences(&[], &stable, &failed, pool_differences);
        assert_eq!(kinds(&found), ["error"], "{found:?}");
    }
}
