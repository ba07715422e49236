//! A sandbox's NetworkPolicy `<s>-network`: default-deny for its Pod in both directions, then
//! exactly what `spec.network` and `spec.service` ask for, as agent-sandbox does. Its spec's
//! digest rides along as the `cubepod.io/spec-hash` annotation, so that a reconcile knows
//! whether to apply it again from the cache alone.

use serde_json::{Map, Value, json};

use super::meta::{ObjectMeta, Owner};
use crate::bindings::{ClusterNetwork, EgressMode, SandboxSpec, ServiceProtocol};
use crate::cidr::{self, Cidr};
use crate::names;

pub use crate::names::{BLOCKED_FOR_INTERNET, NAMESPACE_NAME_LABEL};

/// A manifest and the digest of its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub manifest: String,
    pub spec_hash: String,
}

/// The [`digest`](super::digest) of the spec's JSON: the JSON of a `serde_json::Value` is
/// canonical for us (keys in one order, no whitespace), so the same spec gives the same digest.
pub fn spec_hash(spec: &Value) -> String {
    super::digest(&spec.to_string())
}

/// The object, with its spec and the spec's digest as an annotation.
pub(super) fn render(
    kind: &'static str,
    api_version: &'static str,
    metadata: ObjectMeta<'_>,
    spec: Value,
) -> Rendered {
    let spec_hash = spec_hash(&spec);
    let metadata = metadata.annotation(names::SPEC_HASH_ANNOTATION, spec_hash.clone());
    let object = json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": serde_json::to_value(&metadata).unwrap_or(Value::Null),
        "spec": spec,
    });
    Rendered {
        manifest: object.to_string(),
        spec_hash,
    }
}

pub fn network_policy(
    namespace: &str,
    owner: Owner<'_>,
    spec: &SandboxSpec,
    cluster: &ClusterNetwork,
) -> Rendered {
    let name = names::network_policy(owner.name);
    render(
        "NetworkPolicy",
        "networking.k8s.io/v1",
        ObjectMeta::child_of(&name, namespace, owner),
        policy_spec(owner, spec, cluster),
    )
}

/// The `cubepod.io/spec-hash` of [`network_policy`]'s manifest, without rendering the rest of
/// it: what a converged reconcile compares with the cache's.
pub fn network_policy_hash(
    owner: Owner<'_>,
    spec: &SandboxSpec,
    cluster: &ClusterNetwork,
) -> String {
    spec_hash(&policy_spec(owner, spec, cluster))
}

fn policy_spec(owner: Owner<'_>, spec: &SandboxSpec, cluster: &ClusterNetwork) -> Value {
    let mut policy = Map::new();
    policy.insert(
        "podSelector".into(),
        json!({"matchLabels": {names::SANDBOX_LABEL: owner.name}}),
    );
    policy.insert("policyTypes".into(), json!(["Ingress", "Egress"]));
    let ingress = ingress(spec, cluster);
    if !ingress.is_empty() {
        policy.insert("ingress".into(), Value::Array(ingress));
    }
    let egress = egress(spec, cluster);
    if !egress.is_empty() {
        policy.insert("egress".into(), Value::Array(egress));
    }
    Value::Object(policy)
}

fn match_labels(labels: &[(String, String)]) -> Value {
    let map: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({ "matchLabels": map })
}

pub fn protocol(protocol: ServiceProtocol) -> &'static str {
    match protocol {
        ServiceProtocol::Tcp => "TCP",
        ServiceProtocol::Udp => "UDP",
        ServiceProtocol::Sctp => "SCTP",
    }
}

/// From the `--ingress-from` pods of any namespace, to the Service's ports only; nothing
/// without a Service or without `--ingress-from`.
fn ingress(spec: &SandboxSpec, cluster: &ClusterNetwork) -> Vec<Value> {
    let Some(service) = &spec.service else {
        return Vec::new();
    };
    if service.ports.is_empty() || cluster.ingress_from.is_empty() {
        return Vec::new();
    }
    let ports: Vec<Value> = service
        .ports
        .iter()
        .map(|p| json!({"protocol": protocol(p.protocol), "port": p.port}))
        .collect();
    vec![json!({
        "from": [{"namespaceSelector": {}, "podSelector": match_labels(&cluster.ingress_from)}],
        "ports": ports,
    })]
}

/// Parsed CIDRs of a list, with their text; what does not parse is left out (`validate`
/// refuses such a spec before any manifest is made).
fn parsed(list: &[String]) -> Vec<(Cidr, &str)> {
    list.iter()
        .filter_map(|text| Cidr::parse(text).map(|c| (c, text.as_str())))
        .collect()
}

/// `{ipBlock: {cidr, except}}` without the cuts that apply to it; `None` if they cover it.
fn ip_peer(text: &str, cuts: &[(Cidr, &str)]) -> Option<Value> {
    let cidr = Cidr::parse(text)?;
    let except = cidr::excepts(cidr, cuts)?;
    let mut block = json!({ "cidr": text });
    if !except.is_empty() {
        block["except"] = json!(except);
    }
    Some(json!({ "ipBlock": block }))
}

fn egress(spec: &SandboxSpec, cluster: &ClusterNetwork) -> Vec<Value> {
    let network = &spec.network;
    let deny = parsed(&network.deny_cidrs);
    let mut peers: Vec<Value> = Vec::new();
    match network.egress {
        // Nothing at all, not even DNS.
        EgressMode::None => return Vec::new(),
        EgressMode::Internet => {
            let blocked = BLOCKED_FOR_INTERNET
                .iter()
                .filter_map(|text| Cidr::parse(text).map(|c| (c, *text)));
            let cuts: Vec<(Cidr, &str)> = blocked
                .chain(parsed(&cluster.cluster_cidrs))
                .chain(deny.iter().copied())
                .collect();
            peers.extend(
                ["0.0.0.0/0", "::/0"]
                    .iter()
                    .filter_map(|all| ip_peer(all, &cuts)),
            );
        }
        EgressMode::Cluster => {
            peers.push(json!({ "namespaceSelector": {} }));
            peers.extend(
                cluster
                    .cluster_cidrs
                    .iter()
                    .filter_map(|c| ip_peer(c, &deny)),
            );
        }
    }
    peers.extend(network.allow_cidrs.iter().filter_map(|c| ip_peer(c, &deny)));
    let mut rules = Vec::new();
    if !peers.is_empty() {
        rules.push(json!({ "to": peers }));
    }
    // Without labels the DNS peer would be every pod of the DNS namespace.
    if !cluster.dns_pod_labels.is_empty() {
        let dns_namespace = [(
            NAMESPACE_NAME_LABEL.to_string(),
            cluster.dns_namespace.clone(),
        )];
        rules.push(json!({
            "to": [{
                "namespaceSelector": match_labels(&dns_namespace),
                "podSelector": match_labels(&cluster.dns_pod_labels),
            }],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }));
    }
    rules
}
