//! Each containment rule against the default policy's own manifests, edited one field at a
//! time: the default passes, and each edit is refused with its rule and field.

use serde_json::{Value, json};

use super::json::Json;
use super::*;
use cubepod_policy_sdk::bindings::ReconcileInput;
use cubepod_policy_sdk::fixtures;
use cubepod_policy_sdk::recording::RecordingClient;

const S: &str = "dev-alice";

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
            let resource = match op {
                "ensure-pvc" => Resource::PersistentVolumeClaim,
                "ensure-pod" => Resource::Pod,
                "ensure-secret" => Resource::Secret,
                "apply-network-policy" => Resource::NetworkPolicy,
                "apply-service" => Resource::Service,
                _ => return None,
            };
            Some((resource, name.to_string(), call.manifest()?.clone()))
        })
        .collect()
}

fn new_sandbox() -> ReconcileInput {
    fixtures::sandbox(S).input()
}

fn manifest_of(resource: Resource, name: &str) -> Value {
    writes(&new_sandbox())
        .into_iter()
        .find(|(r, n, _)| *r == resource && n == name)
        .map(|(_, _, m)| m)
        .unwrap_or_else(|| panic!("the default writes no {resource} {name}"))
}

fn pod() -> Value {
    manifest_of(Resource::Pod, S)
}

fn check(
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
fn pod_refused(edit: impl FnOnce(&mut Value), rule: Rule, field: &str) {
    let mut manifest = pod();
    edit(&mut manifest);
    refused(
        check(&Containment::default(), Resource::Pod, S, &manifest),
        rule,
        field,
    );
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

/// The default policy's PVC writes for a fork of `src` whose status names `rootfs` and
/// `workspace`, and the scope of the call, the source owning `owned`.
fn fork_writes(
    rootfs: &str,
    workspace: &str,
    owned: &[&str],
) -> (SandboxScope, Vec<(Resource, String, Value)>) {
    let mut input = fixtures::sandbox("fork").forked_from("src").input();
    input.fork_source = Some(
        fixtures::sandbox("src")
            .with_status(|s| {
                s.rootfs_pvc = Some(rootfs.into());
                s.workspace_pvc = Some(workspace.into());
            })
            .build(),
    );
    let mut scope = scope_of(&input);
    if let Some(fork) = &mut scope.fork {
        fork.pvcs = owned.iter().map(|p| p.to_string()).collect();
    }
    let pvcs = writes(&input)
        .into_iter()
        .filter(|(r, _, _)| *r == Resource::PersistentVolumeClaim)
        .collect();
    (scope, pvcs)
}

#[test]
fn a_fork_may_clone_only_the_pvcs_its_source_owns() {
    let rules = Containment::default();
    let owned = ["src-rootfs-g1", "src-rootfs-g2", "src-workspace"];
    let (scope, pvcs) = fork_writes("src-rootfs-g1", "src-workspace", &owned);
    assert_eq!(pvcs.len(), 2);
    for (resource, name, manifest) in &pvcs {
        assert_eq!(check_in(&rules, &scope, *resource, name, manifest), Ok(()));
        let with_source = |source: &str| {
            let mut edited = manifest.clone();
            edited["spec"]["dataSource"]["name"] = json!(source);
            check_in(&rules, &scope, *resource, name, &edited)
        };
        let workspace = name.ends_with("workspace");
        // Any generation of the source's rootfs it owns: a reset of it may be under way.
        if !workspace {
            assert_eq!(with_source("src-rootfs-g2"), Ok(()));
        }
        // The other role's volume, a generation it does not own, a second spelling of one
        // it does, or a stranger's: not a source.
        for source in [
            if workspace {
                "src-rootfs-g1"
            } else {
                "src-workspace"
            },
            "src-rootfs-g3",
            "src-rootfs-g01",
            "victim-workspace",
        ] {
            refused(with_source(source), Rule::Pvc, "spec.dataSource.name");
        }
    }
}

#[test]
fn a_fork_source_status_naming_another_sandboxs_volumes_gives_no_clone_of_them() {
    let rules = Containment::default();
    // The source's status is the policy's to write: it names the victim's volumes, which the
    // source does not own.
    let owned = ["src-rootfs-g1", "src-workspace"];
    let (scope, pvcs) = fork_writes("victim-rootfs-g1", "victim-workspace", &owned);
    assert_eq!(pvcs.len(), 2);
    for (resource, name, manifest) in &pvcs {
        let reason = match check_in(&rules, &scope, *resource, name, manifest) {
            Err(refusal) => refusal.to_string(),
            Ok(()) => panic!("{name}: a clone of the victim's volume admitted"),
        };
        refused(
            check_in(&rules, &scope, *resource, name, manifest),
            Rule::Pvc,
            "spec.dataSource.name",
        );
        // The refusal names what the source does own.
        let own = if name.ends_with("workspace") {
            "\"src-workspace\""
        } else {
            "\"src-rootfs-g1\""
        };
        assert!(reason.contains(own), "{reason}");
    }
    // A source the cache holds nothing of (or no cache at all): nothing to clone.
    let (scope, pvcs) = fork_writes("src-rootfs-g1", "src-workspace", &[]);
    for (resource, name, manifest) in &pvcs {
        refused(
            check_in(&rules, &scope, *resource, name, manifest),
            Rule::Pvc,
            "spec.dataSource.name",
        );
    }
}

#[test]
fn a_rootfs_pvc_only_of_the_current_generation_and_deletes_of_no_later_one() {
    let rules = Containment::default();
    let mut input = new_sandbox();
    input.sandbox.spec.rootfs_generation = 3;
    let scope = scope_of(&input);
    let (_, _, current) = writes(&input)
        .into_iter()
        .find(|(_, name, _)| name == "dev-alice-rootfs-g3")
        .expect("the default writes the current rootfs PVC");
    let pvc = Resource::PersistentVolumeClaim;
    assert_eq!(
        check_in(&rules, &scope, pvc, "dev-alice-rootfs-g3", &current),
        Ok(())
    );
    for generation in [1, 2, 4, 99] {
        let name = format!("dev-alice-rootfs-g{generation}");
        let mut other = current.clone();
        other["metadata"]["name"] = json!(name);
        other["metadata"]["labels"]["cubepod.io/rootfs-generation"] = json!(generation.to_string());
        refused(
            check_in(&rules, &scope, pvc, &name, &other),
            Rule::Scope,
            "metadata.name",
        );
    }
    let reason = match check_in(&rules, &scope, pvc, "dev-alice-rootfs-g4", &{
        let mut other = current.clone();
        other["metadata"]["name"] = json!("dev-alice-rootfs-g4");
        other
    }) {
        Err(refusal) => refusal.reason,
        Ok(()) => panic!("admitted"),
    };
    assert!(
        reason.contains("spec.rootfsGeneration: 3") && reason.contains("\"dev-alice-rootfs-g3\""),
        "{reason}"
    );
    // Deletes: the older generations and the current one; a later one only in cleanup.
    let delete = |scope: &SandboxScope, generation: u32| {
        rules
            .check_delete(
                scope,
                pvc,
                fixtures::NAMESPACE,
                &format!("dev-alice-rootfs-g{generation}"),
            )
            .map(drop)
    };
    for generation in [1, 2, 3] {
        assert_eq!(delete(&scope, generation), Ok(()), "g{generation}");
    }
    refused(delete(&scope, 4), Rule::Scope, "name");
    let cleanup = SandboxScope {
        cleanup: true,
        ..scope.clone()
    };
    assert_eq!(delete(&cleanup, 4), Ok(()));
    // Cleanup writes no more than a reconcile does.
    let mut later = current.clone();
    later["metadata"]["name"] = json!("dev-alice-rootfs-g4");
    refused(
        check_in(&rules, &cleanup, pvc, "dev-alice-rootfs-g4", &later),
        Rule::Scope,
        "metadata.name",
    );
}

#[test]
fn a_sandbox_that_is_not_a_fork_clones_nothing() {
    let mut clone = manifest_of(Resource::PersistentVolumeClaim, "dev-alice-workspace");
    clone["spec"]["dataSource"] = json!({"kind": "PersistentVolumeClaim", "name": "bob-workspace"});
    refused(
        check(
            &Containment::default(),
            Resource::PersistentVolumeClaim,
            "dev-alice-workspace",
            &clone,
        ),
        Rule::Pvc,
        "spec.dataSource",
    );
}

#[test]
fn scope_only_the_sandboxs_own_children() {
    let rules = Containment::default();
    // Another sandbox's child names, and names no child has.
    for (resource, name) in [
        (Resource::PersistentVolumeClaim, "bob-workspace"),
        (Resource::Secret, "bob-credentials"),
        (Resource::Pod, "bob"),
        (Resource::Pod, "dev-alice-debug"),
        (Resource::PersistentVolumeClaim, "dev-alice-rootfs-g01"),
        (Resource::Secret, "dev-alice-token"),
    ] {
        let mut manifest = match resource {
            Resource::Pod => pod(),
            Resource::Secret => manifest_of(resource, "dev-alice-credentials"),
            _ => manifest_of(resource, "dev-alice-workspace"),
        };
        manifest["metadata"]["name"] = json!(name);
        refused(
            check(&rules, resource, name, &manifest),
            Rule::Scope,
            "metadata.name",
        );
        let scope = scope_of(&new_sandbox());
        refused(
            rules
                .check_delete(&scope, resource, fixtures::NAMESPACE, name)
                .map(drop),
            Rule::Scope,
            "name",
        );
    }
    let mut scope = scope_of(&new_sandbox());
    scope.rootfs_generation = 7;
    assert_eq!(
        rules.check_delete(
            &scope,
            Resource::PersistentVolumeClaim,
            fixtures::NAMESPACE,
            "dev-alice-rootfs-g7"
        ),
        Ok(ChildRole::Rootfs(7))
    );
    refused(
        rules
            .check_delete(&scope, Resource::Pod, "other-namespace", S)
            .map(drop),
        Rule::Scope,
        "namespace",
    );
    // Labels: the sandbox's own, and no other that a selector could match.
    pod_refused(
        |p| p["metadata"]["labels"]["cubepod.io/sandbox"] = json!("bob"),
        Rule::Scope,
        "metadata.labels.cubepod.io/sandbox",
    );
    pod_refused(
        |p| p["metadata"]["labels"]["app"] = json!("payments"),
        Rule::Scope,
        "metadata.labels.app",
    );
    pod_refused(
        |p| {
            p["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove("app.kubernetes.io/managed-by");
        },
        Rule::Scope,
        "metadata.labels.app.kubernetes.io/managed-by",
    );
    pod_refused(
        |p| {
            p["metadata"]["annotations"] = json!({"io.katacontainers.config.hypervisor.path": "/x"})
        },
        Rule::Scope,
        "metadata.annotations",
    );
    // Exactly one owner reference: the controller reference to the sandbox's uid.
    pod_refused(
        |p| p["metadata"]["ownerReferences"][0]["uid"] = json!("uid-bob"),
        Rule::Scope,
        "metadata.ownerReferences[0]",
    );
    pod_refused(
        |p| p["metadata"]["ownerReferences"][0]["controller"] = json!(false),
        Rule::Scope,
        "metadata.ownerReferences[0]",
    );
    pod_refused(
        |p| {
            let first = p["metadata"]["ownerReferences"][0].clone();
            p["metadata"]["ownerReferences"] = json!([first.clone(), first]);
        },
        Rule::Scope,
        "metadata.ownerReferences",
    );
    pod_refused(
        |p| {
            p["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("ownerReferences");
        },
        Rule::Scope,
        "metadata.ownerReferences",
    );
}

#[test]
fn pod_labels_and_annotations_only_where_the_operator_allows() {
    // A team and a cost center, from the Sandbox's labels: refused by default, as any label
    // not the host's is.
    for (key, value) in [("team", "payments"), ("example.com/cost-center", "cc-42")] {
        pod_refused(
            |p| p["metadata"]["labels"][key] = json!(value),
            Rule::Scope,
            &format!("metadata.labels.{key}"),
        );
    }
    let rules = Containment {
        pod_labels: KeyAllowlist::new(KeyKind::Label, ["team", "example.com/"]),
        pod_annotations: KeyAllowlist::new(KeyKind::Annotation, ["example.com/"]),
        ..Containment::default()
    };
    let mut labelled = pod();
    labelled["metadata"]["labels"]["team"] = json!("payments");
    labelled["metadata"]["labels"]["example.com/cost-center"] = json!("cc-42");
    labelled["metadata"]["annotations"] = json!({"example.com/owner": "alice"});
    assert_eq!(check(&rules, Resource::Pod, S, &labelled), Ok(()));

    // A key outside the lists, with its rule and field as without them, and the flag named.
    let edited = |edit: &dyn Fn(&mut Value)| {
        let mut manifest = labelled.clone();
        edit(&mut manifest);
        check(&rules, Resource::Pod, S, &manifest)
    };
    let result = edited(&|p| p["metadata"]["labels"]["app"] = json!("frontend"));
    refused(result.clone(), Rule::Scope, "metadata.labels.app");
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("--allow-pod-label allows (\"example.com/\", \"team\")"),
        "{message}"
    );
    refused(
        edited(&|p| p["metadata"]["labels"]["example.com.evil/x"] = json!("y")),
        Rule::Scope,
        "metadata.labels.example.com.evil/x",
    );
    refused(
        edited(&|p| {
            p["metadata"]["annotations"]["io.katacontainers.config.hypervisor.path"] = json!("/x")
        }),
        Rule::Scope,
        "metadata.annotations.io.katacontainers.config.hypervisor.path",
    );
    refused(
        edited(&|p| p["metadata"]["labels"]["team"] = json!(7)),
        Rule::Scope,
        "metadata.labels.team",
    );

    // The host's keys stay the host's, whatever a list holds: its values are checked as ever,
    // and another key under cubepod.io/ is refused as no flag's.
    let wide = Containment {
        pod_labels: KeyAllowlist::new(KeyKind::Label, ["cubepod.io/", "app.kubernetes.io/"]),
        pod_annotations: KeyAllowlist::new(
            KeyKind::Annotation,
            ["cubepod.io/", "io.katacontainers.config.hypervisor.path"],
        ),
        ..Containment::default()
    };
    let wide_edit = |edit: &dyn Fn(&mut Value)| {
        let mut manifest = pod();
        edit(&mut manifest);
        check(&wide, Resource::Pod, S, &manifest)
    };
    let result = wide_edit(&|p| p["metadata"]["labels"]["cubepod.io/pool"] = json!("p"));
    refused(
        result.clone(),
        Rule::Scope,
        "metadata.labels.cubepod.io/pool",
    );
    assert!(
        result
            .unwrap_err()
            .to_string()
            .contains("no flag widens it"),
        "the refusal says why"
    );
    refused(
        wide_edit(&|p| p["metadata"]["labels"]["cubepod.io/sandbox"] = json!("bob")),
        Rule::Scope,
        "metadata.labels.cubepod.io/sandbox",
    );
    refused(
        wide_edit(&|p| {
            p["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("someone-else")
        }),
        Rule::Scope,
        "metadata.labels.app.kubernetes.io/managed-by",
    );
    refused(
        wide_edit(&|p| p["metadata"]["annotations"] = json!({"cubepod.io/spec-hash": "1"})),
        Rule::Scope,
        "metadata.annotations.cubepod.io/spec-hash",
    );
    refused(
        wide_edit(&|p| {
            p["metadata"]["annotations"] = json!({"io.katacontainers.config.hypervisor.path": "/x"})
        }),
        Rule::Scope,
        "metadata.annotations.io.katacontainers.config.hypervisor.path",
    );
    assert_eq!(
        wide_edit(&|p| p["metadata"]["labels"]["app.kubernetes.io/part-of"] = json!("ci")),
        Ok(())
    );

    // Only the Pod: the other children carry the host's labels alone, whatever the flags.
    for (resource, name) in [
        (Resource::PersistentVolumeClaim, "dev-alice-workspace"),
        (Resource::Secret, "dev-alice-credentials"),
        (Resource::NetworkPolicy, "dev-alice-network"),
    ] {
        let mut manifest = manifest_of(resource, name);
        manifest["metadata"]["labels"]["team"] = json!("payments");
        refused(
            check(&rules, resource, name, &manifest),
            Rule::Scope,
            "metadata.labels.team",
        );
    }
    let mut network = manifest_of(Resource::NetworkPolicy, "dev-alice-network");
    network["metadata"]["annotations"]["example.com/owner"] = json!("alice");
    refused(
        check(
            &rules,
            Resource::NetworkPolicy,
            "dev-alice-network",
            &network,
        ),
        Rule::Scope,
        "metadata.annotations.example.com/owner",
    );
}

#[test]
fn pod_runtime_class_service_account_and_node() {
    pod_refused(
        |p| {
            p["spec"]
                .as_object_mut()
                .unwrap()
                .remove("runtimeClassName");
        },
        Rule::Pod,
        "spec.runtimeClassName",
    );
    pod_refused(
        |p| p["spec"]["runtimeClassName"] = json!("runc"),
        Rule::Pod,
        "spec.runtimeClassName",
    );
    pod_refused(
        |p| p["spec"]["nodeName"] = json!("node-1"),
        Rule::Pod,
        "spec.nodeName",
    );
    pod_refused(
        |p| p["spec"]["automountServiceAccountToken"] = json!(true),
        Rule::Pod,
        "spec.automountServiceAccountToken",
    );
    pod_refused(
        |p| p["spec"]["serviceAccountName"] = json!("cubepod-controller"),
        Rule::Pod,
        "spec.serviceAccountName",
    );
    let rules = Containment {
        runtime_classes: ["kata-clh".to_string()].into(),
        service_account: "sandbox".into(),
        ..Containment::default()
    };
    let mut manifest = pod();
    manifest["spec"]["runtimeClassName"] = json!("kata-clh");
    refused(
        check(&rules, Resource::Pod, S, &manifest),
        Rule::Pod,
        "spec.serviceAccountName",
    );
    manifest["spec"]["serviceAccountName"] = json!("sandbox");
    assert_eq!(check(&rules, Resource::Pod, S, &manifest), Ok(()));
}

#[test]
fn pod_fields_outside_the_profile_are_refused_unless_widened() {
    for field in [
        "affinity",
        "tolerations",
        "nodeSelector",
        "priorityClassName",
        "overhead",
        "resourceClaims",
    ] {
        pod_refused(
            |p| p["spec"][field] = json!({}),
            Rule::Pod,
            &format!("spec.{field}"),
        );
    }
    pod_refused(
        |p| p["spec"]["containers"][0]["resizePolicy"] = json!([]),
        Rule::Pod,
        "spec.containers[0].resizePolicy",
    );
    pod_refused(
        |p| p["spec"]["ephemeralContainers"] = json!([]),
        Rule::Pod,
        "spec.ephemeralContainers",
    );
    let rules = Containment {
        extra_pod_fields: ["affinity".to_string(), "tolerations".to_string()].into(),
        ..Containment::default()
    };
    let mut manifest = pod();
    manifest["spec"]["affinity"] = json!({"nodeAffinity": {}});
    manifest["spec"]["tolerations"] = json!([{"key": "kata", "operator": "Exists"}]);
    assert_eq!(check(&rules, Resource::Pod, S, &manifest), Ok(()));
    manifest["spec"]["nodeSelector"] = json!({});
    refused(
        check(&rules, Resource::Pod, S, &manifest),
        Rule::Pod,
        "spec.nodeSelector",
    );
}

#[test]
fn pod_security_standards_baseline() {
    let c = "spec.containers[0]";
    for (key, value) in [("hostNetwork", true), ("hostPID", true), ("hostIPC", true)] {
        pod_refused(
            |p| p["spec"][key] = json!(value),
            Rule::Pod,
            &format!("spec.{key}"),
        );
    }
    let mut ok = pod();
    ok["spec"]["hostNetwork"] = json!(false);
    assert_eq!(
        check(&Containment::default(), Resource::Pod, S, &ok),
        Ok(())
    );
    let context =
        |value: Value| move |p: &mut Value| p["spec"]["containers"][0]["securityContext"] = value;
    pod_refused(
        context(json!({"privileged": true})),
        Rule::Pod,
        &format!("{c}.securityContext.privileged"),
    );
    pod_refused(
        context(json!({"capabilities": {"add": ["SYS_ADMIN"]}})),
        Rule::Pod,
        &format!("{c}.securityContext.capabilities.add[0]"),
    );
    pod_refused(
        context(json!({"procMount": "Unmasked"})),
        Rule::Pod,
        &format!("{c}.securityContext.procMount"),
    );
    pod_refused(
        context(json!({"seccompProfile": {"type": "Unconfined"}})),
        Rule::Pod,
        &format!("{c}.securityContext.seccompProfile.type"),
    );
    pod_refused(
        context(json!({"appArmorProfile": {"type": "Unconfined"}})),
        Rule::Pod,
        &format!("{c}.securityContext.appArmorProfile.type"),
    );
    pod_refused(
        context(json!({"seLinuxOptions": {"type": "spc_t"}})),
        Rule::Pod,
        &format!("{c}.securityContext.seLinuxOptions.type"),
    );
    pod_refused(
        context(json!({"seLinuxOptions": {"user": "system_u"}})),
        Rule::Pod,
        &format!("{c}.securityContext.seLinuxOptions.user"),
    );
    pod_refused(
        context(json!({"windowsOptions": {"hostProcess": true}})),
        Rule::Pod,
        &format!("{c}.securityContext.windowsOptions.hostProcess"),
    );
    pod_refused(
        |p| {
            p["spec"]["securityContext"] =
                json!({"sysctls": [{"name": "kernel.msgmax", "value": "1"}]})
        },
        Rule::Pod,
        "spec.securityContext.sysctls[0].name",
    );
    pod_refused(
        |p| p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}]),
        Rule::Pod,
        &format!("{c}.ports[0].hostPort"),
    );
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["livenessProbe"] =
                json!({"httpGet": {"port": 80, "host": "10.0.0.1"}})
        },
        Rule::Pod,
        &format!("{c}.livenessProbe.httpGet.host"),
    );
    // What baseline allows: the listed capabilities, safe sysctls, confined profiles.
    let mut ok = pod();
    ok["spec"]["containers"][0]["securityContext"] = json!({
        "capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["NET_RAW"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"},
        "privileged": false,
    });
    ok["spec"]["securityContext"] =
        json!({"sysctls": [{"name": "net.ipv4.ping_group_range", "value": "0 1"}]});
    assert_eq!(
        check(&Containment::default(), Resource::Pod, S, &ok),
        Ok(())
    );
}

#[test]
fn pod_security_standards_restricted() {
    let rules = Containment {
        pod_security: PodSecurity::Restricted,
        ..Containment::default()
    };
    let c = "spec.containers[0].securityContext";
    // The default policy's Pod sets none of what restricted requires.
    refused(
        check(&rules, Resource::Pod, S, &pod()),
        Rule::Pod,
        "spec.containers[0].securityContext.allowPrivilegeEscalation",
    );
    let hardened = |p: &mut Value| {
        let context = json!({
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
        });
        p["spec"]["securityContext"] =
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
        p["spec"]["containers"][0]["securityContext"] = context.clone();
        p["spec"]["initContainers"][0]["securityContext"] = context;
    };
    let mut ok = pod();
    hardened(&mut ok);
    assert_eq!(check(&rules, Resource::Pod, S, &ok), Ok(()));
    for (edit, field) in [
        (
            json!({"allowPrivilegeEscalation": true, "capabilities": {"drop": ["ALL"]}}),
            format!("{c}.allowPrivilegeEscalation"),
        ),
        (
            json!({"allowPrivilegeEscalation": false}),
            format!("{c}.capabilities.drop"),
        ),
        (
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}),
            format!("{c}.capabilities.add[0]"),
        ),
        (
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}),
            format!("{c}.runAsUser"),
        ),
    ] {
        let mut manifest = ok.clone();
        manifest["spec"]["containers"][0]["securityContext"] = edit;
        refused(
            check(&rules, Resource::Pod, S, &manifest),
            Rule::Pod,
            &field,
        );
    }
    let mut manifest = ok.clone();
    manifest["spec"]["securityContext"] = json!({});
    refused(
        check(&rules, Resource::Pod, S, &manifest),
        Rule::Pod,
        "spec.containers[0].securityContext.runAsNonRoot",
    );
}

#[test]
fn pod_volumes_and_references() {
    pod_refused(
        |p| p["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] = json!("bob-workspace"),
        Rule::Pod,
        "spec.volumes[1].persistentVolumeClaim.claimName",
    );
    // An older rootfs generation is not the current one.
    pod_refused(
        |p| {
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] =
                json!("dev-alice-rootfs-g0")
        },
        Rule::Pod,
        "spec.volumes[0].persistentVolumeClaim.claimName",
    );
    pod_refused(
        |p| p["spec"]["volumes"][0] = json!({"name": "root", "hostPath": {"path": "/"}}),
        Rule::Pod,
        "spec.volumes[0].hostPath",
    );
    pod_refused(
        |p| p["spec"]["volumes"][0] = json!({"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}),
        Rule::Pod,
        "spec.volumes[0].projected.sources[0].serviceAccountToken",
    );
    pod_refused(
        |p| {
            p["spec"]["volumes"][0] =
                json!({"name": "s", "secret": {"secretName": "bob-credentials"}})
        },
        Rule::Pod,
        "spec.volumes[0].secret.secretName",
    );
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["env"][3]["valueFrom"]["secretKeyRef"]["name"] =
                json!("bob-credentials")
        },
        Rule::Pod,
        "spec.containers[0].env[3].valueFrom.secretKeyRef.name",
    );
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["envFrom"] =
                json!([{"configMapRef": {"name": "kube-root-ca.crt"}}])
        },
        Rule::Pod,
        "spec.containers[0].envFrom[0].configMapRef.name",
    );
    pod_refused(
        |p| p["spec"]["imagePullSecrets"] = json!([{"name": "registry"}]),
        Rule::Pod,
        "spec.imagePullSecrets[0].name",
    );
    pod_refused(
        |p| p["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}}),
        Rule::Pod,
        "spec.containers[0].resources.limits.nvidia.com/gpu",
    );
    // What the operator names by flag is allowed; emptyDir and downwardAPI always are.
    let rules = Containment {
        secret_refs: ["registry".to_string()].into(),
        config_map_refs: ["kube-root-ca.crt".to_string()].into(),
        ..Containment::default()
    };
    let mut ok = pod();
    ok["spec"]["imagePullSecrets"] = json!([{"name": "registry"}]);
    ok["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "kube-root-ca.crt"}}]);
    ok["spec"]["volumes"].as_array_mut().unwrap().extend([
        json!({"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}),
        json!({"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}),
        json!({"name": "creds", "secret": {"secretName": "dev-alice-credentials"}}),
    ]);
    assert_eq!(check(&rules, Resource::Pod, S, &ok), Ok(()));
}

#[test]
fn pvc_profile() {
    let name = "dev-alice-workspace";
    let refused_pvc = |edit: &dyn Fn(&mut Value), field: &str| {
        let mut manifest = manifest_of(Resource::PersistentVolumeClaim, name);
        edit(&mut manifest);
        refused(
            check(
                &Containment::default(),
                Resource::PersistentVolumeClaim,
                name,
                &manifest,
            ),
            Rule::Pvc,
            field,
        );
    };
    refused_pvc(
        &|m| m["spec"]["volumeMode"] = json!("Filesystem"),
        "spec.volumeMode",
    );
    refused_pvc(
        &|m| m["spec"]["volumeName"] = json!("pv-of-bob"),
        "spec.volumeName",
    );
    refused_pvc(
        &|m| m["spec"]["accessModes"] = json!(["ReadWriteMany"]),
        "spec.accessModes[0]",
    );
    refused_pvc(
        &|m| m["spec"]["resources"]["requests"]["storage"] = json!("2Ti"),
        "spec.resources.requests.storage",
    );
    refused_pvc(
        &|m| m["spec"]["resources"]["requests"]["storage"] = json!("lots"),
        "spec.resources.requests.storage",
    );
    refused_pvc(
        &|m| m["spec"]["storageClassName"] = json!("fast"),
        "spec.storageClassName",
    );
    refused_pvc(
        &|m| m["spec"]["dataSourceRef"] = json!({}),
        "spec.dataSourceRef",
    );
    let mut ok = manifest_of(Resource::PersistentVolumeClaim, name);
    ok["spec"]["resources"]["requests"]["storage"] = json!("1Ti");
    assert_eq!(
        check(
            &Containment::default(),
            Resource::PersistentVolumeClaim,
            name,
            &ok
        ),
        Ok(())
    );
}

#[test]
fn secret_profile() {
    let name = "dev-alice-credentials";
    let base = manifest_of(Resource::Secret, name);
    let rules = Containment::default();
    let mut token = base.clone();
    token["type"] = json!("kubernetes.io/service-account-token");
    refused(
        check(&rules, Resource::Secret, name, &token),
        Rule::Secret,
        "type",
    );
    let mut big = base.clone();
    big["stringData"]["token"] = json!("x".repeat(MAX_SECRET_BYTES));
    refused(
        check(&rules, Resource::Secret, name, &big),
        Rule::Secret,
        "data",
    );
    let mut data = base;
    data["data"] = json!({"extra": "eA=="});
    assert_eq!(check(&rules, Resource::Secret, name, &data), Ok(()));
}

#[test]
fn a_manifest_past_its_budget_is_refused_before_parsing() {
    let rules = Containment {
        max_manifest_bytes: 1024,
        ..Containment::default()
    };
    let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(2048));
    let refusal = rules.check_manifest_size(&"Pod ns/a", &huge).unwrap_err();
    assert_eq!(
        (refusal.rule, refusal.field.as_str()),
        (Rule::Budget, "manifest")
    );
    // Not even valid JSON: the size is checked first.
    assert!(rules.check_manifest_size(&"Pod ns/a", "{").is_ok());
    assert!(clip(&huge, KEPT_PREFIX).len() < KEPT_PREFIX + 32);
}

/// The rules with every widenable Pod field allowed: each field's values are still bounded.
fn widened() -> Containment {
    Containment {
        extra_pod_fields: WIDENABLE_POD_FIELDS.iter().map(|f| f.to_string()).collect(),
        ..Containment::default()
    }
}

#[track_caller]
fn widened_refused(rules: &Containment, edit: impl FnOnce(&mut Value), field: &str) {
    let mut manifest = pod();
    edit(&mut manifest);
    refused(check(rules, Resource::Pod, S, &manifest), Rule::Pod, field);
}

#[track_caller]
fn widened_admitted(rules: &Containment, edit: impl FnOnce(&mut Value)) {
    let mut manifest = pod();
    edit(&mut manifest);
    assert_eq!(check(rules, Resource::Pod, S, &manifest), Ok(()));
}

#[test]
fn priority_classes_and_schedulers_only_from_the_operators_lists() {
    let rules = widened();
    for class in ["system-node-critical", "system-cluster-critical", "high"] {
        widened_refused(
            &rules,
            |p| p["spec"]["priorityClassName"] = json!(class),
            "spec.priorityClassName",
        );
    }
    let listed = Containment {
        priority_classes: ["sandbox-low".to_string()].into(),
        ..widened()
    };
    widened_admitted(&listed, |p| {
        p["spec"]["priorityClassName"] = json!("sandbox-low")
    });
    widened_refused(
        &listed,
        |p| p["spec"]["priorityClassName"] = json!("system-node-critical"),
        "spec.priorityClassName",
    );
    widened_admitted(&rules, |p| {
        p["spec"]["schedulerName"] = json!("default-scheduler")
    });
    widened_refused(
        &rules,
        |p| p["spec"]["schedulerName"] = json!("my-scheduler"),
        "spec.schedulerName",
    );
}

#[test]
fn tolerations_name_a_taint_and_not_the_control_planes() {
    let rules = widened();
    // Of every taint: no key, or an empty one.
    for toleration in [
        json!({"operator": "Exists"}),
        json!({"key": "", "operator": "Exists"}),
    ] {
        widened_refused(
            &rules,
            |p| p["spec"]["tolerations"] = json!([toleration]),
            "spec.tolerations[0].key",
        );
    }
    for key in [
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
        "node.kubernetes.io/unschedulable",
    ] {
        widened_refused(
            &rules,
            |p| {
                p["spec"]["tolerations"] = json!([
                    {"key": "kata", "operator": "Exists"},
                    {"key": key, "operator": "Exists", "effect": "NoSchedule"},
                ])
            },
            "spec.tolerations[1].key",
        );
    }
    widened_refused(
        &rules,
        |p| p["spec"]["tolerations"] = json!([{"key": "kata", "operator": "Matches"}]),
        "spec.tolerations[0].operator",
    );
    // The guarded example's toleration, and the not-ready one Kubernetes adds to every Pod.
    widened_admitted(&rules, |p| {
        p["spec"]["tolerations"] = json!([
            {"key": "sandbox.cubepod.io/dedicated", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ])
    });
    let control_plane = Containment {
        node_keys: ["node-role.kubernetes.io/control-plane".to_string()].into(),
        ..widened()
    };
    widened_admitted(&control_plane, |p| {
        p["spec"]["tolerations"] =
            json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]);
        p["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""});
    });
    widened_refused(
        &control_plane,
        |p| p["spec"]["tolerations"] = json!([{"operator": "Exists"}]),
        "spec.tolerations[0].key",
    );
}

#[test]
fn node_selection_not_of_the_control_plane_nor_a_node_by_name() {
    let rules = widened();
    widened_refused(
        &rules,
        |p| p["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""}),
        "spec.nodeSelector.node-role.kubernetes.io/control-plane",
    );
    widened_refused(
        &rules,
        |p| p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "node-7"}),
        "spec.nodeSelector.kubernetes.io/hostname",
    );
    widened_admitted(&rules, |p| {
        p["spec"]["nodeSelector"] = json!({"katacontainers.io/kata-runtime": "true"})
    });
    let required = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    for (operator, selects) in [
        ("In", true),
        ("Exists", true),
        ("Gt", true),
        ("NotIn", false),
        ("DoesNotExist", false),
    ] {
        let edit = |p: &mut Value| {
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "katacontainers.io/kata-runtime", "operator": "In", "values": ["true"]},
                        {"key": "node-role.kubernetes.io/master", "operator": operator, "values": []},
                    ]},
                ]},
            }})
        };
        if selects {
            widened_refused(
                &rules,
                edit,
                &format!("{required}.nodeSelectorTerms[0].matchExpressions[1].key"),
            );
        } else {
            widened_admitted(&rules, edit);
        }
    }
    // A node by name, as a field, and a preference as a requirement.
    widened_refused(
        &rules,
        |p| {
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cp-1"]}]},
                ]},
            }})
        },
        &format!("{required}.nodeSelectorTerms[0].matchFields[0].key"),
    );
    widened_refused(
        &rules,
        |p| {
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference":
                    {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}}],
            }})
        },
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]\
         .preference.matchExpressions[0].key",
    );
}

#[test]
fn pod_affinity_and_spreading_only_over_the_sandboxs_own_pods() {
    let rules = widened();
    let term = |selector: Value| json!({"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"});
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    for kind in ["podAffinity", "podAntiAffinity"] {
        for selector in [
            json!({"matchLabels": {"cubepod.io/sandbox": "victim"}}),
            json!({"matchLabels": {"app.kubernetes.io/managed-by": "cubepod-controller"}}),
            json!({"matchExpressions": [{"key": "cubepod.io/sandbox", "operator": "Exists"}]}),
            json!({"matchExpressions": [
                {"key": "cubepod.io/sandbox", "operator": "In", "values": [S, "victim"]}]}),
            json!({}),
        ] {
            widened_refused(
                &rules,
                |p| p["spec"]["affinity"] = json!({kind: {required: [term(selector)]}}),
                &format!("spec.affinity.{kind}.{required}[0].labelSelector"),
            );
        }
        // S's own Pods: in either form, narrowed further or not.
        for selector in [
            json!({"matchLabels": {"cubepod.io/sandbox": S}}),
            json!({"matchLabels": {"cubepod.io/sandbox": S, "team": "a"}}),
            json!({"matchExpressions": [
                {"key": "cubepod.io/sandbox", "operator": "In", "values": [S]}]}),
        ] {
            widened_admitted(&rules, |p| {
                p["spec"]["affinity"] = json!({kind: {
                    required: [term(selector.clone())],
                    "preferredDuringSchedulingIgnoredDuringExecution":
                        [{"weight": 1, "podAffinityTerm": term(selector)}],
                }})
            });
        }
        // Another namespace's Pods, by name or by selector.
        let mut other = term(json!({"matchLabels": {"cubepod.io/sandbox": S}}));
        other["namespaces"] = json!(["kube-system"]);
        widened_refused(
            &rules,
            |p| p["spec"]["affinity"] = json!({kind: {required: [other]}}),
            &format!("spec.affinity.{kind}.{required}[0].namespaces[0]"),
        );
        let mut every = term(json!({"matchLabels": {"cubepod.io/sandbox": S}}));
        every["namespaceSelector"] = json!({});
        widened_refused(
            &rules,
            |p| p["spec"]["affinity"] = json!({kind: {required: [every]}}),
            &format!("spec.affinity.{kind}.{required}[0].namespaceSelector"),
        );
    }
    widened_refused(
        &rules,
        |p| {
            p["spec"]["affinity"] = json!({"podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": term(json!({"matchLabels": {"cubepod.io/sandbox": "victim"}}))}],
            }})
        },
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]\
         .podAffinityTerm.labelSelector",
    );
    let spread = |selector: Value| {
        json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}])
    };
    widened_refused(
        &rules,
        |p| {
            p["spec"]["topologySpreadConstraints"] =
                spread(json!({"matchLabels": {"cubepod.io/sandbox": "victim"}}))
        },
        "spec.topologySpreadConstraints[0].labelSelector",
    );
    widened_admitted(&rules, |p| {
        p["spec"]["topologySpreadConstraints"] =
            spread(json!({"matchLabels": {"cubepod.io/sandbox": S}}))
    });
    // DNS settings and host aliases: their known fields only.
    widened_admitted(&rules, |p| {
        p["spec"]["dnsConfig"] = json!({"nameservers": ["10.96.0.10"], "searches": ["svc.local"],
                                        "options": [{"name": "ndots", "value": "2"}]});
        p["spec"]["hostAliases"] = json!([{"ip": "10.0.0.1", "hostnames": ["db"]}]);
    });
    widened_refused(
        &rules,
        |p| p["spec"]["dnsConfig"] = json!({"options": [{"name": "ndots", "x": 1}]}),
        "spec.dnsConfig.options[0].x",
    );
    widened_refused(
        &rules,
        |p| p["spec"]["hostAliases"] = json!([{"ip": "10.0.0.1", "hostnames": [], "x": 1}]),
        "spec.hostAliases[0].x",
    );
}

#[test]
fn grace_periods_and_deadlines_within_the_operators_bounds() {
    let rules = Containment::default();
    for grace in [json!(0), json!(30)] {
        widened_admitted(&rules, |p| {
            p["spec"]["terminationGracePeriodSeconds"] = grace.clone();
            p["spec"]["containers"][0]["livenessProbe"] =
                json!({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": grace});
        });
    }
    for grace in [
        json!(31),
        json!(3_155_760_000u64),
        json!(-1),
        json!("30"),
        json!(1.5),
    ] {
        pod_refused(
            |p| p["spec"]["terminationGracePeriodSeconds"] = grace.clone(),
            Rule::Pod,
            "spec.terminationGracePeriodSeconds",
        );
        pod_refused(
            |p| {
                p["spec"]["containers"][0]["startupProbe"] =
                    json!({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": grace})
            },
            Rule::Pod,
            "spec.containers[0].startupProbe.terminationGracePeriodSeconds",
        );
    }
    let longer = Containment {
        pod_bounds: PodBounds {
            termination_grace_seconds: 600,
            ..PodBounds::default()
        },
        ..Containment::default()
    };
    widened_admitted(&longer, |p| {
        p["spec"]["terminationGracePeriodSeconds"] = json!(600)
    });
    widened_admitted(&rules, |p| {
        p["spec"]["activeDeadlineSeconds"] = json!(30 * 24 * 3600)
    });
    for deadline in [json!(0), json!(30 * 24 * 3600 + 1), json!(3_155_760_000u64)] {
        pod_refused(
            |p| p["spec"]["activeDeadlineSeconds"] = deadline,
            Rule::Pod,
            "spec.activeDeadlineSeconds",
        );
    }
}

#[test]
fn resources_within_the_sandbox_bounds_per_container_and_summed() {
    let c = "spec.containers[0].resources";
    let rules = Containment::default();
    // The largest a sandbox may have, in the forms Kubernetes reads.
    widened_admitted(&rules, |p| {
        p["spec"]["containers"][0]["resources"] = json!({
            "requests": {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "100Gi"},
            "limits": {"cpu": 16, "memory": "68719476736", "ephemeral-storage": "100Gi"},
        })
    });
    for (part, resource, amount) in [
        ("requests", "cpu", json!("4096")),
        ("requests", "cpu", json!("16001m")),
        ("limits", "cpu", json!(17)),
        ("requests", "memory", json!("64Ti")),
        ("limits", "memory", json!("65Gi")),
        ("requests", "ephemeral-storage", json!("1Pi")),
        ("requests", "memory", json!("lots")),
        ("requests", "cpu", json!(true)),
    ] {
        pod_refused(
            |p| p["spec"]["containers"][0]["resources"] = json!({part: {resource: amount}}),
            Rule::Pod,
            &format!("{c}.{part}.{resource}"),
        );
    }
    pod_refused(
        |p| p["spec"]["initContainers"][0]["resources"] = json!({"limits": {"cpu": "32"}}),
        Rule::Pod,
        "spec.initContainers[0].resources.limits.cpu",
    );
    // Two containers of 10 CPUs each: each within the bound, the Pod past it.
    let sidecar = |p: &mut Value, cpu: &str, restart: Option<&str>| {
        let mut extra = p["spec"]["initContainers"][0].clone();
        extra["name"] = json!("extra");
        extra["resources"] = json!({"limits": {"cpu": cpu}});
        if let Some(policy) = restart {
            extra["restartPolicy"] = json!(policy);
        }
        extra
    };
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "10"}});
            let mut second = p["spec"]["containers"][0].clone();
            second["name"] = json!("second");
            p["spec"]["containers"] = json!([p["spec"]["containers"][0].clone(), second]);
        },
        Rule::Pod,
        "spec.containers[*].resources.requests.cpu",
    );
    // An init container runs alone: 10 + 10 is not a sum; a sidecar runs beside the rest.
    widened_admitted(&rules, |p| {
        p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "10"}});
        let init = sidecar(p, "10", None);
        p["spec"]["initContainers"] = json!([init]);
    });
    pod_refused(
        |p| {
            p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "10"}});
            let init = sidecar(p, "10", Some("Always"));
            p["spec"]["initContainers"] = json!([init]);
        },
        Rule::Pod,
        "spec.containers[*].resources.requests.cpu",
    );
    // The operator's bounds, not the defaults.
    let small = Containment {
        pod_bounds: PodBounds {
            cpu_milli: 2_000,
            memory_bytes: 4 << 30,
            ..PodBounds::default()
        },
        ..Containment::default()
    };
    let mut big = pod();
    big["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "8Gi"}});
    let refusal = check(&small, Resource::Pod, S, &big).unwrap_err();
    assert_eq!(refusal.field, format!("{c}.limits.memory"));
    assert!(
        refusal.reason.contains("4Gi (--max-sandbox-memory)"),
        "{refusal}"
    );
}

#[test]
fn a_sandbox_spec_within_the_bounds() {
    let bounds = PodBounds::default();
    assert_eq!(bounds.check_spec("spec", Some("16"), Some("64Gi")), Ok(()));
    assert_eq!(bounds.check_spec("spec", None, None), Ok(()));
    let (field, why) = bounds
        .check_spec("spec", Some("4096"), Some("1Gi"))
        .unwrap_err();
    assert_eq!(field, "spec.resources.cpu");
    assert!(why.contains("16 (--max-sandbox-cpu)"), "{why}");
    let (field, _) = bounds
        .check_spec("spec.template", None, Some("64Ti"))
        .unwrap_err();
    assert_eq!(field, "spec.template.resources.memory");
}
