//! A sandbox's network: the NetworkPolicy of each egress mode (exact manifests), applied before
//! the Pod and again only when its spec changes, the headless Service and its FQDN, and what
//! cleanup and a bad CIDR do.

use cubepod_policy_sdk::bindings::{
    ConditionStatus, EgressMode, ReconcileInput, ReconcileOutput, ServicePort, ServiceProtocol,
    ServiceSpec,
};
use cubepod_policy_sdk::fixtures::{NAMESPACE, NOW, observe, sandbox};
use cubepod_policy_sdk::recording::{Call, RecordingClient};
use cubepod_policy_sdk::{cleanup, reconcile, status};
use serde_json::{Value, json};

fn step(client: &mut RecordingClient, input: &mut ReconcileInput) -> ReconcileOutput {
    input.observed = observe(client, &input.sandbox.name, true);
    let out = reconcile::reconcile(client, input).expect("reconcile");
    input.sandbox.status = out.status.clone();
    out
}

fn applied(client: &RecordingClient, summary: &str) -> Value {
    client
        .calls
        .iter()
        .find(|c| c.summary() == summary)
        .and_then(Call::manifest)
        .cloned()
        .unwrap_or_else(|| panic!("no call {summary}: {:?}", client.summaries()))
}

fn http() -> ServiceSpec {
    ServiceSpec {
        ports: vec![ServicePort {
            name: "http".into(),
            port: 8080,
            protocol: ServiceProtocol::Tcp,
        }],
    }
}

const DNS_RULE: fn() -> Value = || {
    json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    })
};

#[test]
fn internet_egress_blocks_private_metadata_and_cluster_ranges_and_allows_dns() {
    let mut client = RecordingClient::default();
    let mut input = sandbox("a")
        .with_spec(|s| {
            s.network.allow_cidrs = vec!["10.0.5.0/24".into()];
            s.network.deny_cidrs = vec!["203.0.113.0/24".into(), "10.0.5.128/25".into()];
        })
        .input();
    step(&mut client, &mut input);
    let policy = applied(&client, "apply-network-policy a-network");
    let hash = policy["metadata"]["annotations"]["cubepod.io/spec-hash"].clone();
    assert_eq!(hash.as_str().map(str::len), Some(16), "{policy}");
    assert_eq!(
        policy,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": "a-network", "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/managed-by": "cubepod-controller", "cubepod.io/sandbox": "a"},
                "annotations": {"cubepod.io/spec-hash": hash},
                "ownerReferences": [{
                    "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox", "name": "a",
                    "uid": "uid-a", "controller": true, "blockOwnerDeletion": true
                }],
            },
            "spec": {
                "podSelector": {"matchLabels": {"cubepod.io/sandbox": "a"}},
                "policyTypes": ["Ingress", "Egress"],
                "egress": [
                    {"to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                            "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
                            "100.64.0.0/10", "203.0.113.0/24"
                        ]}},
                        // Each blocked IPv4 range also in its NAT64 and 6to4 forms; `::/64`
                        // holds its mapped and compatible forms; NAT64's local-use prefix whole.
                        {"ipBlock": {"cidr": "::/0", "except": [
                            "64:ff9b::a00:0/104", "2002:a00::/24",
                            "64:ff9b::ac10:0/108", "2002:ac10::/28",
                            "64:ff9b::c0a8:0/112", "2002:c0a8::/32",
                            "64:ff9b::a9fe:0/112", "2002:a9fe::/32",
                            "64:ff9b::6440:0/106", "2002:6440::/26",
                            "fc00::/7", "fe80::/10", "::/64",
                            "64:ff9b::cb00:7100/120", "2002:cb00:7100::/40",
                            "64:ff9b:1::/48"
                        ]}},
                        {"ipBlock": {"cidr": "10.0.5.0/24", "except": ["10.0.5.128/25"]}},
                    ]},
                    DNS_RULE(),
                ],
            },
        })
    );
    // No Service, no ingress rule: nothing may connect in.
    assert!(policy["spec"].get("ingress").is_none());
}

#[test]
fn none_egress_has_no_rule_at_all_and_cluster_egress_no_internet() {
    let mut client = RecordingClient::default();
    let mut input = sandbox("a")
        .with_spec(|s| s.network.egress = EgressMode::None)
        .input();
    step(&mut client, &mut input);
    let none = applied(&client, "apply-network-policy a-network");
    assert_eq!(none["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(none["spec"].get("egress").is_none(), "{none}");

    let mut client = RecordingClient::default();
    let mut input = sandbox("a")
        .with_spec(|s| {
            s.network.egress = EgressMode::Cluster;
            s.network.deny_cidrs = vec!["10.96.0.0/16".into()];
        })
        .input();
    step(&mut client, &mut input);
    let cluster = applied(&client, "apply-network-policy a-network");
    assert_eq!(
        cluster["spec"]["egress"],
        json!([
            {"to": [
                {"namespaceSelector": {}},
                {"ipBlock": {"cidr": "10.244.0.0/16"}},
                {"ipBlock": {"cidr": "10.96.0.0/12", "except": ["10.96.0.0/16"]}},
            ]},
            DNS_RULE(),
        ])
    );
}

#[test]
fn the_network_policy_comes_before_the_pod_and_a_change_patches_it_without_a_restart() {
    let mut client = RecordingClient::default();
    let mut input = sandbox("a").input();
    step(&mut client, &mut input);
    let calls = client.take_summaries();
    let policy = calls
        .iter()
        .position(|c| c == "apply-network-policy a-network");
    let pod = calls.iter().position(|c| c == "ensure-pod a");
    assert!(policy.is_some() && policy < pod, "{calls:?}");
    step(&mut client, &mut input);
    assert!(client.calls.is_empty(), "{:?}", client.summaries());

    let before = client.objects["networkpolicy a-network"].clone();
    input.sandbox.spec.network.egress = EgressMode::None;
    step(&mut client, &mut input);
    assert_eq!(client.take_summaries(), ["apply-network-policy a-network"]);
    let after = &client.objects["networkpolicy a-network"];
    assert_ne!(
        before["metadata"]["annotations"],
        after["metadata"]["annotations"]
    );
    step(&mut client, &mut input);
    assert!(client.calls.is_empty(), "{:?}", client.summaries());
}

#[test]
fn a_service_gets_a_headless_service_an_fqdn_and_ingress_only_to_its_ports() {
    let mut client = RecordingClient::default();
    let mut input = sandbox("a").with_spec(|s| s.service = Some(http())).input();
    input.cluster_network.ingress_from = vec![("app".into(), "gateway".into())];
    let out = step(&mut client, &mut input);
    assert_eq!(
        client.summaries(),
        [
            "ensure-pvc a-workspace",
            "ensure-pvc a-rootfs-g1",
            "ensure-secret a-credentials",
            "apply-network-policy a-network",
            "apply-service a",
            "ensure-pod a"
        ]
    );
    let service = applied(&client, "apply-service a");
    assert_eq!(
        service["spec"],
        json!({
            "clusterIP": "None",
            "selector": {"cubepod.io/sandbox": "a"},
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        })
    );
    assert!(service["metadata"]["annotations"]["cubepod.io/spec-hash"].is_string());
    let policy = applied(&client, "apply-network-policy a-network");
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{
            "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "gateway"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        }])
    );
    assert_eq!(
        out.status.service_fqdn.as_deref(),
        Some("a.cubepod-workloads.svc.cluster.local")
    );
    client.calls.clear();
    step(&mut client, &mut input);
    assert!(client.calls.is_empty(), "{:?}", client.summaries());

    // The Service goes away with spec.service; the policy loses its ingress rule.
    input.sandbox.spec.service = None;
    let out = step(&mut client, &mut input);
    assert_eq!(
        client.take_summaries(),
        ["apply-network-policy a-network", "delete-service a"]
    );
    assert_eq!(out.status.service_fqdn, None);
    assert!(
        client.objects["networkpolicy a-network"]["spec"]
            .get("ingress")
            .is_none()
    );
}

#[test]
fn cleanup_deletes_the_service_and_then_the_network_policy_after_the_pod() {
    let mut client = RecordingClient::default();
    let mut input = sandbox("a").with_spec(|s| s.service = Some(http())).input();
    step(&mut client, &mut input);
    client.calls.clear();
    let deleting = sandbox("a").deleting().build();
    let observed = observe(&client, "a", true);
    let out = cleanup::cleanup(&mut client, NOW, &deleting, &observed).unwrap();
    let calls = client.take_summaries();
    assert!(calls.contains(&"delete-service a".to_string()), "{calls:?}");
    assert!(!calls.contains(&"delete-network-policy a-network".to_string()));
    assert!(!out.done);
    let observed = observe(&client, "a", true);
    let out = cleanup::cleanup(&mut client, NOW, &deleting, &observed).unwrap();
    assert_eq!(client.take_summaries(), ["delete-network-policy a-network"]);
    assert!(!out.done);
    let observed = observe(&client, "a", true);
    let out = cleanup::cleanup(&mut client, NOW, &deleting, &observed).unwrap();
    assert!(out.done);
}

#[test]
fn a_spec_with_a_bad_cidr_or_port_is_refused_with_no_call() {
    type Edit = fn(&mut cubepod_policy_sdk::bindings::SandboxSpec);
    let cases: [(Edit, &str); 3] = [
        (
            |s| s.network.allow_cidrs = vec!["10.0.5.0".into()],
            "allowCIDRs[0]",
        ),
        (
            |s| s.network.deny_cidrs = vec!["1.2.3.4/8".into(), "300.0.0.0/8".into()],
            "denyCIDRs[1]",
        ),
        (
            |s| {
                s.service = Some(ServiceSpec {
                    ports: vec![ServicePort {
                        name: String::new(),
                        port: 0,
                        protocol: ServiceProtocol::Tcp,
                    }],
                })
            },
            "service.ports[0].port",
        ),
    ];
    for (edit, hint) in cases {
        let mut client = RecordingClient::default();
        let input = sandbox("a").with_spec(edit).input();
        let out = reconcile::reconcile(&mut client, &input).unwrap();
        assert!(client.calls.is_empty(), "{hint}: {:?}", client.summaries());
        let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
        assert_eq!(valid.status, ConditionStatus::False, "{hint}");
        assert!(valid.message.contains(hint), "{hint}: {}", valid.message);
    }
}

#[test]
fn the_spec_hash_is_a_digest_of_the_spec_alone() {
    let a = cubepod_policy_sdk::manifest::spec_hash(&json!({"x": [1, 2]}));
    assert_eq!(
        a,
        cubepod_policy_sdk::manifest::spec_hash(&json!({"x": [1, 2]}))
    );
    assert_ne!(
        a,
        cubepod_policy_sdk::manifest::spec_hash(&json!({"x": [2, 1]}))
    );
}

#[test]
fn the_digest_a_converged_reconcile_compares_is_the_one_the_manifest_carries() {
    use cubepod_policy_sdk::manifest::{self, Owner};
    let input = sandbox("dev-hash")
        .with_spec(|spec| {
            spec.service = Some(http());
            spec.network.deny_cidrs = vec!["203.0.113.0/24".into()];
        })
        .input();
    let owner = Owner {
        kind: "Sandbox",
        name: &input.sandbox.name,
        uid: &input.sandbox.uid,
    };
    let spec = &input.sandbox.spec;
    let cluster = &input.cluster_network;
    for egress in [EgressMode::Internet, EgressMode::Cluster, EgressMode::None] {
        let mut spec = spec.clone();
        spec.network.egress = egress;
        let planned = manifest::plan_network_policy(owner, &spec, cluster);
        let hash = planned.spec_hash().to_string();
        let policy = planned.render(NAMESPACE);
        assert_eq!(hash, policy.spec_hash);
        assert_eq!(
            manifest::network_policy(NAMESPACE, owner, &spec, cluster),
            policy
        );
        let written: Value = serde_json::from_str(&policy.manifest).unwrap();
        assert_eq!(
            written["metadata"]["annotations"]["cubepod.io/spec-hash"],
            policy.spec_hash.as_str()
        );
        // The digest of the spec as any reader holds it (a `Value`'s JSON, keys in order):
        // what the policy writes hashes the same as what it is read back as.
        assert_eq!(
            manifest::spec_hash(&written["spec"]),
            policy.spec_hash,
            "{egress:?}"
        );
    }
    let service = manifest::service(NAMESPACE, owner, &http());
    assert_eq!(
        manifest::plan_service(owner, &http()).spec_hash(),
        service.spec_hash
    );
    let written: Value = serde_json::from_str(&service.manifest).unwrap();
    assert_eq!(manifest::spec_hash(&written["spec"]), service.spec_hash);
}
