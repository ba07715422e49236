//! A sandbox's NetworkPolicy `<s>-network`: default-deny for its Pod in both directions, then
//! exactly what `spec.network` and `spec.service` ask for, as agent-sandbox does. Its spec's
//! digest rides along as the `cubepod.io/spec-hash` annotation, so that a reconcile knows
//! whether to apply it again from the cache alone (see [`Planned`]).

use crate::prelude::*;

use alloc::collections::BTreeMap;

use serde::Serialize;

use super::meta::Owner;
use super::planned::{Planned, Rendered};
use crate::bindings::{
    ClusterNetwork, EgressMode, NetworkSpec, SandboxSpec, ServiceProtocol, ServiceSpec,
};
use crate::cidr::{self, Cidr};
use crate::names;

pub use crate::names::{BLOCKED_FOR_INTERNET, NAMESPACE_NAME_LABEL};

/// The NetworkPolicy's spec and digest, built once per reconcile.
pub fn plan_network_policy<'a>(
    owner: Owner<'a>,
    spec: &SandboxSpec,
    cluster: &ClusterNetwork,
) -> Planned<'a> {
    plan_network_policy_of(owner, &spec.network, spec.service.as_ref(), cluster)
}

/// [`plan_network_policy`] from the two parts of the spec it reads: the host renders a 0.1
/// module's sandboxes' NetworkPolicy with it, the one renderer there is.
pub fn plan_network_policy_of<'a>(
    owner: Owner<'a>,
    network: &NetworkSpec,
    service: Option<&ServiceSpec>,
    cluster: &ClusterNetwork,
) -> Planned<'a> {
    Planned::new(
        "NetworkPolicy",
        "networking.k8s.io/v1",
        names::network_policy(owner.name),
        owner,
        &policy_spec(owner, network, service, cluster),
    )
}

pub fn network_policy(
    namespace: &str,
    owner: Owner<'_>,
    spec: &SandboxSpec,
    cluster: &ClusterNetwork,
) -> Rendered {
    plan_network_policy(owner, spec, cluster).render(namespace)
}

// The spec's parts. Fields are declared in the order of their JSON keys, maps sorted: the digest
// of their JSON is then the one `spec_hash` gives of the spec read back as a `Value`.

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
    except: Vec<Cut<'a>>,
}

/// An except: a range as the spec or the flags wrote it, or one the policy computed (a form
/// of a blocked IPv4 range that an IPv6 address carries), written when serialized.
#[derive(Clone, Copy)]
enum Cut<'a> {
    Text(&'a str),
    Range(Cidr),
}

impl Serialize for Cut<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Cut::Text(text) => serializer.serialize_str(text),
            Cut::Range(cidr) => serializer.collect_str(cidr),
        }
    }
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
    network: &'a NetworkSpec,
    service: Option<&'a ServiceSpec>,
    cluster: &'a ClusterNetwork,
) -> PolicySpec<'a> {
    PolicySpec {
        egress: egress(network, cluster),
        ingress: ingress(service, cluster),
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
fn ingress<'a>(
    service: Option<&'a ServiceSpec>,
    cluster: &'a ClusterNetwork,
) -> Vec<IngressRule<'a>> {
    let Some(service) = service else {
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
fn parsed(list: &[String]) -> impl Iterator<Item = (Cidr, Cut<'_>)> {
    list.iter()
        .filter_map(|text| Cidr::parse(text).map(|c| (c, Cut::Text(text.as_str()))))
}

/// `cuts` with every IPv6 form of their IPv4 ranges ([`Cidr::v4_forms`]): an except of an
/// address is an except of each address that carries it.
fn with_forms<'a>(cuts: impl Iterator<Item = (Cidr, Cut<'a>)>) -> Vec<(Cidr, Cut<'a>)> {
    let mut all = Vec::new();
    for (cidr, cut) in cuts {
        all.push((cidr, cut));
        for form in cidr.v4_forms().into_iter().flatten() {
            all.push((form, Cut::Range(form)));
        }
    }
    all
}

/// [`BLOCKED_FOR_INTERNET`], parsed. Every plan of an `egress: Internet` sandbox cuts them out
/// of the internet, and parsing their text with std's address parser at each of them was about
/// 1% of the controller's instructions per new sandbox. `blocked_ranges_are_their_text` checks
/// each range against its text.
const BLOCKED: [(Cidr, &str); 8] = [
    (Cidr::v4([10, 0, 0, 0], 8), BLOCKED_FOR_INTERNET[0]),
    (Cidr::v4([172, 16, 0, 0], 12), BLOCKED_FOR_INTERNET[1]),
    (Cidr::v4([192, 168, 0, 0], 16), BLOCKED_FOR_INTERNET[2]),
    (Cidr::v4([169, 254, 0, 0], 16), BLOCKED_FOR_INTERNET[3]),
    (Cidr::v4([100, 64, 0, 0], 10), BLOCKED_FOR_INTERNET[4]),
    (Cidr::v6(0xfc00 << 112, 7), BLOCKED_FOR_INTERNET[5]),
    (Cidr::v6(0xfe80 << 112, 10), BLOCKED_FOR_INTERNET[6]),
    (Cidr::v6(0, 64), BLOCKED_FOR_INTERNET[7]),
];

/// Every address, in each family: what `egress: Internet` starts from.
const EVERYWHERE: [(Cidr, &str); 2] = [
    (Cidr::v4([0, 0, 0, 0], 0), "0.0.0.0/0"),
    (Cidr::v6(0, 0), "::/0"),
];

/// `{ipBlock: {cidr, except}}` without the cuts that apply to it; `None` if they cover it.
fn ip_peer<'a>(text: &'a str, cuts: &[(Cidr, Cut<'a>)]) -> Option<Peer<'a>> {
    ip_block(Cidr::parse(text)?, text, cuts)
}

fn ip_block<'a>(cidr: Cidr, text: &'a str, cuts: &[(Cidr, Cut<'a>)]) -> Option<Peer<'a>> {
    let except = cidr::excepts(cidr, cuts)?;
    Some(Peer {
        ip_block: Some(IpBlock { cidr: text, except }),
        ..Peer::default()
    })
}

fn egress<'a>(network: &'a NetworkSpec, cluster: &'a ClusterNetwork) -> Vec<EgressRule<'a>> {
    // What the spec denies, in every form that carries it.
    let deny = with_forms(parsed(&network.deny_cidrs));
    let mut peers: Vec<Peer<'a>> = Vec::new();
    match network.egress {
        // Nothing at all, not even DNS.
        EgressMode::None => return Vec::new(),
        EgressMode::Internet => {
            // What the internet does not hold, in every form that carries it, and NAT64's
            // local-use prefix, which may carry any of it.
            let mut cuts = with_forms(
                BLOCKED
                    .iter()
                    .map(|&(cidr, text)| (cidr, Cut::Text(text)))
                    .chain(parsed(&cluster.cluster_cidrs)),
            );
            cuts.extend(deny.iter().copied());
            cuts.push((cidr::NAT64_LOCAL, Cut::Range(cidr::NAT64_LOCAL)));
            peers.extend(
                EVERYWHERE
                    .iter()
                    .filter_map(|&(all, text)| ip_block(all, text, &cuts)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_ranges_are_their_text() {
        for (cidr, text) in BLOCKED.iter().chain(&EVERYWHERE) {
            assert_eq!(Cidr::parse(text), Some(*cidr), "{text}");
        }
        let texts: Vec<&str> = BLOCKED.iter().map(|(_, text)| *text).collect();
        assert_eq!(texts, BLOCKED_FOR_INTERNET);
    }
}
