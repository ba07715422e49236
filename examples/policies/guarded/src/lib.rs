//! `cubepod-guarded`: an example policy built on the SDK (`cubepod-policy-sdk`): the default
//! decisions with two changes (see `docs/policy-authoring.md`):
//!
//! 1. every sandbox Pod must run on a Kata node: a required node affinity to nodes labelled
//!    `katacontainers.io/kata-runtime: "true"`, and a toleration of the
//!    `sandbox.cubepod.io/dedicated` NoSchedule taint, so that tainted nodes can be kept for
//!    sandboxes alone;
//! 2. a sandbox that names no cpu or memory gets [`DEFAULT_CPU`] and [`DEFAULT_MEMORY`]
//!    (requests equal limits, as the default policy writes them): a Kata VM sized by the
//!    runtime's defaults, with no limit at all, is what this guards against. A sandbox labelled
//!    [`SIZE_LABEL`]`: large` gets [`LARGE_CPU`] and [`LARGE_MEMORY`] instead: a decision on
//!    the Sandbox's own labels, which the host hands to the policy.
//!
//! Neither change copies the default's reconcile logic. Resources are spec defaults, applied to
//! the input before the default reconcile runs. The Pod manifest is serialized inside that
//! reconcile, so the Pod is changed on its way out instead: [`GuardedClient`] wraps the
//! `kube-client` and edits the manifest of `ensure-pod` before forwarding it.
//!
//! Build: `cargo build -p cubepod-policy-guarded --target wasm32-wasip2 --profile guest-release`
//! (the component is `target/wasm32-wasip2/guest-release/cubepod_policy_guarded.wasm`).
//! Test: `cubepod-controller policy test <that file> examples/policies/guarded/scenarios
//! --allow-pod-field=affinity,tolerations`: the default Pod profile has neither field, so the
//! operator allows them, for `run` as for `policy test`.

use cubepod_policy_sdk::bindings::{PolicyInfo, ReconcileInput, ReconcileOutput, SandboxSpec};
use cubepod_policy_sdk::client::{KubeClient, KubeResult};
use serde_json::{Map, Value, json};

pub const POLICY_NAME: &str = "cubepod-guarded";

/// The node label that Kata's deployment (kata-deploy) puts on the nodes it installed.
pub const KATA_NODE_LABEL: &str = "katacontainers.io/kata-runtime";
/// The taint that keeps everything but sandboxes off dedicated nodes.
pub const DEDICATED_TAINT: &str = "sandbox.cubepod.io/dedicated";
pub const DEFAULT_CPU: &str = "1";
pub const DEFAULT_MEMORY: &str = "2Gi";
/// The Sandbox label that asks for the large defaults (`large`); any other value, or none,
/// gets the usual ones.
pub const SIZE_LABEL: &str = "sandbox.cubepod.io/size";
pub const LARGE_CPU: &str = "4";
pub const LARGE_MEMORY: &str = "8Gi";

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: POLICY_NAME.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        contract_version: cubepod_policy_sdk::CONTRACT_VERSION.to_string(),
    }
}

/// Fills in the resources a sandbox did not name, by its [`SIZE_LABEL`]; what it did name is
/// kept.
pub fn with_default_resources(spec: &mut SandboxSpec, labels: &[(String, String)]) {
    let large = labels.iter().any(|(k, v)| k == SIZE_LABEL && v == "large");
    let (cpu, memory) = if large {
        (LARGE_CPU, LARGE_MEMORY)
    } else {
        (DEFAULT_CPU, DEFAULT_MEMORY)
    };
    spec.cpu.get_or_insert_with(|| cpu.to_string());
    spec.memory.get_or_insert_with(|| memory.to_string());
}

/// `reconcile-sandbox`: the default reconcile, on the defaulted spec, through the guarded client.
pub fn reconcile(
    client: &mut impl KubeClient,
    mut input: ReconcileInput,
) -> KubeResult<ReconcileOutput> {
    with_default_resources(&mut input.sandbox.spec, &input.sandbox.labels);
    cubepod_policy_sdk::reconcile::reconcile(&mut GuardedClient(client), &input)
}

/// A `kube-client` that adds the Kata node affinity and the dedicated-node toleration to every
/// Pod it ensures, and forwards everything else as it is.
pub struct GuardedClient<'a, C>(pub &'a mut C);

impl<C: KubeClient> KubeClient for GuardedClient<'_, C> {
    fn ensure_pvc(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        self.0.ensure_pvc(namespace, name, manifest)
    }
    fn delete_pvc(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        self.0.delete_pvc(namespace, name)
    }
    fn ensure_pod(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<Option<String>> {
        // A manifest that cannot be extended goes out unchanged rather than failing here: it
        // is either not a JSON object, which the host refuses at the boundary with a reason
        // that names the real problem, or a Pod whose spec, affinity or tolerations have a
        // shape the API server refuses as well. Either way no Pod runs unguarded.
        match guard_pod(manifest) {
            Some(guarded) => self.0.ensure_pod(namespace, name, &guarded),
            None => self.0.ensure_pod(namespace, name, manifest),
        }
    }
    fn delete_pod(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        self.0.delete_pod(namespace, name)
    }
    fn ensure_secret(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        self.0.ensure_secret(namespace, name, manifest)
    }
    fn delete_secret(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        self.0.delete_secret(namespace, name)
    }
    fn apply_network_policy(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<()> {
        self.0.apply_network_policy(namespace, name, manifest)
    }
    fn delete_network_policy(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        self.0.delete_network_policy(namespace, name)
    }
    fn apply_service(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        self.0.apply_service(namespace, name, manifest)
    }
    fn delete_service(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        self.0.delete_service(namespace, name)
    }
}

/// The Pod manifest with the Kata node requirement and the toleration added, or `None` when it
/// is not a JSON object whose `spec` can take them. Idempotent.
pub fn guard_pod(manifest: &str) -> Option<String> {
    let mut pod: Value = serde_json::from_str(manifest).ok()?;
    let spec = pod.get_mut("spec")?.as_object_mut()?;
    require_kata_nodes(spec)?;
    tolerate_dedicated_nodes(spec)?;
    serde_json::to_string(&pod).ok()
}

fn kata_requirement() -> Value {
    json!({"key": KATA_NODE_LABEL, "operator": "In", "values": ["true"]})
}

fn dedicated_toleration() -> Value {
    // Exists: whatever value an operator gives the taint, sandboxes tolerate it.
    json!({"key": DEDICATED_TAINT, "operator": "Exists", "effect": "NoSchedule"})
}

/// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`, with the Kata
/// requirement in every node selector term.
fn require_kata_nodes(spec: &mut Map<String, Value>) -> Option<()> {
    let affinity = object_field(spec, "affinity")?;
    let node_affinity = object_field(affinity, "nodeAffinity")?;
    let required = object_field(
        node_affinity,
        "requiredDuringSchedulingIgnoredDuringExecution",
    )?;
    let terms = array_field(required, "nodeSelectorTerms")?;
    let requirement = kata_requirement();
    if terms.is_empty() {
        terms.push(json!({"matchExpressions": [requirement]}));
        return Some(());
    }
    // Terms are ORed and the expressions of a term ANDed: to hold whichever term matches, the
    // requirement joins each of them.
    for term in terms {
        let expressions = array_field(term.as_object_mut()?, "matchExpressions")?;
        if !expressions.contains(&requirement) {
            expressions.push(requirement.clone());
        }
    }
    Some(())
}

fn tolerate_dedicated_nodes(spec: &mut Map<String, Value>) -> Option<()> {
    let tolerations = array_field(spec, "tolerations")?;
    let toleration = dedicated_toleration();
    if !tolerations.contains(&toleration) {
        tolerations.push(toleration);
    }
    Some(())
}

/// The object at `key`, made empty when absent or null (Kubernetes reads null as absent);
/// `None` when it is something else.
fn object_field<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let slot = map.entry(key).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// The array at `key`, as [`object_field`] does for objects.
fn array_field<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Vec<Value>> {
    let slot = map.entry(key).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut()
}

/// The component: `wit/`'s exports, the default logic except for `reconcile-sandbox`.
/// The guarded policy: the default's decisions, but for `reconcile-sandbox`. Cleanup only
/// deletes, and pool members get their defaults when they are reconciled as sandboxes, so
/// both stay the default's.
pub struct Guarded;

impl cubepod_policy_sdk::policy::Policy for Guarded {
    fn describe() -> PolicyInfo {
        describe()
    }

    fn reconcile_sandbox(
        client: &mut impl KubeClient,
        input: ReconcileInput,
    ) -> KubeResult<ReconcileOutput> {
        reconcile(client, input)
    }
}

cubepod_policy_sdk::export_policy!(Guarded);

#[cfg(test)]
mod tests {
    use cubepod_policy_sdk::fixtures::{observe, sandbox};
    use cubepod_policy_sdk::recording::{Call, RecordingClient};

    use super::*;

    fn pod_of(client: &RecordingClient) -> &Value {
        client
            .calls
            .iter()
            .find_map(|call| match call {
                Call::EnsurePod { manifest, .. } => Some(manifest),
                _ => None,
            })
            .expect("an ensure-pod call")
    }

    #[test]
    fn describe_names_this_policy_and_the_contract() {
        let info = describe();
        assert_eq!(info.name, "cubepod-guarded");
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(info.contract_version, cubepod_policy_sdk::CONTRACT_VERSION);
    }

    #[test]
    fn the_size_label_picks_the_defaults_and_never_overrides_the_spec() {
        let label = |v: &str| vec![(SIZE_LABEL.to_string(), v.to_string())];
        let mut spec = sandbox("a").build().spec;
        with_default_resources(&mut spec, &label("large"));
        assert_eq!(
            (spec.cpu.as_deref(), spec.memory.as_deref()),
            (Some("4"), Some("8Gi"))
        );
        let mut spec = sandbox("a").build().spec;
        with_default_resources(&mut spec, &label("huge"));
        assert_eq!(
            (spec.cpu.as_deref(), spec.memory.as_deref()),
            (Some("1"), Some("2Gi"))
        );
        let mut spec = sandbox("a")
            .with_spec(|s| s.cpu = Some("2".into()))
            .build()
            .spec;
        with_default_resources(&mut spec, &label("large"));
        assert_eq!(
            (spec.cpu.as_deref(), spec.memory.as_deref()),
            (Some("2"), Some("8Gi"))
        );
    }

    #[test]
    fn a_new_sandbox_is_the_default_plus_affinity_toleration_and_limits() {
        let mut guarded = RecordingClient::default();
        reconcile(&mut guarded, sandbox("a").input()).unwrap();

        // The default policy, given the defaulted spec, makes the same calls with the same
        // PVCs and Secret; only the Pod differs, by exactly the two additions.
        let mut plain = RecordingClient::default();
        let mut input = sandbox("a").input();
        with_default_resources(&mut input.sandbox.spec, &input.sandbox.labels);
        cubepod_policy_sdk::reconcile::reconcile(&mut plain, &input).unwrap();
        assert_eq!(guarded.summaries(), plain.summaries());
        for (ours, theirs) in guarded.calls.iter().zip(&plain.calls) {
            if !matches!(ours, Call::EnsurePod { .. }) {
                assert_eq!(ours, theirs);
            }
        }
        let mut expected = pod_of(&plain).clone();
        expected["spec"]["affinity"] = json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "katacontainers.io/kata-runtime", "operator": "In", "values": ["true"]}
                ]}
            ]}
        }});
        expected["spec"]["tolerations"] = json!([
            {"key": "sandbox.cubepod.io/dedicated", "operator": "Exists", "effect": "NoSchedule"}
        ]);
        assert_eq!(pod_of(&guarded), &expected);
        let resources = &pod_of(&guarded)["spec"]["containers"][0]["resources"];
        let limits = json!({"cpu": "1", "memory": "2Gi"});
        assert_eq!(resources["limits"], limits);
        assert_eq!(resources["requests"], limits);
    }

    #[test]
    fn resources_the_sandbox_names_are_kept() {
        let mut client = RecordingClient::default();
        let input = sandbox("a")
            .with_spec(|s| {
                s.cpu = Some("500m".into());
                s.memory = Some("8Gi".into());
            })
            .input();
        reconcile(&mut client, input).unwrap();
        let resources = &pod_of(&client)["spec"]["containers"][0]["resources"];
        assert_eq!(resources["limits"], json!({"cpu": "500m", "memory": "8Gi"}));

        // One named, the other defaulted.
        let mut client = RecordingClient::default();
        let input = sandbox("b").with_spec(|s| s.cpu = Some("4".into())).input();
        reconcile(&mut client, input).unwrap();
        let resources = &pod_of(&client)["spec"]["containers"][0]["resources"];
        assert_eq!(resources["limits"], json!({"cpu": "4", "memory": "2Gi"}));
    }

    #[test]
    fn a_converged_sandbox_makes_no_call() {
        let mut client = RecordingClient::default();
        reconcile(&mut client, sandbox("a").input()).unwrap();
        client.calls.clear();
        let mut input = sandbox("a").input();
        input.observed = observe(&client, "a", true);
        reconcile(&mut client, input).unwrap();
        assert_eq!(client.summaries(), Vec::<String>::new());
    }

    #[test]
    fn the_requirement_joins_every_existing_term_once() {
        let pod = json!({"spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
                ]
            }}, "podAntiAffinity": {}},
            "tolerations": [{"key": "other", "operator": "Exists"}]
        }});
        let once = guard_pod(&pod.to_string()).unwrap();
        assert_eq!(guard_pod(&once).as_deref(), Some(once.as_str()));
        let guarded: Value = serde_json::from_str(&once).unwrap();
        let terms = &guarded["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms[0]["matchExpressions"][1], kata_requirement());
        assert_eq!(terms[1]["matchExpressions"], json!([kata_requirement()]));
        assert_eq!(guarded["spec"]["affinity"]["podAntiAffinity"], json!({}));
        assert_eq!(guarded["spec"]["tolerations"][1], dedicated_toleration());
    }

    #[test]
    fn null_fields_read_as_absent() {
        let guarded = guard_pod(r#"{"spec":{"affinity":null,"tolerations":null}}"#).unwrap();
        let guarded: Value = serde_json::from_str(&guarded).unwrap();
        assert_eq!(
            guarded["spec"]["tolerations"],
            json!([dedicated_toleration()])
        );
    }

    #[test]
    fn a_manifest_it_cannot_extend_is_forwarded_unchanged() {
        for manifest in [
            "not json",
            "[]",
            r#"{"kind":"Pod"}"#,
            r#"{"spec":{"tolerations":"x"}}"#,
            r#"{"spec":{"affinity":{"nodeAffinity":[]}}}"#,
        ] {
            assert_eq!(guard_pod(manifest), None, "{manifest}");
            let mut client = RecordingClient::default();
            GuardedClient(&mut client)
                .ensure_pod("ns", "a", manifest)
                .unwrap();
            let forwarded = pod_of(&client);
            let original = serde_json::from_str(manifest)
                .unwrap_or_else(|_| Value::String(manifest.to_string()));
            assert_eq!(forwarded, &original, "{manifest}");
        }
    }
}
