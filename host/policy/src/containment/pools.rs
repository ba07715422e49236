//! What the reconcile core admits of a policy's output about pools, claims and the reaper:
//! pool members that are the pool's own (rule `pool`), claims only of offered candidates and a
//! status naming only the adopted member (rule `claim`), and reaper decisions only about
//! handed sandboxes that are due (rule `reap`). Each is an allowlist: a member manifest may
//! carry only the fields a member needs, and a field the host does not know is refused.

use std::collections::HashMap;

use serde_json::Value;

use super::{Refusal, Rule, shown};
use crate::model::children::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::model::names::TEMPLATE_HASH_LABEL;
use crate::model::sandbox::{self, POOL_LABEL};
use crate::runtime::bindings::{ReapAction, ReapCandidate, ReapDecision, ShutdownPolicy, WarmPool};

/// A claim only of a member the input offered: a ready, unclaimed member of the sandbox's pool.
pub(crate) fn claim(what: &str, member: &str, offered: &[String]) -> Result<(), Refusal> {
    if offered.iter().any(|o| o == member) {
        return Ok(());
    }
    Err(Refusal::new(
        Rule::Claim,
        what,
        "claim",
        format!(
            "{:?} is not among the pool candidates the policy was handed",
            shown(member)
        ),
    ))
}

/// A status names as the Sandbox's member only the one the controller adopted for it (`bound`)
/// or the one it claims in the same output: the name is what the claim's view of its member,
/// its Pod and volumes are read from, so a policy may not point it at another Sandbox.
pub(crate) fn claimed_member(
    what: &str,
    written: Option<&str>,
    bound: Option<&str>,
    claimed: Option<&str>,
) -> Result<(), Refusal> {
    let Some(written) = written else {
        return Ok(());
    };
    if Some(written) == bound || Some(written) == claimed {
        return Ok(());
    }
    Err(Refusal::new(
        Rule::Claim,
        what,
        "status.claimedMember",
        format!(
            "{:?} is not the member the controller adopted for this sandbox ({})",
            shown(written),
            bound.map_or("none".to_string(), |b| format!("{b:?}"))
        ),
    ))
}

/// How many members a pool call may create: up to its wanted size, less its active members.
pub fn member_room(pool: &WarmPool, active_members: usize, max_replicas: u32) -> usize {
    let wanted = pool.spec.replicas.min(max_replicas) as usize;
    wanted.saturating_sub(active_members)
}

/// The metadata fields a member may set: anything else (annotations the runtime reads,
/// finalizers, generateName, ...) is not the pool's to give.
const MEMBER_METADATA: &[&str] = &["name", "namespace", "labels", "ownerReferences"];
/// The spec fields of a Sandbox (the CRD's): what a template can say.
const SANDBOX_SPEC: &[&str] = &[
    "image",
    "desiredState",
    "rootfsGeneration",
    "forkFrom",
    "idleTimeoutSeconds",
    "resources",
    "storage",
    "runtimeClassName",
    "warmPool",
    "network",
    "service",
    "shutdownTime",
    "shutdownPolicy",
];

/// A member manifest a pool call asks to create: a Sandbox of the pool's namespace under the
/// given name, labelled as the pool's and managed, owned by the pool alone, whose spec is the
/// pool's template. Returns the object to create.
pub fn member(
    pool: &WarmPool,
    index: usize,
    name: &str,
    manifest: &str,
    max_manifest_bytes: usize,
) -> Result<Value, Refusal> {
    let at = |field: &str| format!("create[{index}]{field}");
    let what = &format!("PodWarmPool {}/{}", pool.namespace, pool.name);
    let refuse = |field: &str, why: String| Refusal::new(Rule::Pool, what, at(field), why);
    if manifest.len() > max_manifest_bytes {
        return Err(Refusal::new(
            Rule::Budget,
            what,
            at(""),
            format!(
                "a member manifest of {} bytes, more than {}",
                manifest.len(),
                max_manifest_bytes
            ),
        ));
    }
    let object: Value = serde_json::from_str(manifest)
        .map_err(|e| refuse("", format!("the manifest is not JSON: {e}")))?;
    let Some(fields) = object.as_object() else {
        return Err(refuse("", "the manifest is not a JSON object".to_string()));
    };
    only(
        fields,
        &["apiVersion", "kind", "metadata", "spec"],
        "",
        &refuse,
    )?;
    if object["kind"] != "Sandbox" || object["apiVersion"] != "cubepod.io/v1alpha1" {
        return Err(refuse(
            ".kind",
            "a member is a cubepod.io/v1alpha1 Sandbox".into(),
        ));
    }
    let meta = object
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| refuse(".metadata", "missing".into()))?;
    only(meta, MEMBER_METADATA, ".metadata", &refuse)?;
    if meta.get("name").and_then(Value::as_str) != Some(name) {
        return Err(refuse(
            ".metadata.name",
            format!("differs from the member's name {:?}", shown(name)),
        ));
    }
    if meta.get("namespace").and_then(Value::as_str) != Some(pool.namespace.as_str()) {
        return Err(refuse(
            ".metadata.namespace",
            format!(
                "a member lives in the pool's namespace {:?}",
                pool.namespace
            ),
        ));
    }
    let labels = meta.get("labels").and_then(Value::as_object);
    let expected_labels = [
        (POOL_LABEL, pool.name.as_str()),
        (MANAGED_BY_LABEL, MANAGED_BY),
    ];
    // The template hash is the policy's own digest, so the host cannot check its value; only
    // that it is a label value, and the one label a member may add.
    let hash = labels.and_then(|labels| labels.get(TEMPLATE_HASH_LABEL));
    let hash_ok = hash.is_none_or(|h| h.as_str().is_some_and(is_label_value));
    let labels_ok = hash_ok
        && labels.is_some_and(|labels| {
            labels.len() == expected_labels.len() + usize::from(hash.is_some())
                && expected_labels
                    .iter()
                    .all(|(k, v)| labels.get(*k).and_then(Value::as_str) == Some(v))
        });
    if !labels_ok {
        return Err(refuse(
            ".metadata.labels",
            format!(
                "a member carries exactly {POOL_LABEL}: {} and {MANAGED_BY_LABEL}: {MANAGED_BY}, \
                 and optionally {TEMPLATE_HASH_LABEL} with a label value",
                pool.name
            ),
        ));
    }
    let owners = meta.get("ownerReferences").and_then(Value::as_array);
    let owned_by_pool = owners.is_some_and(|owners| {
        owners.len() == 1
            && owners[0]["apiVersion"] == "cubepod.io/v1alpha1"
            && owners[0]["kind"] == "PodWarmPool"
            && owners[0]["name"] == pool.name.as_str()
            && owners[0]["uid"] == pool.uid.as_str()
            && owners[0]["controller"] == true
    });
    if !owned_by_pool {
        return Err(refuse(
            ".metadata.ownerReferences",
            "a member has one ownerReference: the controller reference to its pool".into(),
        ));
    }
    let spec = object
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| refuse(".spec", "missing".into()))?;
    only(spec, SANDBOX_SPEC, ".spec", &refuse)?;
    let read = sandbox::from_json(&object).map_err(|e| refuse(".spec", shown(&e.to_string())))?;
    let mut spec = read.sandbox.spec;
    let template = &pool.spec.template;
    // A member may leave out the template's forkFrom (the default policy does); never name
    // another source, nor a pool to claim from.
    if spec.fork_from.is_some() && spec.fork_from != template.fork_from {
        return Err(refuse(
            ".spec.forkFrom",
            "a member forks only from its template's forkFrom".into(),
        ));
    }
    spec.fork_from.clone_from(&template.fork_from);
    if spec.warm_pool.is_some() {
        return Err(refuse(
            ".spec.warmPool",
            "a member claims from no pool".into(),
        ));
    }
    spec.warm_pool.clone_from(&template.warm_pool);
    if &spec != template {
        return Err(refuse(".spec", "differs from the pool's template".into()));
    }
    Ok(object)
}

/// A Kubernetes label value: at most 63 characters, alphanumerics with `-`, `_` and `.` inside.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge = |b: Option<&u8>| b.is_none_or(u8::is_ascii_alphanumeric);
    bytes.len() <= crate::model::names::MAX_LABEL_VALUE
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && edge(bytes.first())
        && edge(bytes.last())
}

/// A reaper decision the host may act on: about a sandbox it handed in this call (its
/// candidate record is returned), and for a shutdown, one whose shutdown time has passed at
/// the host's clock and whose `shutdownPolicy` is the action's; an idle pause only of a
/// running sandbox. The policy's word is a request, never the fact it rests on.
pub fn reap<'a>(
    namespace: &str,
    decision: &ReapDecision,
    handed: &'a HashMap<&str, (&ReapCandidate, &str)>,
    now: i64,
) -> Result<&'a (&'a ReapCandidate, &'a str), Refusal> {
    let what = format!("the reaper's decisions for namespace {namespace}");
    let refuse = |field: &str, why: String| Refusal::new(Rule::Reap, &what, field, why);
    let handed = handed
        .get(decision.name.as_str())
        .filter(|_| decision.namespace == namespace)
        .ok_or_else(|| {
            refuse(
                "namespace/name",
                format!(
                    "{}/{} was not among the candidates handed",
                    shown(&decision.namespace),
                    shown(&decision.name)
                ),
            )
        })?;
    let candidate = handed.0;
    let wanted_policy = match decision.action {
        ReapAction::IdlePause if candidate.running => return Ok(handed),
        ReapAction::IdlePause => {
            return Err(refuse(
                "action",
                format!(
                    "idle-pause of {}, which is not running",
                    shown(&decision.name)
                ),
            ));
        }
        ReapAction::ShutdownDelete => ShutdownPolicy::Delete,
        ReapAction::ShutdownPause => ShutdownPolicy::Pause,
    };
    match candidate.shutdown_time {
        Some(at) if at <= now => {}
        Some(at) => {
            return Err(refuse(
                "action",
                format!(
                    "a shutdown of {} before its spec.shutdownTime ({}s from now)",
                    shown(&decision.name),
                    at - now
                ),
            ));
        }
        None => {
            return Err(refuse(
                "action",
                format!(
                    "a shutdown of {}, which has no spec.shutdownTime",
                    shown(&decision.name)
                ),
            ));
        }
    }
    if candidate.shutdown_policy != wanted_policy {
        return Err(refuse(
            "action",
            format!(
                "{} of {}, whose spec.shutdownPolicy is {}",
                match decision.action {
                    ReapAction::ShutdownPause => "shutdown-pause",
                    _ => "shutdown-delete",
                },
                shown(&decision.name),
                match candidate.shutdown_policy {
                    ShutdownPolicy::Delete => "Delete",
                    ShutdownPolicy::Pause => "Pause",
                }
            ),
        ));
    }
    Ok(handed)
}

/// Refuses the first field of `fields` that is not in `allowed`.
fn only(
    fields: &serde_json::Map<String, Value>,
    allowed: &[&str],
    at: &str,
    refuse: &dyn Fn(&str, String) -> Refusal,
) -> Result<(), Refusal> {
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(refuse(
            &format!("{at}.{}", shown(key)),
            "not a field a member may set".to_string(),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::pool as pool_model;

    fn pool(template: Value) -> WarmPool {
        pool_model::from_json(&json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid"},
            "spec": {"replicas": 2, "template": template},
        }))
        .unwrap()
    }

    fn member_manifest(name: &str, spec: Value) -> Value {
        json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {
                "name": name, "namespace": "ns",
                "labels": {POOL_LABEL: "p", MANAGED_BY_LABEL: MANAGED_BY},
                "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                                     "name": "p", "uid": "pool-uid", "controller": true,
                                     "blockOwnerDeletion": true}],
            },
            "spec": spec,
        })
    }

    fn admit(pool: &WarmPool, manifest: &Value) -> Result<Value, Refusal> {
        member(pool, 0, "p-0", &manifest.to_string(), 512 << 10)
    }

    fn candidate(
        name: &str,
        running: bool,
        shutdown: Option<(i64, ShutdownPolicy)>,
    ) -> ReapCandidate {
        ReapCandidate {
            name: name.into(),
            running,
            idle_timeout_seconds: Some(60),
            last_activity: None,
            started_at: Some(0),
            pool: None,
            claimed_by: None,
            claimed_member: None,
            shutdown_time: shutdown.map(|(at, _)| at),
            shutdown_policy: shutdown.map_or(ShutdownPolicy::Delete, |(_, p)| p),
        }
    }

    #[test]
    fn a_reap_decision_is_acted_on_only_as_the_candidate_allows() {
        let candidates = [
            candidate("idle", true, None),
            candidate("paused", false, Some((100, ShutdownPolicy::Delete))),
            candidate("due", true, Some((100, ShutdownPolicy::Pause))),
            candidate("later", true, Some((200, ShutdownPolicy::Delete))),
        ];
        let handed: HashMap<&str, (&ReapCandidate, &str)> = candidates
            .iter()
            .map(|c| (c.name.as_str(), (c, "7")))
            .collect();
        let decide = |ns: &str, name: &str, action| {
            let decision = ReapDecision {
                namespace: ns.into(),
                name: name.into(),
                action,
                idle_seconds: 0,
                reason: String::new(),
            };
            reap("ns", &decision, &handed, 100).map(|(c, _)| c.name.clone())
        };
        use ReapAction::{IdlePause, ShutdownDelete, ShutdownPause};
        assert_eq!(decide("ns", "idle", IdlePause).unwrap(), "idle");
        assert_eq!(decide("ns", "paused", ShutdownDelete).unwrap(), "paused");
        assert_eq!(decide("ns", "due", ShutdownPause).unwrap(), "due");
        // Due at the host's clock: 100 is the shutdown time itself.
        for (ns, name, action, why) in [
            ("other", "idle", IdlePause, "not among the candidates"),
            ("ns", "stranger", ShutdownDelete, "not among the candidates"),
            ("ns", "paused", IdlePause, "not running"),
            ("ns", "idle", ShutdownDelete, "no spec.shutdownTime"),
            ("ns", "later", ShutdownDelete, "100s from now"),
            ("ns", "due", ShutdownDelete, "shutdownPolicy is Pause"),
            ("ns", "paused", ShutdownPause, "shutdownPolicy is Delete"),
        ] {
            let refusal = decide(ns, name, action).unwrap_err();
            assert_eq!(refusal.rule, Rule::Reap);
            assert!(refusal.to_string().contains(why), "{name}: {refusal}");
        }
    }

    #[test]
    fn a_member_may_carry_a_template_hash_that_is_a_label_value() {
        let pool = pool(json!({"image": "img"}));
        let mut manifest = member_manifest("p-0", json!({"image": "img"}));
        manifest["metadata"]["labels"][TEMPLATE_HASH_LABEL] = json!("0123456789abcdef");
        admit(&pool, &manifest).unwrap();
        for bad in [json!("not a label!"), json!("x".repeat(64)), json!(7)] {
            manifest["metadata"]["labels"][TEMPLATE_HASH_LABEL] = bad.clone();
            let refusal = admit(&pool, &manifest).unwrap_err();
            assert_eq!(refusal.field, "create[0].metadata.labels", "{bad}");
        }
    }

    #[test]
    fn a_member_made_from_the_template_is_admitted() {
        let pool = pool(json!({"image": "img", "forkFrom": "golden"}));
        // The template's forkFrom may be carried or left out; nothing else may differ.
        for spec in [
            json!({"image": "img"}),
            json!({"image": "img", "forkFrom": "golden"}),
        ] {
            admit(&pool, &member_manifest("p-0", spec)).unwrap();
        }
    }

    #[test]
    fn a_member_that_is_not_the_pools_own_is_refused_with_the_field() {
        let pool = pool(json!({"image": "img"}));
        let cases = [
            ("/spec/forkFrom", json!("victim"), ".spec.forkFrom"),
            ("/spec/image", json!("other"), ".spec"),
            ("/spec/warmPool", json!("p"), ".spec.warmPool"),
            ("/spec/hostNetwork", json!(true), ".spec.hostNetwork"),
            ("/metadata/finalizers", json!(["x"]), ".metadata.finalizers"),
            (
                "/metadata/annotations",
                json!({"io.katacontainers.config": "x"}),
                ".metadata.annotations",
            ),
            ("/metadata/namespace", json!("other"), ".metadata.namespace"),
            ("/metadata/labels/extra", json!("x"), ".metadata.labels"),
            (
                "/metadata/ownerReferences/0/uid",
                json!("victim-uid"),
                ".metadata.ownerReferences",
            ),
        ];
        for (path, value, field) in cases {
            let mut manifest = member_manifest("p-0", json!({"image": "img"}));
            let (parent, key) = path.rsplit_once('/').unwrap();
            manifest
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .unwrap()
                .insert(key.to_string(), value);
            let refusal = admit(&pool, &manifest).unwrap_err();
            assert_eq!(refusal.rule, Rule::Pool, "{path}");
            assert_eq!(
                refusal.field,
                format!("create[0]{field}"),
                "{path}: {refusal}"
            );
        }
        let mut two_owners = member_manifest("p-0", json!({"image": "img"}));
        let extra = json!({"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"});
        two_owners["metadata"]["ownerReferences"]
            .as_array_mut()
            .unwrap()
            .push(extra);
        assert_eq!(
            admit(&pool, &two_owners).unwrap_err().field,
            "create[0].metadata.ownerReferences"
        );
    }

    #[test]
    fn a_huge_member_manifest_is_past_the_budget_and_not_quoted() {
        let pool = pool(json!({"image": "img"}));
        let huge = member_manifest("p-0", json!({"image": "x".repeat(1 << 20)}));
        let refusal = admit(&pool, &huge).unwrap_err();
        assert_eq!(refusal.rule, Rule::Budget);
        assert!(refusal.to_string().len() < 256, "{refusal}");
    }

    #[test]
    fn a_status_names_only_the_member_the_controller_adopted() {
        let what = "Sandbox ns/c";
        assert!(claimed_member(what, None, Some("m1"), None).is_ok());
        assert!(claimed_member(what, Some("m1"), Some("m1"), None).is_ok());
        assert!(claimed_member(what, Some("m2"), None, Some("m2")).is_ok());
        let refusal = claimed_member(what, Some("victim"), Some("m1"), None).unwrap_err();
        assert_eq!(
            (refusal.rule, refusal.field.as_str()),
            (Rule::Claim, "status.claimedMember")
        );
        assert!(claimed_member(what, Some("victim"), None, None).is_err());
    }

    #[test]
    fn a_claim_is_only_of_an_offered_candidate() {
        let offered = vec!["p-0".to_string()];
        claim("Sandbox ns/a", "p-0", &offered).unwrap();
        let refusal = claim("Sandbox ns/a", &"victim".repeat(10_000), &offered).unwrap_err();
        assert_eq!(refusal.rule, Rule::Claim);
        assert!(refusal.to_string().len() < 512);
    }

    #[test]
    fn the_room_of_a_pool_is_its_wanted_size_less_its_active_members() {
        let pool = pool(json!({"image": "img"}));
        assert_eq!(member_room(&pool, 0, 100), 2);
        assert_eq!(member_room(&pool, 0, 1), 1);
        assert_eq!(member_room(&pool, 5, 100), 0);
    }
}
