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
