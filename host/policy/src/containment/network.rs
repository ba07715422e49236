//! A sandbox's NetworkPolicy (rule `network`): it selects exactly the sandbox's own Pod, has
//! both policy types, and allows no more than the host computes from the sandbox's
//! `spec.network`, `spec.service` and the cluster network of the flags. `ipBlock` peers are
//! compared as address sets (CIDR minus excepts, within the allowed set); selector peers must
//! be one of the few the host knows: the cluster's DNS pods (port 53 only), the
//! `--ingress-from` pods (the Service's ports only) and, for `egress: cluster`, every pod.
//!
//! Some addresses no sandbox reaches unless the operator lists them (`--allowed-egress-cidrs`),
//! whatever its spec or policy says: the cloud metadata service and link-local, and, but for
//! `egress: cluster`, the cluster's ranges (`--cluster-cidr`, with the API server's address).
//! Each blocked IPv4 range is blocked in every IPv6 form that carries it too (IPv4-mapped,
//! -translated and -compatible, NAT64, 6to4: the SDK's `cidr::EMBEDDINGS`, from which the
//! default policy writes its excepts), so an `ipBlock` that *contains* such a form without
//! excepting it is refused, as is one inside a form that carries an address beyond the bounds;
//! NAT64's local-use prefix is refused outright. A tenant's `allowCIDRs` entry that reaches any
//! of these, in any form, is refused before the policy runs (`refused_allow_cidr`).

use std::fmt;
use std::sync::LazyLock;

use super::ipset::{Cidr, IpSet, NAT64_LOCAL};
use super::json::Json;
use super::{
    CallFacts, Containment, Fields, Refusal, Rule, SANDBOX_LABEL, SandboxScope, describe, nth,
    short, sub,
};
use crate::model::names;
use crate::model::names::{BLOCKED_FOR_INTERNET, NAMESPACE_NAME_LABEL};
use crate::runtime::bindings::{ClusterNetwork, EgressMode, ServiceProtocol};
use cubepod_kube::Resource;

/// What a NetworkPolicy may allow for one Sandbox: its spec and the cluster network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxNetwork {
    pub(crate) egress: EgressMode,
    pub(crate) allow_cidrs: Vec<String>,
    pub(crate) deny_cidrs: Vec<String>,
    /// `spec.service.ports` as (port, protocol); `None` without `spec.service`.
    pub(crate) service_ports: Option<Vec<(u16, ServiceProtocol)>>,
    pub(crate) cluster: ClusterNetwork,
}

use crate::model::sandbox::egress_name;
pub(crate) use crate::model::sandbox::protocol_name;

/// Every address but those no sandbox reaches on the internet, in any form that carries
/// them: the same for every check, so made once (building it from its dozen CIDRs was about
/// 1% of the controller's CPU per new sandbox).
static INTERNET: LazyLock<IpSet> = LazyLock::new(|| {
    let everything = set_of(["0.0.0.0/0", "::/0"], |_| {});
    everything.minus(&set_of(BLOCKED_FOR_INTERNET, |_| {}).with_v4_forms())
});

/// The cloud metadata service (169.254.169.254, and AWS's IPv6 fd00:ec2::254) and the
/// link-local ranges it lives in: never reached unless the operator lists them.
pub(crate) const METADATA: [&str; 4] = [
    "169.254.169.254/32",
    "169.254.0.0/16",
    "fd00:ec2::254/128",
    "fe80::/10",
];

/// [`METADATA`] in every form that carries it, and NAT64's local-use prefix.
static METADATA_SET: LazyLock<IpSet> = LazyLock::new(|| {
    set_of(METADATA, |_| {})
        .with_v4_forms()
        .union(&IpSet::of(NAT64_LOCAL))
});

/// What no sandbox reaches unless the operator lists it, in any form: the metadata service and
/// link-local, the cluster's ranges, each IPv4 range also in every IPv6 form that carries it,
/// and NAT64's local-use prefix; less `exempt` (`--allowed-egress-cidrs`).
pub(crate) fn protected(cluster: &IpSet, exempt: &IpSet) -> IpSet {
    METADATA_SET.union(&cluster.with_v4_forms()).minus(exempt)
}

/// The first entry of a Sandbox's `spec.network.allowCIDRs` that reaches a [`protected`]
/// address, with why: the host refuses such a spec before the policy runs (`SpecValid`
/// False). An entry that does not parse is the policy's to refuse.
pub(crate) fn refused_allow_cidr(
    allow_cidrs: &[String],
    cluster_cidrs: &[String],
    exempt: &IpSet,
) -> Option<(usize, String)> {
    if allow_cidrs.is_empty() {
        return None;
    }
    let cluster = set_of(cluster_cidrs.iter().map(String::as_str), |_| {});
    let protected = protected(&cluster, exempt);
    allow_cidrs.iter().enumerate().find_map(|(i, text)| {
        let entry = IpSet::of(Cidr::parse(text).ok()?);
        entry.intersects(&protected).then(|| {
            let reached = entry.minus(&entry.minus(&protected));
            (
                i,
                format!(
                    "{:?} reaches {reached}, which no sandbox may reach: the cloud metadata \
                     service and link-local, the cluster's pod and service ranges and the API \
                     server (--cluster-cidr), in IPv4 or any IPv6 form that carries an IPv4 \
                     address (mapped, translated, compatible, NAT64, 6to4), unless the operator \
                     lists them (--allowed-egress-cidrs)",
                    super::clip(text, 64)
                ),
            )
        })
    })
}

fn set_of<'a>(cidrs: impl IntoIterator<Item = &'a str>, mut bad: impl FnMut(&'a str)) -> IpSet {
    let mut set = IpSet::default();
    for text in cidrs {
        match Cidr::parse(text) {
            Ok(cidr) => set = set.union(&IpSet::of(cidr)),
            Err(_) => bad(text),
        }
    }
    set
}

impl SandboxNetwork {
    /// The addresses egress may reach by `ipBlock`: what the mode allows and `allowCIDRs`,
    /// less `denyCIDRs`, and never the metadata service and link-local, nor the cluster's
    /// ranges but for `egress: cluster`, unless `exempt` (`--allowed-egress-cidrs`) holds
    /// them; what is denied or never reached, in every IPv6 form that carries it too. A deny CIDR or a cluster CIDR that does not parse leaves nothing checkable: an
    /// error, so that nothing is admitted.
    pub(crate) fn allowed_addresses(&self, exempt: &IpSet) -> Result<IpSet, String> {
        let mut problem = None;
        let deny = set_of(self.deny_cidrs.iter().map(String::as_str), |c| {
            problem.get_or_insert_with(|| format!("spec.network.denyCIDRs holds {c:?}"));
        });
        let cluster = set_of(self.cluster.cluster_cidrs.iter().map(String::as_str), |c| {
            problem.get_or_insert_with(|| format!("the cluster CIDR {c:?}"));
        });
        if let Some(problem) = problem {
            return Err(format!(
                "{problem}, which is not a CIDR: no egress range can be checked against it"
            ));
        }
        // An allow CIDR that does not parse allows nothing.
        let allow = set_of(self.allow_cidrs.iter().map(String::as_str), |_| {});
        let (base, never) = match self.egress {
            EgressMode::None => return Ok(IpSet::default()),
            EgressMode::Internet => {
                let cluster = cluster.with_v4_forms();
                (INTERNET.minus(&cluster), METADATA_SET.union(&cluster))
            }
            EgressMode::Cluster => (cluster, METADATA_SET.clone()),
        };
        Ok(base
            .union(&allow)
            .minus(&deny.with_v4_forms())
            .minus(&never.minus(exempt)))
    }
}

/// A Pod only while its NetworkPolicy exists (checked after the Pod's manifest, so that a
/// bad Pod is refused for what is wrong with it): the last this call did to it was an
/// apply, or it did nothing to it and the controller's cache holds it (or, without one, the
/// input's observed children show it). Otherwise the Pod would run, if briefly, with the
/// namespace's network. For every contract: a 0.1 module's is applied by the host.
pub(super) fn network_policy_first(
    scope: &SandboxScope,
    facts: &impl CallFacts,
    namespace: &str,
    name: &str,
) -> Result<(), Refusal> {
    let policy = names::network_policy(&scope.name);
    // Only "is it this sandbox's own": one lookup, not the scan that tells another
    // sandbox's child from none (every new Pod passes here).
    let present = match facts.last_done(Resource::NetworkPolicy, namespace, &policy) {
        Some(applied) => applied,
        None => facts.held(Resource::NetworkPolicy, namespace, &policy),
    };
    if present {
        return Ok(());
    }
    Err(Refusal::new(
        Rule::Network,
        describe(Resource::Pod, namespace, name),
        "kind",
        format!(
            "no Pod before its NetworkPolicy: apply {policy:?} first (it is not in the \
             cache and not applied in this call, or this call deleted it)"
        ),
    ))
}

/// A delete of S's NetworkPolicy only once S's Pod is gone: not while the cache holds it
/// (a Pod deleted, in this call or before, still runs until the watch says it is gone)
/// nor when this call created it. Otherwise the Pod would run on the namespace's network.
pub(super) fn no_pod_without_its_policy(
    scope: &SandboxScope,
    facts: &impl CallFacts,
    namespace: &str,
    name: &str,
) -> Result<(), Refusal> {
    let pod = names::pod(&scope.name);
    // Written or deleted in this call: it exists, or is still terminating.
    let touched = facts.last_done(Resource::Pod, namespace, &pod).is_some();
    if !touched && !facts.held(Resource::Pod, namespace, &pod) {
        return Ok(());
    }
    Err(Refusal::new(
        Rule::Network,
        describe(Resource::NetworkPolicy, namespace, name),
        "name",
        format!(
            "Pod {pod:?} exists (in the cache, terminating, or created in this call): its \
             NetworkPolicy is deleted only once the Pod is gone"
        ),
    ))
}

/// Checks a NetworkPolicy manifest for `scope`'s Sandbox.
pub(super) fn check(
    rules: &Containment,
    scope: &SandboxScope,
    what: &dyn fmt::Display,
    object: &Json<'_>,
) -> Result<(), Refusal> {
    let fields = Fields::new(Rule::Network, what);
    let Some(network) = &scope.network else {
        return Err(fields.refuse(
            "kind",
            "this policy's contract has no sandbox network: it may not write NetworkPolicies",
        ));
    };
    fields.object(object, "", &["apiVersion", "kind", "metadata", "spec"])?;
    let spec = fields.required(object, "", "spec")?;
    fields.object(
        spec,
        "spec",
        &["podSelector", "policyTypes", "ingress", "egress"],
    )?;
    own_pod_selector(&fields, scope, spec)?;
    let types = fields.array(
        fields.required(spec, "spec", "policyTypes")?,
        "spec.policyTypes",
    )?;
    let named: Vec<Option<&str>> = types.iter().map(Json::as_str).collect();
    let both =
        named.len() == 2 && named.contains(&Some("Ingress")) && named.contains(&Some("Egress"));
    if !both {
        return Err(fields.refuse(
            "spec.policyTypes",
            "must be exactly [Ingress, Egress]: a policy of one type leaves the other direction \
             open",
        ));
    }
    let exempt = &rules.allowed_egress;
    let allowed = network
        .allowed_addresses(exempt)
        .map_err(|why| fields.refuse("spec.egress", why))?;
    let bounds = Bounds { allowed, exempt };
    if let Some(rules) = spec.get("egress") {
        let rules = fields.array(rules, "spec.egress")?;
        for (i, rule) in rules.iter().enumerate() {
            check_egress_rule(&fields, network, &bounds, rule, &nth(&"spec.egress", i))?;
        }
    }
    if let Some(rules) = spec.get("ingress") {
        let rules = fields.array(rules, "spec.ingress")?;
        for (i, rule) in rules.iter().enumerate() {
            check_ingress_rule(&fields, network, rule, &nth(&"spec.ingress", i))?;
        }
    }
    Ok(())
}

/// `{matchLabels: {cubepod.io/sandbox: S}}` and nothing else: S's own Pod, only it.
fn own_pod_selector(
    fields: &Fields<'_>,
    scope: &SandboxScope,
    spec: &Json<'_>,
) -> Result<(), Refusal> {
    let field = "spec.podSelector";
    let selector = fields.required(spec, "spec", "podSelector")?;
    fields.object(selector, field, &["matchLabels"])?;
    let labels = fields.required(selector, field, "matchLabels")?;
    let labels = fields.object(labels, "spec.podSelector.matchLabels", &[SANDBOX_LABEL])?;
    if labels.get(SANDBOX_LABEL).and_then(Json::as_str) != Some(scope.name.as_str()) {
        return Err(fields.refuse(
            "spec.podSelector.matchLabels",
            format!(
                "must select exactly Sandbox {:?}'s own Pod ({SANDBOX_LABEL}: {:?})",
                scope.name, scope.name
            ),
        ));
    }
    Ok(())
}

/// A label selector that is exactly `{matchLabels: expected}`; `{}` or `{matchLabels: {}}`
/// for an empty `expected` (every object).
fn selector_is(selector: &Json<'_>, expected: &[(String, String)]) -> bool {
    let Some(map) = selector.as_object() else {
        return false;
    };
    if map.keys().any(|k| k != "matchLabels") {
        return false;
    }
    let labels = match map.get("matchLabels") {
        None => return expected.is_empty(),
        Some(labels) => labels,
    };
    let Some(labels) = labels.as_object() else {
        return false;
    };
    labels.len() == expected.len()
        && expected
            .iter()
            .all(|(k, v)| labels.get(k).and_then(Json::as_str) == Some(v.as_str()))
}

/// Which selector peer a peer is, if it is one the host allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Dns,
    AllPods,
    IngressFrom,
}

fn selector_peer(peer: &Json<'_>, cluster: &ClusterNetwork) -> Option<Peer> {
    let map = peer.as_object()?;
    if map
        .keys()
        .any(|k| k != "namespaceSelector" && k != "podSelector")
    {
        return None;
    }
    let namespaces = map.get("namespaceSelector")?;
    let pods = map.get("podSelector");
    let dns_namespace = [(
        NAMESPACE_NAME_LABEL.to_string(),
        cluster.dns_namespace.clone(),
    )];
    if selector_is(namespaces, &dns_namespace)
        && pods.is_some_and(|p| selector_is(p, &cluster.dns_pod_labels))
        && !cluster.dns_pod_labels.is_empty()
    {
        return Some(Peer::Dns);
    }
    if !selector_is(namespaces, &[]) {
        return None;
    }
    match pods {
        None => Some(Peer::AllPods),
        Some(p) if selector_is(p, &[]) => Some(Peer::AllPods),
        Some(p) if !cluster.ingress_from.is_empty() && selector_is(p, &cluster.ingress_from) => {
            Some(Peer::IngressFrom)
        }
        Some(_) => None,
    }
}

/// A rule's ports as (port, protocol); `None` when the rule has none (every port).
fn ports(
    fields: &Fields<'_>,
    rule: &Json<'_>,
    at: &dyn fmt::Display,
) -> Result<Option<Vec<(u64, String)>>, Refusal> {
    let Some(list) = rule.get("ports") else {
        return Ok(None);
    };
    let at = sub(at, "ports");
    let list = fields.array(list, at)?;
    let mut out = Vec::with_capacity(list.len());
    for (i, port) in list.iter().enumerate() {
        let field = nth(&at, i);
        let map = fields.object(port, field, &["protocol", "port"])?;
        let protocol = match map.get("protocol") {
            None => "TCP".to_string(),
            Some(p) => p
                .as_str()
                .ok_or_else(|| fields.refuse(sub(&field, "protocol"), "not a string"))?
                .to_string(),
        };
        let number = map
            .get("port")
            .and_then(Json::as_u64)
            .filter(|p| (1..=65535).contains(p))
            .ok_or_else(|| {
                fields.refuse(
                    sub(&field, "port"),
                    "must be a port number (1-65535); a named port or none is wider than the \
                     host can check",
                )
            })?;
        out.push((number, protocol));
    }
    Ok(Some(out))
}

/// What an `ipBlock` may reach: the sandbox's allowed addresses, and what the operator exempts.
struct Bounds<'a> {
    allowed: IpSet,
    exempt: &'a IpSet,
}

impl Bounds<'_> {
    /// Why `reached` (the CIDR `cidr` less its excepts) is beyond the bounds, if it is.
    fn beyond(&self, network: &SandboxNetwork, cidr: Cidr, reached: &IpSet) -> Option<String> {
        let allowed = &self.allowed;
        let mode = || {
            if allowed.is_empty() {
                "nothing".to_string()
            } else {
                format!("egress {}", egress_name(network.egress))
            }
        };
        if NAT64_LOCAL.contains(cidr) && !reached.is_subset(self.exempt) {
            return Some(format!(
                "reaches {} in NAT64's local-use prefix 64:ff9b:1::/48, which may carry any \
                 IPv4 address (the operator may list it: --allowed-egress-cidrs)",
                reached.minus(self.exempt)
            ));
        }
        if !reached.is_subset(allowed) {
            return Some(format!(
                "reaches {}, beyond what spec.network allows ({}), or an address no sandbox \
                 reaches unless the operator lists it (--allowed-egress-cidrs)",
                reached.minus(allowed),
                mode()
            ));
        }
        // An address of a form that carries an IPv4 address reaches that IPv4 address.
        if cidr.carried_v4().is_some() {
            let carried = reached.carried_v4(cidr);
            if !carried.is_subset(allowed) {
                return Some(format!(
                    "carries the IPv4 addresses {}, beyond what spec.network allows ({}), or \
                     addresses no sandbox reaches unless the operator lists them \
                     (--allowed-egress-cidrs)",
                    carried.minus(allowed),
                    mode()
                ));
            }
        }
        None
    }
}

fn check_egress_rule(
    fields: &Fields<'_>,
    network: &SandboxNetwork,
    bounds: &Bounds<'_>,
    rule: &Json<'_>,
    at: &dyn fmt::Display,
) -> Result<(), Refusal> {
    fields.object(rule, at, &["to", "ports"])?;
    let ports = ports(fields, rule, at)?;
    let to_at = sub(at, "to");
    let peers = fields.array(
        rule.get("to").ok_or_else(|| {
            fields.refuse(
                to_at,
                "required: a rule without `to` allows every destination",
            )
        })?,
        to_at,
    )?;
    if peers.is_empty() {
        return Err(fields.refuse(to_at, "empty: a rule with no peer allows every destination"));
    }
    for (i, peer) in peers.iter().enumerate() {
        let field = nth(&to_at, i);
        if let Some(block) = peer.get("ipBlock") {
            fields.object(peer, field, &["ipBlock"])?;
            let (cidr, reached) = ip_block(fields, block, &sub(&field, "ipBlock"))?;
            if let Some(why) = bounds.beyond(network, cidr, &reached) {
                return Err(fields.refuse(sub(&field, "ipBlock"), why));
            }
            continue;
        }
        let kind = selector_peer(peer, &network.cluster);
        match (kind, network.egress) {
            (Some(Peer::Dns), EgressMode::Internet | EgressMode::Cluster) => {
                let dns_only = ports.as_ref().is_some_and(|p| {
                    !p.is_empty()
                        && p.iter()
                            .all(|(n, proto)| *n == 53 && (proto == "UDP" || proto == "TCP"))
                });
                if !dns_only {
                    return Err(fields.refuse(
                        sub(at, "ports"),
                        "the DNS peer may be reached on port 53 (UDP, TCP) only",
                    ));
                }
            }
            (Some(Peer::AllPods), EgressMode::Cluster) => {}
            _ => {
                return Err(fields.refuse(
                    field,
                    format!(
                        "{} is not a peer egress {} allows (the DNS pods of {:?}{})",
                        short(peer),
                        egress_name(network.egress),
                        network.cluster.dns_namespace,
                        if network.egress == EgressMode::Cluster {
                            ", or every pod: {namespaceSelector: {}}"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// An `ipBlock`'s CIDR, and the addresses it reaches: the CIDR without its excepts.
fn ip_block(
    fields: &Fields<'_>,
    block: &Json<'_>,
    at: &dyn fmt::Display,
) -> Result<(Cidr, IpSet), Refusal> {
    fields.object(block, at, &["cidr", "except"])?;
    let parse = |value: &Json<'_>, field: &dyn fmt::Display| {
        let text = value
            .as_str()
            .ok_or_else(|| fields.refuse(field, "not a string"))?;
        Cidr::parse(text).map_err(|e| fields.refuse(field, e.to_string()))
    };
    let cidr_at = sub(at, "cidr");
    let cidr = parse(fields.required(block, at, "cidr")?, &cidr_at)?;
    let mut reached = IpSet::of(cidr);
    if let Some(except) = block.get("except") {
        let except_at = sub(at, "except");
        for (i, cut) in fields.array(except, except_at)?.iter().enumerate() {
            reached = reached.minus(&IpSet::of(parse(cut, &nth(&except_at, i))?));
        }
    }
    Ok((cidr, reached))
}

fn check_ingress_rule(
    fields: &Fields<'_>,
    network: &SandboxNetwork,
    rule: &Json<'_>,
    at: &dyn fmt::Display,
) -> Result<(), Refusal> {
    fields.object(rule, at, &["from", "ports"])?;
    let service_ports = match &network.service_ports {
        Some(ports) if !ports.is_empty() && !network.cluster.ingress_from.is_empty() => ports,
        _ => {
            return Err(fields.refuse(
                at,
                "no ingress is allowed: the sandbox has no spec.service ports, or the controller \
                 no --ingress-from",
            ));
        }
    };
    let from_at = sub(at, "from");
    let peers = fields.array(
        rule.get("from").ok_or_else(|| {
            fields.refuse(from_at, "required: a rule without `from` lets anyone in")
        })?,
        from_at,
    )?;
    if peers.is_empty() {
        return Err(fields.refuse(from_at, "empty: a rule with no peer lets anyone in"));
    }
    for (i, peer) in peers.iter().enumerate() {
        if selector_peer(peer, &network.cluster) != Some(Peer::IngressFrom) {
            return Err(fields.refuse(
                nth(&from_at, i),
                format!(
                    "{} is not the --ingress-from peer {{namespaceSelector: {{}}, podSelector: \
                     {{matchLabels: {:?}}}}}",
                    short(peer),
                    network.cluster.ingress_from
                ),
            ));
        }
    }
    let ports = ports(fields, rule, at)?;
    let within = ports.as_ref().is_some_and(|ports| {
        !ports.is_empty()
            && ports.iter().all(|(n, proto)| {
                service_ports
                    .iter()
                    .any(|(p, sp)| u64::from(*p) == *n && protocol_name(*sp) == proto)
            })
    });
    if !within {
        return Err(fields.refuse(
            sub(at, "ports"),
            "ingress may reach only the ports of spec.service.ports (each named, with its \
             protocol)",
        ));
    }
    Ok(())
}
