//! The lifecycle at the HTTP boundary (docs/architecture.md, "The lifecycle"): the default
//! policy, run by the host's runtime over the REST client against wiremock, makes exactly these
//! requests for each row of the lifecycle table, and a 409 on create is success.

use std::sync::Arc;

use cubepod_host::controller::cache::CacheWriter;
use cubepod_host::controller::claims::Claims;
use cubepod_host::controller::inputs;
use cubepod_kube::rest::{ConnectionConfig, RestCluster, RestOptions};
use cubepod_kube::{Resource, WatchEventType};
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::model::{ObjectRef, sandbox};
use cubepod_policy_host::runtime::bindings::{ReconcileOutput, SandboxPhase};
use cubepod_policy_host::runtime::{CallContext, DEFAULT_POLICY, PolicyEngine, RuntimeConfig};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const NS: &str = "cubepod-workloads";
const NOW: i64 = 1_800_000_000;

fn pvcs() -> String {
    format!("/api/v1/namespaces/{NS}/persistentvolumeclaims")
}
fn pods() -> String {
    format!("/api/v1/namespaces/{NS}/pods")
}
fn secrets() -> String {
    format!("/api/v1/namespaces/{NS}/secrets")
}
fn network_policies() -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies")
}

/// Sandbox `a`'s NetworkPolicy as the default policy writes it for the default spec and
/// cluster network (its spec-hash annotation is what tells the policy it is current).
fn network_policy_of_a() -> Value {
    let input = cubepod_policy_sdk::fixtures::sandbox("a").input();
    let owner = cubepod_policy_sdk::manifest::Owner {
        kind: "Sandbox",
        name: "a",
        uid: "uid-a",
    };
    let rendered = cubepod_policy_sdk::manifest::network_policy(
        NS,
        owner,
        &input.sandbox.spec,
        &input.cluster_network,
    );
    serde_json::from_str(&rendered.manifest).unwrap()
}

fn sandbox_object(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 1,
                     "resourceVersion": "1", "finalizers": ["cubepod.io/cleanup"]},
        "spec": spec,
    })
}

fn child(kind: &str, name: &str, owner: &str, extra_labels: Value) -> Value {
    let mut labels = json!({
        "app.kubernetes.io/managed-by": "cubepod-controller",
        "cubepod.io/sandbox": owner,
    });
    if let (Some(labels), Some(extra)) = (labels.as_object_mut(), extra_labels.as_object()) {
        labels.extend(extra.clone());
    }
    // Every child the controller makes carries its Sandbox as controller: only such a child is
    // the sandbox's own.
    let owner_reference = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox", "name": owner,
        "uid": format!("uid-{owner}"), "controller": true, "blockOwnerDeletion": true,
    });
    json!({"apiVersion": "v1", "kind": kind,
           "metadata": {"name": name, "namespace": NS, "labels": labels,
                        "ownerReferences": [owner_reference]},
           "status": {"podIP": "10.244.0.9", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// Created objects come back as the API server returns them: the body, with a status.
fn created() -> ResponseTemplate {
    ResponseTemplate::new(201).set_body_json(json!({"status": {}}))
}

fn deleted() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"kind": "Status", "status": "Success"}))
}

/// Expects exactly one `verb` request on `url` whose body contains `body`, answered so.
async fn expect_once(
    server: &MockServer,
    verb: &str,
    url: String,
    body: Value,
    answer: ResponseTemplate,
) {
    Mock::given(method(verb))
        .and(path(url))
        .and(body_partial_json(body))
        .respond_with(answer)
        .expect(1)
        .mount(server)
        .await;
}

/// Runs one reconcile of `target` with `cache` as observed, over the REST client at `server`.
async fn reconcile(server: &MockServer, cache: CacheWriter, target: Value) -> ReconcileOutput {
    let cluster = RestCluster::new(
        ConnectionConfig::new(&server.uri()).unwrap(),
        RestOptions {
            max_retries: 0,
            ..RestOptions::default()
        },
    )
    .unwrap();
    let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
    let module = engine.load(DEFAULT_POLICY).unwrap();
    // As the controller runs a call: with its cache to answer what S's children are.
    let context = CallContext::new(
        cluster,
        Arc::new(Boundary::new([NS.to_string()])),
        tokio::runtime::Handle::current(),
    )
    .with_children(Arc::new(cache.clone()));
    let object = sandbox::from_json(&target).unwrap();
    let observed = cache.observed(&ObjectRef::new(NS, &object.sandbox.name));
    let claim = Claims::default().view(&cache, &object, &observed);
    let input = inputs::reconcile_input(
        &cache,
        &object.sandbox,
        observed,
        &claim,
        NOW,
        "token".to_string(),
        &cubepod_policy_host::model::network::default_cluster_network(),
    );
    tokio::task::spawn_blocking(move || module.reconcile_sandbox(&context, input))
        .await
        .unwrap()
        .unwrap()
        .value
        .expect("the reconcile succeeds")
}

fn summary(requests: &[Request]) -> Vec<String> {
    requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}

fn cache_with(objects: &[(Resource, Value)]) -> CacheWriter {
    let cache = CacheWriter::default();
    for (resource, object) in objects {
        cache.apply(*resource, WatchEventType::Added, object);
    }
    cache
}

/// The children of a running sandbox `a` at rootfs generation 1.
fn running_children() -> Vec<(Resource, Value)> {
    vec![
        (
            Resource::PersistentVolumeClaim,
            child("PersistentVolumeClaim", "a-rootfs-g1", "a", json!({})),
        ),
        (
            Resource::PersistentVolumeClaim,
            child("PersistentVolumeClaim", "a-workspace", "a", json!({})),
        ),
        (
            Resource::Secret,
            child("Secret", "a-credentials", "a", json!({})),
        ),
        (
            Resource::Pod,
            child(
                "Pod",
                "a",
                "a",
                json!({"cubepod.io/rootfs-generation": "1"}),
            ),
        ),
        (Resource::NetworkPolicy, network_policy_of_a()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_creates_two_block_pvcs_the_secret_and_the_kata_pod() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(pvcs()))
        .and(body_partial_json(
            json!({"metadata": {"name": "a-workspace"}, "spec": {"volumeMode": "Block"}}),
        ))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(pvcs()))
        .and(body_partial_json(
            json!({"metadata": {"name": "a-rootfs-g1"}, "spec": {"volumeMode": "Block"}}),
        ))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(secrets()))
        .and(body_partial_json(
            json!({"metadata": {"name": "a-credentials"}}),
        ))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(network_policies()))
        .and(body_partial_json(json!({
            "metadata": {"name": "a-network"},
            "spec": {"podSelector": {"matchLabels": {"cubepod.io/sandbox": "a"}},
                     "policyTypes": ["Ingress", "Egress"]},
        })))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(pods()))
        .and(body_partial_json(
            json!({"metadata": {"name": "a"}, "spec": {"runtimeClassName": "kata-qemu"}}),
        ))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;

    let out = reconcile(
        &server,
        CacheWriter::default(),
        sandbox_object("a", json!({"image": "img"})),
    )
    .await;
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        summary(&requests),
        [
            format!("POST {}", pvcs()),
            format!("POST {}", pvcs()),
            format!("POST {}", secrets()),
            format!("POST {}", network_policies()),
            format!("POST {}", pods()),
        ]
    );
    assert_eq!(out.status.rootfs_pvc.as_deref(), Some("a-rootfs-g1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_deletes_only_the_pod_and_keeps_both_pvcs() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path(format!("{}/a", pods())))
        .and(body_partial_json(
            json!({"propagationPolicy": "Background"}),
        ))
        .respond_with(deleted())
        .expect(1)
        .mount(&server)
        .await;
    let target = sandbox_object("a", json!({"image": "img", "desiredState": "Paused"}));
    let out = reconcile(&server, cache_with(&running_children()), target).await;
    let requests = server.received_requests().await.unwrap();
    assert_eq!(summary(&requests), [format!("DELETE {}/a", pods())]);
    assert_eq!(out.status.phase, SandboxPhase::Paused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_two_replaces_the_rootfs_pvc_and_keeps_the_workspace() {
    let server = MockServer::start().await;
    expect_once(
        &server,
        "DELETE",
        format!("{}/a", pods()),
        json!({}),
        deleted(),
    )
    .await;
    expect_once(
        &server,
        "DELETE",
        format!("{}/a-rootfs-g1", pvcs()),
        json!({}),
        deleted(),
    )
    .await;
    expect_once(&server, "POST", pvcs(), json!({"metadata": {"name": "a-rootfs-g2", "labels": {"cubepod.io/rootfs-generation": "2"}}}), created()).await;
    let target = sandbox_object("a", json!({"image": "img", "rootfsGeneration": 2}));
    let out = reconcile(&server, cache_with(&running_children()), target).await;
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        summary(&requests),
        [
            format!("DELETE {}/a", pods()),
            format!("DELETE {}/a-rootfs-g1", pvcs()),
            format!("POST {}", pvcs()),
        ],
        "the workspace PVC is neither deleted nor recreated"
    );
    assert_eq!(out.status.rootfs_pvc.as_deref(), Some("a-rootfs-g2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_from_populates_data_source_on_both_pvcs() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(pvcs()))
        .and(body_partial_json(
            json!({"metadata": {"name": "b-workspace"},
            "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "a-workspace"}}}),
        ))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(pvcs()))
        .and(body_partial_json(
            json!({"metadata": {"name": "b-rootfs-g1"},
            "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "a-rootfs-g3"}}}),
        ))
        .respond_with(created())
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(created())
        .mount(&server)
        .await;
    let mut source = sandbox_object("a", json!({"image": "img", "rootfsGeneration": 3}));
    source["status"] = json!({"rootfsPVC": "a-rootfs-g3", "workspacePVC": "a-workspace"});
    // What a fork may clone is what its source owns: its PVCs, with its controller reference.
    let owned = |name: &str| {
        let mut pvc = child("PersistentVolumeClaim", name, "a", json!({}));
        pvc["metadata"]["ownerReferences"] = json!([{"apiVersion": "cubepod.io/v1alpha1",
            "kind": "Sandbox", "name": "a", "uid": "uid-a", "controller": true}]);
        pvc
    };
    let cache = cache_with(&[
        (Resource::Sandbox, source),
        (Resource::PersistentVolumeClaim, owned("a-workspace")),
        (Resource::PersistentVolumeClaim, owned("a-rootfs-g3")),
    ]);
    reconcile(
        &server,
        cache,
        sandbox_object("b", json!({"image": "img", "forkFrom": "a"})),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn already_exists_on_create_is_success_and_the_pod_ip_is_read_back() {
    let server = MockServer::start().await;
    let exists = |kind: &str, name: &str| {
        ResponseTemplate::new(409).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists",
            "message": format!("{kind} \"{name}\" already exists"), "code": 409,
        }))
    };
    Mock::given(method("POST"))
        .and(path(pvcs()))
        .respond_with(exists("persistentvolumeclaims", "a"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(secrets()))
        .respond_with(exists("secrets", "a-credentials"))
        .mount(&server)
        .await;
    // Each object met is read back: it is used only as the sandbox's own (its controller
    // reference names the sandbox's uid).
    for (url, kind, name) in [
        (pvcs(), "PersistentVolumeClaim", "a-workspace"),
        (pvcs(), "PersistentVolumeClaim", "a-rootfs-g1"),
        (secrets(), "Secret", "a-credentials"),
    ] {
        Mock::given(method("GET"))
            .and(path(format!("{url}/{name}")))
            .respond_with(ResponseTemplate::new(200).set_body_json(child(
                kind,
                name,
                "a",
                json!({}),
            )))
            .expect(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path(network_policies()))
        .respond_with(exists("networkpolicies", "a-network"))
        .expect(1)
        .mount(&server)
        .await;
    // An existing NetworkPolicy is replaced in one merge patch, never deleted and created.
    Mock::given(method("PATCH"))
        .and(path(format!("{}/a-network", network_policies())))
        .and(wiremock::matchers::header(
            "content-type",
            "application/merge-patch+json",
        ))
        .and(body_partial_json(json!({
            "metadata": {"labels": {"cubepod.io/sandbox": "a"}},
            "spec": {"podSelector": {"matchLabels": {"cubepod.io/sandbox": "a"}}, "ingress": null},
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(network_policy_of_a()))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(pods()))
        .respond_with(exists("pods", "a"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{}/a", pods())))
        .respond_with(ResponseTemplate::new(200).set_body_json(child("Pod", "a", "a", json!({}))))
        .expect(1)
        .mount(&server)
        .await;
    // The NetworkPolicy is the sandbox's own (observed, with a spec-hash of an older spec), so
    // the apply that meets it patches it; one the controller does not hold is never taken over
    // (tests/scenarios/service-not-taken-over.yaml).
    let cache = CacheWriter::default();
    let mut stale = network_policy_of_a();
    stale["metadata"]["annotations"]["cubepod.io/spec-hash"] = json!("0000000000000000");
    cache.apply(Resource::NetworkPolicy, WatchEventType::Added, &stale);
    let out = reconcile(&server, cache, sandbox_object("a", json!({"image": "img"}))).await;
    assert_eq!(out.status.pod_ip.as_deref(), Some("10.244.0.9"));
}
