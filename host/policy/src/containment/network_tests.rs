//! The `network` and `service` rules against the default policy's own NetworkPolicy and
//! Service, for each egress mode: the default passes, and each widening edit is refused.

use serde_json::{Value, json};

use super::tests::{S, check_in, refused, scope_of, served, with, writes, written};
use super::*;
use cubepod_policy_sdk::bindings::{EgressMode, ReconcileInput};

fn policy_check(input: &ReconcileInput, manifest: &Value) -> Result<(), Refusal> {
    let name = names::network_policy(S);
    check_in(
        &Containment::default(),
        &scope_of(input),
        Resource::NetworkPolicy,
        &name,
        manifest,
    )
}

#[track_caller]
fn policy_refused(input: &ReconcileInput, edit: impl FnOnce(&mut Value), field: &str) {
    let mut manifest = written(input, Resource::NetworkPolicy);
    edit(&mut manifest);
    refused(policy_check(input, &manifest), Rule::Network, field);
}

#[test]
fn the_default_policys_network_policy_and_service_comply_in_every_mode() {
    let modes = [EgressMode::Internet, EgressMode::None, EgressMode::Cluster];
    for mode in modes {
        let input = with(|i| {
            i.sandbox.spec.network.egress = mode;
            i.sandbox.spec.network.allow_cidrs = vec!["10.0.5.0/24".into(), "2001:db8::/32".into()];
            i.sandbox.spec.network.deny_cidrs = vec!["10.0.5.128/25".into(), "8.8.8.8/32".into()];
            i.cluster_network.cluster_cidrs.push("fd00:10::/48".into());
            served(i);
        });
        let scope = scope_of(&input);
        for (resource, name, manifest) in writes(&input) {
            assert_eq!(
                check_in(&Containment::default(), &scope, resource, &name, &manifest),
                Ok(()),
                "{mode:?}: {resource} {name}: {manifest}"
            );
        }
    }
}

#[test]
fn a_network_policy_selects_exactly_the_sandboxs_own_pod_with_both_types() {
    let input = with(|_| {});
    policy_refused(
        &input,
        |m| m["spec"]["podSelector"]["matchLabels"]["cubepod.io/sandbox"] = json!("bob"),
        "spec.podSelector.matchLabels",
    );
    policy_refused(
        &input,
        |m| m["spec"]["podSelector"] = json!({}),
        "spec.podSelector.matchLabels",
    );
    policy_refused(
        &input,
        |m| {
            m["spec"]["podSelector"]["matchExpressions"] =
                json!([{"key": "x", "operator": "Exists"}])
        },
        "spec.podSelector.matchExpressions",
    );
    policy_refused(
        &input,
        |m| m["spec"]["podSelector"]["matchLabels"]["app"] = json!("x"),
        "spec.podSelector.matchLabels.app",
    );
    policy_refused(
        &input,
        |m| m["spec"]["policyTypes"] = json!(["Egress"]),
        "spec.policyTypes",
    );
    // Metadata is the scope rule's, as for every child: only the spec-hash annotation.
    let mut annotated = written(&input, Resource::NetworkPolicy);
    annotated["metadata"]["annotations"]["other"] = json!("x");
    refused(
        policy_check(&input, &annotated),
        Rule::Scope,
        "metadata.annotations.other",
    );
}

#[test]
fn internet_egress_never_reaches_private_metadata_or_cluster_ranges() {
    let input = with(|i| i.sandbox.spec.network.deny_cidrs = vec!["203.0.113.0/24".into()]);
    let first_peer = "spec.egress[0].to[0].ipBlock";
    // 0.0.0.0/0 without its excepts.
    policy_refused(
        &input,
        |m| m["spec"]["egress"][0]["to"][0]["ipBlock"] = json!({"cidr": "0.0.0.0/0"}),
        first_peer,
    );
    for reach in [
        "169.254.169.254/32",
        "10.244.3.0/24",
        "203.0.113.7/32",
        "100.64.0.0/10",
    ] {
        policy_refused(
            &input,
            |m| m["spec"]["egress"][0]["to"][0]["ipBlock"] = json!({"cidr": reach}),
            first_peer,
        );
    }
    // Within the internet: admitted.
    let mut narrower = written(&input, Resource::NetworkPolicy);
    narrower["spec"]["egress"][0]["to"][0]["ipBlock"] = json!({"cidr": "8.8.8.0/24"});
    assert_eq!(policy_check(&input, &narrower), Ok(()));
    policy_refused(
        &input,
        |m| m["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"] = json!("10.0.0.0"),
        "spec.egress[0].to[0].ipBlock.cidr",
    );
    policy_refused(
        &input,
        |m| m["spec"]["egress"][0]["to"][0]["ipBlock"]["except"][0] = json!("ten/8"),
        "spec.egress[0].to[0].ipBlock.except[0]",
    );
    // A rule without peers allows everything.
    policy_refused(
        &input,
        |m| m["spec"]["egress"][0] = json!({"ports": [{"port": 443}]}),
        "spec.egress[0].to",
    );
    policy_refused(
        &input,
        |m| m["spec"]["egress"][0]["to"] = json!([]),
        "spec.egress[0].to",
    );
    // Every pod is not a peer of internet egress; DNS only on port 53.
    policy_refused(
        &input,
        |m| m["spec"]["egress"][0]["to"][0] = json!({"namespaceSelector": {}}),
        "spec.egress[0].to[0]",
    );
    policy_refused(
        &input,
        |m| m["spec"]["egress"][1]["ports"] = json!([{"protocol": "TCP", "port": 80}]),
        "spec.egress[1].ports",
    );
    policy_refused(
        &input,
        |m| {
            let ports = m["spec"]["egress"][1].as_object_mut().unwrap();
            ports.remove("ports");
        },
        "spec.egress[1].ports",
    );
    policy_refused(
        &input,
        |m| m["spec"]["egress"][1]["to"][0]["podSelector"] = json!({}),
        "spec.egress[1].to[0]",
    );
    policy_refused(
        &input,
        |m| m["spec"]["egress"][1]["ports"][0]["endPort"] = json!(60),
        "spec.egress[1].ports[0].endPort",
    );
}

#[test]
fn none_egress_allows_nothing_and_cluster_egress_no_internet() {
    let none = with(|i| i.sandbox.spec.network.egress = EgressMode::None);
    let internet = written(&with(|_| {}), Resource::NetworkPolicy);
    let mut widened = written(&none, Resource::NetworkPolicy);
    widened["spec"]["egress"] = json!([internet["spec"]["egress"][1].clone()]);
    refused(
        policy_check(&none, &widened),
        Rule::Network,
        "spec.egress[0].to[0]",
    );

    let cluster = with(|i| i.sandbox.spec.network.egress = EgressMode::Cluster);
    policy_refused(
        &cluster,
        |m| m["spec"]["egress"][0]["to"][1] = json!({"ipBlock": {"cidr": "8.8.8.8/32"}}),
        "spec.egress[0].to[1].ipBlock",
    );
    policy_refused(
        &cluster,
        |m| m["spec"]["egress"][0]["to"][0] = json!({"podSelector": {}}),
        "spec.egress[0].to[0]",
    );
}

#[test]
fn ingress_only_from_the_ingress_pods_to_the_services_ports() {
    let input = with(served);
    let rule = "spec.ingress[0]";
    policy_refused(
        &input,
        |m| m["spec"]["ingress"][0]["ports"][0]["port"] = json!(22),
        "spec.ingress[0].ports",
    );
    policy_refused(
        &input,
        |m| {
            m["spec"]["ingress"][0]["from"][0]["podSelector"] = json!({});
        },
        "spec.ingress[0].from[0]",
    );
    policy_refused(
        &input,
        |m| {
            let rule = m["spec"]["ingress"][0].as_object_mut().unwrap();
            rule.remove("from");
        },
        "spec.ingress[0].from",
    );
    // No Service: no ingress rule at all.
    let plain = with(|i| i.cluster_network.ingress_from = vec![("app".into(), "gateway".into())]);
    let mut manifest = written(&plain, Resource::NetworkPolicy);
    manifest["spec"]["ingress"] =
        written(&input, Resource::NetworkPolicy)["spec"]["ingress"].clone();
    refused(policy_check(&plain, &manifest), Rule::Network, rule);
}

/// A peer added to the default's first egress rule, for the sandbox `input`.
fn with_peer(input: &ReconcileInput, cidr: &str) -> Value {
    let mut manifest = written(input, Resource::NetworkPolicy);
    manifest["spec"]["egress"][0]["to"]
        .as_array_mut()
        .expect("the default's first rule has peers")
        .push(json!({"ipBlock": {"cidr": cidr}}));
    manifest
}

fn exempting(cidrs: &[&str]) -> Containment {
    Containment {
        allowed_egress: cidrs
            .iter()
            .map(|c| IpSet::of(ipset::Cidr::parse(c).unwrap()))
            .fold(IpSet::default(), |a, b| a.union(&b)),
        ..Containment::default()
    }
}

use super::ipset::{self, IpSet};

#[test]
fn protected_addresses_are_refused_in_their_mapped_and_nat64_forms() {
    let input = with(|_| {});
    let at = "spec.egress[0].to[2].ipBlock";
    for reach in [
        // The metadata service, in every form.
        "169.254.169.254/32",
        "fd00:ec2::254/128",
        "::ffff:169.254.169.254/128",
        "::ffff:a9fe:a9fe/128",
        "64:ff9b::a9fe:a9fe/128",
        "64:ff9b::169.254.0.0/112",
        // The cluster's ranges and the RFC 1918 space the internet mode leaves out.
        "::ffff:10.96.0.1/128",
        "64:ff9b::a60:1/128",
        "64:ff9b::10.0.0.0/104",
        // Everything a carrier prefix carries.
        "::ffff:0:0/96",
        "64:ff9b::/96",
        // NAT64's local-use prefix, whatever it carries.
        "64:ff9b:1::/48",
        "64:ff9b:1:a9fe:a9::/80",
    ] {
        let manifest = with_peer(&input, reach);
        refused(policy_check(&input, &manifest), Rule::Network, at);
    }
    // The internet in the same forms: admitted (but in `::/64`, the reserved range that holds
    // the mapped, translated and compatible forms: the internet mode never reaches it).
    refused(
        policy_check(&input, &with_peer(&input, "::ffff:8.8.8.8/128")),
        Rule::Network,
        at,
    );
    for reach in ["64:ff9b::808:808/128", "2002:808:808::/48", "2001:db8::/32"] {
        let manifest = with_peer(&input, reach);
        assert_eq!(policy_check(&input, &manifest), Ok(()), "{reach}");
    }
}

#[test]
fn allow_cidrs_reach_protected_addresses_only_when_the_operator_lists_them() {
    // (`egress: none` renders no egress at all, whatever allowCIDRs say.)
    for mode in [EgressMode::Internet, EgressMode::Cluster] {
        for allow in ["169.254.169.254/32", "10.96.0.1/32", "fe80::1/128"] {
            let input = with(|i| {
                i.sandbox.spec.network.egress = mode;
                i.sandbox.spec.network.allow_cidrs = vec![allow.into()];
            });
            let policy = written(&input, Resource::NetworkPolicy);
            let scope = scope_of(&input);
            let name = names::network_policy(S);
            let check = |rules: &Containment| {
                check_in(rules, &scope, Resource::NetworkPolicy, &name, &policy)
            };
            // `egress: cluster` reaches the cluster's ranges by itself; nothing else does.
            if mode == EgressMode::Cluster && allow == "10.96.0.1/32" {
                assert_eq!(check(&Containment::default()), Ok(()));
            } else {
                let refusal = check(&Containment::default()).expect_err(allow);
                assert_eq!(refusal.rule, Rule::Network, "{refusal}");
                assert!(
                    refusal.reason.contains("--allowed-egress-cidrs"),
                    "{refusal}"
                );
            }
            assert_eq!(check(&exempting(&[allow])), Ok(()), "{mode:?} {allow}");
        }
    }
}

#[test]
fn cluster_egress_never_reaches_the_metadata_service() {
    let input = with(|i| {
        i.sandbox.spec.network.egress = EgressMode::Cluster;
        i.cluster_network
            .cluster_cidrs
            .push("169.254.0.0/16".into());
    });
    let policy = written(&input, Resource::NetworkPolicy);
    let refusal = policy_check(&input, &policy).expect_err("metadata inside a cluster CIDR");
    assert_eq!(refusal.rule, Rule::Network);
    assert!(
        refusal.reason.contains("169.254.0.0-169.254.255.255"),
        "{refusal}"
    );
}

#[test]
fn an_apply_that_removes_rules_is_never_wider() {
    let input = with(served);
    // Rules are allowances: without them the policy denies (narrower, admitted).
    for removed in ["egress", "ingress"] {
        let mut manifest = written(&input, Resource::NetworkPolicy);
        manifest["spec"].as_object_mut().unwrap().remove(removed);
        assert_eq!(policy_check(&input, &manifest), Ok(()), "{removed}");
    }
    // What would widen it when left out is required, or refused in its absence.
    type Removal = (&'static str, fn(&mut Value));
    let removals: [Removal; 6] = [
        ("spec.policyTypes", |m| {
            m["spec"].as_object_mut().unwrap().remove("policyTypes");
        }),
        ("spec.podSelector", |m| {
            m["spec"].as_object_mut().unwrap().remove("podSelector");
        }),
        ("spec.egress[0].to", |m| {
            m["spec"]["egress"][0].as_object_mut().unwrap().remove("to");
        }),
        ("spec.egress[0].to[0].ipBlock", |m| {
            m["spec"]["egress"][0]["to"][0]["ipBlock"]
                .as_object_mut()
                .unwrap()
                .remove("except");
        }),
        ("spec.ingress[0].from", |m| {
            m["spec"]["ingress"][0]
                .as_object_mut()
                .unwrap()
                .remove("from");
        }),
        ("spec.ingress[0].ports", |m| {
            m["spec"]["ingress"][0]
                .as_object_mut()
                .unwrap()
                .remove("ports");
        }),
    ];
    for (field, edit) in removals {
        policy_refused(&input, edit, field);
    }
}

#[test]
fn a_tenants_allow_cidrs_are_held_to_the_protected_ranges() {
    let cluster: Vec<String> = ["10.244.0.0/16", "10.96.0.0/12"]
        .iter()
        .map(|c| c.to_string())
        .collect();
    let entries = |list: &[&str]| list.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    let none = IpSet::default();
    // Each entry reaches a protected range; the first, the metadata service, is the one named.
    let (i, why) = network::refused_allow_cidr(
        &entries(&["169.254.169.254/32", "10.96.0.1/32", "10.0.0.0/8"]),
        &cluster,
        &none,
    )
    .expect("refused");
    assert_eq!(i, 0);
    assert!(why.contains("\"169.254.169.254/32\""), "{why}");
    assert!(why.contains("--allowed-egress-cidrs"), "{why}");
    for bad in [
        "10.96.0.1/32",
        "10.0.0.0/8",
        "fe80::/64",
        "::/0",
        "::ffff:169.254.169.254/128",
        "::ffff:10.244.1.0/120",
        "64:ff9b::a9fe:a9fe/128",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "fd00:ec2::254/128",
    ] {
        let found = network::refused_allow_cidr(&entries(&["10.0.5.0/24", bad]), &cluster, &none);
        assert_eq!(found.map(|(i, _)| i), Some(1), "{bad}");
    }
    for fine in [
        "10.0.5.0/24",
        "8.8.8.8/32",
        "2001:db8::/32",
        "::ffff:8.8.8.8/128",
        "nonsense",
    ] {
        assert_eq!(
            network::refused_allow_cidr(&entries(&[fine]), &cluster, &none),
            None,
            "{fine}"
        );
    }
    // What the operator lists, in every form it is asked for.
    let exempt = exempting(&["169.254.169.254/32", "10.96.0.1/32"]).allowed_egress;
    assert_eq!(
        network::refused_allow_cidr(
            &entries(&["169.254.169.254/32", "10.96.0.1/32"]),
            &cluster,
            &exempt
        ),
        None
    );
    assert!(network::refused_allow_cidr(&entries(&["10.96.0.0/12"]), &cluster, &exempt).is_some());
}

/// What a NetworkPolicy's egress `ipBlock`s reach: each CIDR less its excepts.
fn reached_by(manifest: &Value) -> IpSet {
    let mut reached = IpSet::default();
    for rule in manifest["spec"]["egress"].as_array().into_iter().flatten() {
        for peer in rule["to"].as_array().into_iter().flatten() {
            let Some(cidr) = peer["ipBlock"]["cidr"].as_str() else {
                continue;
            };
            let mut block = IpSet::of(ipset::Cidr::parse(cidr).unwrap());
            for cut in peer["ipBlock"]["except"].as_array().into_iter().flatten() {
                let cut = ipset::Cidr::parse(cut.as_str().unwrap()).unwrap();
                block = block.minus(&IpSet::of(cut));
            }
            reached = reached.union(&block);
        }
    }
    reached
}

/// Each address the default rules block, in IPv4 and in every IPv6 form that carries it
/// (`cidr::EMBEDDINGS`, and NAT64's local-use prefix), in every egress mode: the default
/// policy's NetworkPolicy excepts each of them, and the boundary refuses a peer that reaches
/// any (the internet's `::/0` without the excepts of the forms among them; in the cluster mode,
/// where the default's peers are the cluster's ranges and `allowCIDRs` (refused before the
/// policy runs when they reach a protected form), a cluster range that holds the metadata
/// service's forms).
#[test]
fn every_form_of_a_blocked_address_is_excepted_and_refused_in_every_mode() {
    use cubepod_policy_sdk::cidr::{Cidr as SdkCidr, EMBEDDINGS, NAT64_LOCAL as SDK_NAT64_LOCAL};
    // (mode, address, why it is blocked)
    let table = [
        (EgressMode::Internet, "169.254.169.254/32", "metadata"),
        (
            EgressMode::Internet,
            "10.96.0.1/32",
            "cluster (the API server)",
        ),
        (EgressMode::Internet, "10.244.3.4/32", "cluster (a pod)"),
        (EgressMode::Internet, "192.168.1.1/32", "RFC 1918"),
        (
            EgressMode::Internet,
            "100.64.0.1/32",
            "shared address space",
        ),
        (EgressMode::Internet, "203.0.113.7/32", "denyCIDRs"),
    ];
    for (mode, address, why) in table {
        let input = with(|i| {
            i.sandbox.spec.network.egress = mode;
            i.sandbox.spec.network.deny_cidrs = vec!["203.0.113.0/24".into()];
        });
        let default = written(&input, Resource::NetworkPolicy);
        assert_eq!(policy_check(&input, &default), Ok(()), "{default}");
        let reached = reached_by(&default);
        let forms = SdkCidr::parse(address).unwrap().v4_forms().unwrap();
        let mut all: Vec<String> = forms.iter().map(ToString::to_string).collect();
        all.push(SDK_NAT64_LOCAL.to_string());
        for (i, form) in all.iter().enumerate() {
            let kind = EMBEDDINGS.get(i).map_or("NAT64 local-use", |e| e.name);
            let set = IpSet::of(ipset::Cidr::parse(form).unwrap());
            assert!(
                !set.intersects(&reached),
                "{mode:?}: the default reaches {address} ({why}) as {form} ({kind}): {default}"
            );
            let manifest = with_peer(&input, form);
            refused(
                policy_check(&input, &manifest),
                Rule::Network,
                "spec.egress[0].to[2].ipBlock",
            );
        }
    }
    // `::/0` excepting the IPv6 ranges alone (what the default wrote before the forms) reaches
    // the forms: refused.
    let input = with(|_| {});
    let mut open = written(&input, Resource::NetworkPolicy);
    open["spec"]["egress"][0]["to"][1]["ipBlock"] =
        json!({"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]});
    refused(
        policy_check(&input, &open),
        Rule::Network,
        "spec.egress[0].to[1].ipBlock",
    );
    // A cluster range holding the metadata service's 6to4 form: refused, not excepted (an
    // operator who means it lists it: --allowed-egress-cidrs).
    let input = with(|i| {
        i.sandbox.spec.network.egress = EgressMode::Cluster;
        i.cluster_network
            .cluster_cidrs
            .push("2002:a9fe::/32".into());
    });
    let default = written(&input, Resource::NetworkPolicy);
    let refusal = policy_check(&input, &default).expect_err("a 6to4 form of the metadata");
    assert!(refusal.reason.contains("2002:a9fe:"), "{refusal}");
}
