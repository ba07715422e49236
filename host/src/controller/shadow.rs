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

use super::cache::Cache;
use crate::metrics::Metrics;
use cubepod_kube::{Discarding, Resource};
use cubepod_policy_host::runtime::bindings::{
    Event, KubeError, PoolInput, PoolOutput, ReconcileInput, ReconcileOutput,
};
use cubepod_policy_host::runtime::{
    CallContext, ChildHeld, ChildLookup, GuestCall, KubeCall, PolicyModule, RuntimeError,
};

/// Every (export, kind) a difference may be of, for the metric's series to show from the
/// start.
pub(crate) const SERIES: [(&str, &[&str]); 2] = [
    (
        "reconcile-sandbox",
        &[
            "calls", "status", "events", "claim", "requeue", "error", "trap",
        ],
    ),
    (
        "reconcile-pool",
        &["members", "status", "events", "error", "trap"],
    ),
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
        self.0.child(resource, namespace, name, sandbox, uid)
    }
    fn holds(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> bool {
        ChildLookup::holds(self.0.as_ref(), resource, namespace, name, sandbox, uid)
    }
    fn owned_pvcs(&self, namespace: &str, sandbox: &str, uid: &str) -> Vec<String> {
        ChildLookup::owned_pvcs(self.0.as_ref(), namespace, sandbox, uid)
    }
    fn written(&self, _: Resource, _: &serde_json::Value) {}
}

/// What the shadow found so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Findings {
    /// Reconciles run by both modules.
    pub(crate) compared: u64,
    /// The same by export.
    pub(crate) compared_by_export: BTreeMap<&'static str, u64>,
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
    seen: AtomicU64,
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
            seen: AtomicU64::new(0),
            context,
            findings: Mutex::default(),
            metrics,
        }
    }

    /// Whether this reconcile is one of the share the candidate runs on.
    pub(crate) fn sampled(&self) -> bool {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        n % 100 < u64::from(self.share)
    }

    pub(crate) fn findings(&self) -> Findings {
        self.findings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
    match (stable, &call.value) {
        (Ok(a), Ok(b)) => found.extend(outputs(a, b)),
        (Ok(_), Err(error)) => found.push(("error", format!("candidate returned {error:?}"))),
        (Err(error), Ok(_)) => found.push(("error", format!("stable returned {error:?}"))),
        (Err(a), Err(b)) => {
            if a != b {
                found.push(("error", format!("stable {a:?}, candidate {b:?}")));
            }
        }
    }
    found
}

/// Two lists of Events that differ (kind, reason or message): both, in words.
fn events_differ(a: &[Event], b: &[Event]) -> Option<(&'static str, String)> {
    let words = |events: &[Event]| -> Vec<String> {
        events
            .iter()
            .map(|e| format!("{:?} {}", e.kind, e.reason))
            .collect()
    };
    let differ = words(a) != words(b) || a.iter().zip(b).any(|(x, y)| x.message != y.message);
    differ.then(|| {
        (
            "events",
            format!("stable {:?}, candidate {:?}", words(a), words(b)),
        )
    })
}

/// `reconcile-sandbox`'s outputs compared: `status`, `events`, `claim`, `requeue`.
fn sandbox_differences(a: &ReconcileOutput, b: &ReconcileOutput) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    if a.status != b.status {
        found.push((
            "status",
            format!(
                "stable phase {:?}, candidate phase {:?}",
                a.status.phase, b.status.phase
            ),
        ));
    }
    found.extend(events_differ(&a.events, &b.events));
    if a.claim != b.claim {
        found.push((
            "claim",
            format!("stable {:?}, candidate {:?}", a.claim, b.claim),
        ));
    }
    if a.requeue_after_seconds != b.requeue_after_seconds {
        found.push((
            "requeue",
            format!(
                "stable {:?} s, candidate {:?} s",
                a.requeue_after_seconds, b.requeue_after_seconds
            ),
        ));
    }
    found
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
                "stable creates {:?} deletes {:?}, candidate creates {:?} deletes {:?}",
                created(a),
                a.delete,
                created(b),
                b.delete
            ),
        ));
    }
    if a.status != b.status {
        found.push((
            "status",
            format!(
                "stable {} ready of {}, candidate {} ready of {}",
                a.status.ready_replicas,
                a.status.replicas,
                b.status.ready_replicas,
                b.status.replicas
            ),
        ));
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
        assert!(found[0].1.contains("\"p-2\""), "{found:?}");

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
