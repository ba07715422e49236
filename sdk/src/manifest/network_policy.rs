//! A sandbox's NetworkPolicy `<s>-network`: default-deny for its Pod in both directions, then
//! exactly what `spec.network` and `spec.service` ask for, as agent-sandbox does. Its spec's
//! digest rides along as the `cubepod.io/spec-hash` annotation, so that a reconcile knows
//! whether to apply it again from the cache alone.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

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
    canonical_hash(spec)
}

/// [`spec_hash`] of any spec that serializes to the same canonical JSON: a `Value`, or the
/// structs below (their fields are declared in key order, their maps are sorted). Streamed
/// into the digest, with no text built.
pub(super) fn canonical_hash<T: Serialize + ?Sized>(spec: &T) -> String {
    let mut hasher = super::Digest::default();
    // Writing into the hasher cannot fail, and these specs (string keys only) always serialize.
    let _ = serde_json::to_writer(&mut hasher, spec);
    hasher.finish()
}

/// The object, with its spec and the spec's digest as an annotation.
pub(super) fn render<S: Serialize>(
    kind: &'static str,
    api_version: &'static str,
    metadata: ObjectMeta<'_>,
    spec: S,
) -> Rendered {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Object<'a, S> {
        api_version: &'static str,
        kind: &'static str,
        metadata: ObjectMeta<'a>,
        spec: S,
    }
    let spec_hash = canonical_hash(&spec);
    let metadata = metadata.annotation(names::SPEC_HASH_ANNOTATION, spec_hash.clone());
    Rendered {
        manifest: super::to_json(&Object {
            api_version,
            kind,
            metadata,
            spec,
        }),
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
    canonical_hash(&policy_spec(owner, spec, cluster))
}

// The spec's parts. Fields are declared in the order of their JSON keys (see `canonical_hash`).

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    egress: Vec<EgressRule<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ingress: Vec<IngressRule<'a>>,
    pod_selector: Selector<'a>,
    policy_types: [&'static str; 2],
}

#[derive(Serialize)]
struct IngressRule<'a> {
    from: Vec<Peer<'a>>,
    ports: Vec<Port>,
}

#[derive(Serialize)]
struct EgressRule<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<Port>,
    to: Vec<Peer<'a>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Peer<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_block: Option<IpBlock<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace_selector: Option<Selector<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod_selector: Option<Selector<'a>>,
}

#[derive(Serialize)]
struct IpBlock<'a> {
    cidr: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    except: Vec<String>,
}

/// `{}` (everything) or `{"matchLabels": {...}}`; a label given twice keeps its last value.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Selector<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    match_labels: Option<BTreeMap<&'a str, &'a str>>,
}

#[derive(Serialize)]
struct Port {
    port: u16,
    protocol: &'static str,
}

fn policy_spec<'a>(
    owner: Owner<'a>,
    spec: &'a SandboxSpec,
    cluster: &'a ClusterNetwork,
) -> PolicySpec<'a> {
    PolicySpec {
        egress: egress(spec, cluster),
        ingress: ingress(spec, cluster),
        pod_selector: Selector {
            match_labels: Some(BTreeMap::from([(names::SANDBOX_LABEL, owner.name)])),
        },
        policy_types: ["Ingress", "Egress"],
    }
}

fn match_labels(labels: &[(String, String)]) -> Selector<'_> {
    Selector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
        ),
    }
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
fn ingress<'a>(spec: &'a SandboxSpec, cluster: &'a ClusterNetwork) -> Vec<IngressRule<'a>> {
    let Some(service) = &spec.service else {
        return Vec::new();
    };
    if service.ports.is_empty() || cluster.ingress_from.is_empty() {
        return Vec::new();
    }
    let ports = service
        .ports
        .iter()
        .map(|p| Port {
            port: p.port,
            protocol: protocol(p.protocol),
        })
        .collect();
    vec![IngressRule {
        from: vec![Peer {
            namespace_selector: Some(Selector::default()),
            pod_selector: Some(match_labels(&cluster.ingress_from)),
            ..Peer::default()
        }],
        ports,
    }]
}

/// Parsed CIDRs of a list, with their text; what does not parse is left out (`validate`
/// refuses such a spec before any manifest is made).
fn parsed(list: &[String]) -> Vec<(Cidr, &str)> {
    list.iter()
        .filter_map(|text| Cidr::parse(text).map(|c| (c, text.as_str())))
        .collect()
}

/// `{ipBlock: {cidr, except}}` without the cuts that apply to it; `None` if they cover it.
fn ip_peer<'a>(text: &'a str, cuts: &[(Cidr, &str)]) -> Option<Peer<'a>> {
    let cidr = Cidr::parse(text)?;
    let except = cidr::excepts(cidr, cuts)?;
    Some(Peer {
        ip_block: Some(IpBlock { cidr: text, except }),
        ..Peer::default()
    })
}

fn egress<'a>(spec: &'a SandboxSpec, cluster: &'a ClusterNetwork) -> Vec<EgressRule<'a>> {
    let network = &spec.network;
    let deny = parsed(&network.deny_cidrs);
    let mut peers: Vec<Peer<'a>> = Vec::new();
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
            peers.push(Peer {
                namespace_selector: Some(Selector::default()),
                ..Peer::default()
            });
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
        rules.push(EgressRule {
            ports: Vec::new(),
            to: peers,
        });
    }
    // Without labels the DNS peer would be every pod of the DNS namespace.
    if !cluster.dns_pod_labels.is_empty() {
        rules.push(EgressRule {
            ports: vec![
                Port {
                    port: 53,
                    protocol: "UDP",
                },
                Port {
                    port: 53,
                    protocol: "TCP",
                },
            ],
            to: vec![Peer {
                namespace_selector: Some(Selector {
                    match_labels: Some(BTreeMap::from([(
                        NAMESPACE_NAME_LABEL,
                        cluster.dns_namespace.as_str(),
                    )])),
                }),
                pod_selector: Some(match_labels(&cluster.dns_pod_labels)),
                ..Peer::default()
            }],
        });
    }
    rules
}
