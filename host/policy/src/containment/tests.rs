//! The fixtures every rule's tests share (the default policy's own manifests, the scope of
//! its call, a check as the guest would send it), and the tests that span rules: the default
//! policy complies with the default rules. Each rule's own tests sit beside it.

use serde_json::Value;

use super::json::Json;
use super::*;
use cubepod_policy_sdk::bindings::{ReconcileInput, ServicePort, ServiceProtocol, ServiceSpec};
use cubepod_policy_sdk::fixtures;
use cubepod_policy_sdk::recording::RecordingClient;

pub(super) const S: &str = "dev-alice";

/// The host's view of the input's network: its spec (the SDK's types, in the host's) and the
/// cluster network it was handed.
pub(super) fn network_of(input: &ReconcileInput) -> SandboxNetwork {
    use crate::runtime::bindings::{ClusterNetwork, EgressMode, ServiceProtocol};
    use cubepod_policy_sdk::bindings as sdk;
    let spec = &input.sandbox.spec;
    let net = &input.cluster_network;
    SandboxNetwork {
        egress: match spec.network.egress {
            sdk::EgressMode::Internet => EgressMode::Internet,
            sdk::EgressMode::None => EgressMode::None,
            sdk::EgressMode::Cluster => EgressMode::Cluster,
        },
        allow_cidrs: spec.network.allow_cidrs.clone(),
        deny_cidrs: spec.network.deny_cidrs.clone(),
        service_ports: spec.service.as_ref().map(|service| {
            let protocol = |p| match p {
                sdk::ServiceProtocol::Tcp => ServiceProtocol::Tcp,
                sdk::ServiceProtocol::Udp => ServiceProtocol::Udp,
                sdk::ServiceProtocol::Sctp => ServiceProtocol::Sctp,
            };
            service
                .ports
                .iter()
                .map(|p| (p.port, protocol(p.protocol)))
                .collect()
        }),
        cluster: ClusterNetwork {
            cluster_cidrs: net.cluster_cidrs.clone(),
            dns_namespace: net.dns_namespace.clone(),
            dns_pod_labels: net.dns_pod_labels.clone(),
            ingress_from: net.ingress_from.clone(),
            cluster_domain: net.cluster_domain.clone(),
        },
    }
}

pub(super) fn scope_of(input: &ReconcileInput) -> SandboxScope {
    let sandbox = &input.sandbox;
    SandboxScope {
        namespace: sandbox.namespace.clone(),
        name: sandbox.name.clone(),
        uid: sandbox.uid.clone(),
        rootfs_generation: sandbox.spec.rootfs_generation,
        storage_class: sandbox.spec.storage_class.clone(),
        // What the source owns is the cache's to say (`ChildLookup::owned_pvcs`); a test
        // that forks sets it.
        fork: input.fork_source.as_ref().map(|f| ForkSource {
            name: f.name.clone(),
            pvcs: Vec::new(),
        }),
        cleanup: false,
        observed: Vec::new(),
        network: Some(network_of(input)),
    }
}

/// The default policy's writes for a new sandbox: (resource, name, manifest).
pub(super) fn writes(input: &ReconcileInput) -> Vec<(Resource, String, Value)> {
    let mut client = RecordingClient::default();
    cubepod_policy_sdk::reconcile::reconcile(&mut client, input).expect("the default reconciles");
    client
        .calls
        .iter()
        .filter_map(|call| {
            let summary = call.summary();
            let (op, name) = summary.split_once(' ')?;
            let resource = Resource::children()
                .find(|r| r.child().is_some_and(|child| child.write_call == op))?;
            Some((resource, name.to_string(), call.manifest()?.clone()))
        })
        .collect()
}

pub(super) fn new_sandbox() -> ReconcileInput {
    fixtures::sandbox(S).input()
}

pub(super) fn manifest_of(resource: Resource, name: &str) -> Value {
    writes(&new_sandbox())
        .into_iter()
        .find(|(r, n, _)| *r == resource && n == name)
        .map(|(_, _, m)| m)
        .unwrap_or_else(|| panic!("the default writes no {resource} {name}"))
}

pub(super) fn pod() -> Value {
    manifest_of(Resource::Pod, S)
}

pub(super) fn check(
    rules: &Containment,
    resource: Resource,
    name: &str,
    object: &Value,
) -> Result<(), Refusal> {
    check_in(rules, &scope_of(&new_sandbox()), resource, name, object)
}

/// `check_write` of `object` as the guest would send it: as text.
pub(super) fn check_in(
    rules: &Containment,
    scope: &SandboxScope,
    resource: Resource,
    name: &str,
    object: &Value,
) -> Result<(), Refusal> {
    let text = object.to_string();
    let tree = Json::parse(&text).expect("a manifest");
    rules.check_write(scope, resource, fixtures::NAMESPACE, name, &tree)
}

/// Refused, by `rule`, naming `field`.
#[track_caller]
pub(super) fn refused(result: Result<(), Refusal>, rule: Rule, field: &str) {
    match result {
        Err(refusal) => {
            assert_eq!(refusal.rule, rule, "{refusal}");
            assert_eq!(refusal.field, field, "{refusal}");
            let message = refusal.to_string();
            assert!(
                message.contains(&format!("rule {}", rule.label())),
                "{message}"
            );
            assert!(message.contains(field), "{message}");
        }
        Ok(()) => panic!("admitted; expected rule {rule} at {field}"),
    }
}

#[track_caller]
pub(super) fn pod_refused(edit: impl FnOnce(&mut Value), rule: Rule, field: &str) {
    let mut manifest = pod();
    edit(&mut manifest);
    refused(
        check(&Containment::default(), Resource::Pod, S, &manifest),
        rule,
        field,
    );
}

/// The sandbox of the NetworkPolicy and Service tests, edited.
pub(super) fn with(edit: impl FnOnce(&mut ReconcileInput)) -> ReconcileInput {
    let mut input = fixtures::sandbox(S).input();
    edit(&mut input);
    input
}

pub(super) fn served(input: &mut ReconcileInput) {
    input.sandbox.spec.service = Some(ServiceSpec {
        ports: vec![ServicePort {
            name: "http".into(),
            port: 8080,
            protocol: ServiceProtocol::Tcp,
        }],
    });
    input.cluster_network.ingress_from = vec![("app".into(), "gateway".into())];
}

pub(super) fn written(input: &ReconcileInput, resource: Resource) -> Value {
    writes(input)
        .into_iter()
        .find(|(r, _, _)| *r == resource)
        .map(|(_, _, m)| m)
        .unwrap_or_else(|| panic!("the default writes no {resource}"))
}

/// The rules with every widenable Pod field allowed: each field's values are still bounded.
pub(super) fn widened() -> Containment {
    Containment {
        extra_pod_fields: WIDENABLE_POD_FIELDS.iter().map(|f| f.to_string()).collect(),
        ..Containment::default()
    }
}

#[track_caller]
pub(super) fn widened_refused(rules: &Containment, edit: impl FnOnce(&mut Value), field: &str) {
    let mut manifest = pod();
    edit(&mut manifest);
    refused(check(rules, Resource::Pod, S, &manifest), Rule::Pod, field);
}

#[track_caller]
pub(super) fn widened_admitted(rules: &Containment, edit: impl FnOnce(&mut Value)) {
    let mut manifest = pod();
    edit(&mut manifest);
    assert_eq!(check(rules, Resource::Pod, S, &manifest), Ok(()));
}

#[test]
fn the_default_policy_complies_with_the_defaults() {
    let rules = Containment::default();
    let scope = scope_of(&new_sandbox());
    let written = writes(&new_sandbox());
    assert_eq!(written.len(), 5, "{written:?}");
    for (resource, name, manifest) in &written {
        assert_eq!(
            check_in(&rules, &scope, *resource, name, manifest),
            Ok(()),
            "{resource} {name}"
        );
    }
}
