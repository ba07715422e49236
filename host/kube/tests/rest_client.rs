//! RestCluster against API stand-ins: wiremock for exact requests (paths, bodies, headers,
//! retries, watches, token rotation), a small HTTPS server for TLS, and kubeconfig / in-cluster
//! loading from temporary files.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use cubepod_kube::rest::{
    ConnectionConfig, Credentials, Projection, RestCluster, RestOptions, Token,
};
use cubepod_kube::{ApiErrorKind, Cluster, FastPath, PageRequest, Resource, Scope, WatchEventType};
use http_body_util::Full;
use hyper::{Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tempfile::TempDir;
use wiremock::matchers::{
    HeaderExactMatcher, body_json, body_string, header, headers, method, path, query_param,
};
use wiremock::{Mock, MockServer, ResponseTemplate};

const TOKEN: &str = "s3cr3t-token";

/// Quick retries, so that failure tests take milliseconds.
fn fast() -> RestOptions {
    RestOptions {
        request_timeout: Duration::from_secs(5),
        max_retries: 3,
        retry_base: Duration::from_millis(5),
        retry_max: Duration::from_millis(20),
        ..RestOptions::default()
    }
}

/// The `Accept` of a request for `kind` (`PartialObjectMetadata` or `...List`) of
/// `meta.k8s.io/v1`, with plain JSON after it, as client-go's metadata client sends it.
fn asks_for_metadata(kind: &str) -> HeaderExactMatcher {
    let metadata = format!("application/json;as={kind};g=meta.k8s.io;v=v1");
    // wiremock reads a header's comma-separated values as a list.
    headers("accept", vec![metadata.as_str(), "application/json"])
}

fn client(server: &MockServer, options: RestOptions) -> Arc<RestCluster> {
    let mut conn = ConnectionConfig::new(&server.uri()).expect("server URL");
    conn.credentials = Credentials::Token(Token::new("test", TOKEN).expect("token"));
    RestCluster::new(conn, options).expect("client")
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn pvc(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": "ns"},
           "spec": {"volumeMode": "Block", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}})
}

const PVCS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";

// ---------------------------------------------------------------------------------------------
// Verbs: exact requests and status mapping.

#[tokio::test]
async fn create_posts_the_object_to_its_collection() {
    let server = MockServer::start().await;
    let mut stored = pvc("a");
    stored["metadata"]["uid"] = json!("u-1");
    Mock::given(method("POST"))
        .and(path(PVCS))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .and(header("content-type", "application/json"))
        .and(header("accept", "application/json"))
        .and(body_json(pvc("a")))
        .respond_with(ResponseTemplate::new(201).set_body_json(&stored))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = client(&server, fast());
    let created = cluster
        .create(Resource::PersistentVolumeClaim, "ns", pvc("a"))
        .await
        .expect("created");
    assert_eq!(created["metadata"]["uid"], "u-1");
}

/// A policy's manifest goes out as the text the boundary checked: not parsed into a value and
/// written again (which would also reorder its keys).
#[tokio::test]
async fn create_text_sends_the_manifest_as_it_is() {
    let server = MockServer::start().await;
    let text = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"namespace":"ns","name":"a"}}"#;
    Mock::given(method("POST"))
        .and(path(PVCS))
        .and(header("content-type", "application/json"))
        .and(body_string(text))
        .respond_with(ResponseTemplate::new(201).set_body_json(pvc("a")))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = client(&server, fast());
    let created = cluster
        .create_text(Resource::PersistentVolumeClaim, "ns", text.to_string())
        .await
        .expect("created");
    assert_eq!(created["metadata"]["name"], "a");
}

#[tokio::test]
async fn create_of_a_taken_name_is_already_exists() {
    let server = MockServer::start().await;
    let message = "persistentvolumeclaims \"a\" already exists";
    Mock::given(method("POST"))
        .and(path(PVCS))
        .respond_with(ResponseTemplate::new(409).set_body_json(status(
            409,
            "AlreadyExists",
            message,
        )))
        .expect(1)
        .mount(&server)
        .await;
    let error = client(&server, fast())
        .create(Resource::PersistentVolumeClaim, "ns", pvc("a"))
        .await
        .expect_err("taken");
    assert_eq!(error.kind, ApiErrorKind::AlreadyExists);
    assert_eq!(error.message, message);
}

#[tokio::test]
async fn delete_is_background_and_not_found_carries_the_message() {
    let server = MockServer::start().await;
    let delete_options =
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"});
    Mock::given(method("DELETE"))
        .and(path(format!("{PVCS}/a")))
        .and(header("content-type", "application/json"))
        .and(body_json(&delete_options))
        .respond_with(ResponseTemplate::new(200).set_body_json(pvc("a")))
        .expect(1)
        .mount(&server)
        .await;
    let message = "persistentvolumeclaims \"b\" not found";
    Mock::given(method("DELETE"))
        .and(path(format!("{PVCS}/b")))
        .and(body_json(&delete_options))
        .respond_with(ResponseTemplate::new(404).set_body_json(status(404, "NotFound", message)))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = client(&server, fast());
    cluster
        .delete(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect("deleted");
    let error = cluster
        .delete(Resource::PersistentVolumeClaim, "ns", "b")
        .await
        .expect_err("gone already");
    assert_eq!(error.kind, ApiErrorKind::NotFound);
    assert_eq!(error.message, message);
}

#[tokio::test]
async fn get_patch_and_status_patch_of_a_custom_resource() {
    let server = MockServer::start().await;
    let object = "/apis/cubepod.io/v1alpha1/namespaces/ns/sandboxes/a";
    let sandbox = json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                         "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"}});
    Mock::given(method("GET"))
        .and(path(object))
        .respond_with(ResponseTemplate::new(200).set_body_json(&sandbox))
        .expect(1)
        .mount(&server)
        .await;
    let status_patch = json!({"status": {"phase": "Running"}});
    Mock::given(method("PATCH"))
        .and(path(format!("{object}/status")))
        .and(header("content-type", "application/merge-patch+json"))
        .and(body_json(&status_patch))
        .respond_with(ResponseTemplate::new(200).set_body_json(&sandbox))
        .expect(1)
        .mount(&server)
        .await;
    let stale = json!({"metadata": {"resourceVersion": "6", "finalizers": null}});
    Mock::given(method("PATCH"))
        .and(path(object))
        .and(header("content-type", "application/merge-patch+json"))
        .and(body_json(&stale))
        .respond_with(ResponseTemplate::new(409).set_body_json(status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on sandboxes.cubepod.io \"a\": the object has been modified",
        )))
        .expect(1)
        .mount(&server)
        .await;

    let cluster = client(&server, fast());
    let got = cluster
        .get(Resource::Sandbox, "ns", "a")
        .await
        .expect("get");
    assert_eq!(got["metadata"]["resourceVersion"], "7");
    cluster
        .patch_status(Resource::Sandbox, "ns", "a", status_patch)
        .await
        .expect("status patched");
    let conflict = cluster
        .patch(Resource::Sandbox, "ns", "a", stale)
        .await
        .expect_err("stale");
    assert_eq!(conflict.kind, ApiErrorKind::Conflict);
    assert!(conflict.message.contains("has been modified"));
}

#[tokio::test]
async fn invalid_and_forbidden_carry_the_status_message() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PVCS))
        .respond_with(ResponseTemplate::new(422).set_body_json(status(
            422,
            "Invalid",
            "PersistentVolumeClaim \"a\" is invalid: spec.resources: Required value",
        )))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/a")))
        .respond_with(ResponseTemplate::new(403).set_body_json(status(
            403,
            "Forbidden",
            "persistentvolumeclaims \"a\" is forbidden: User \"x\" cannot get resource",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = client(&server, fast());
    let invalid = cluster
        .create(Resource::PersistentVolumeClaim, "ns", pvc("a"))
        .await
        .expect_err("invalid");
    assert_eq!(invalid.kind, ApiErrorKind::Invalid);
    assert!(invalid.message.ends_with("spec.resources: Required value"));
    let forbidden = cluster
        .get(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect_err("forbidden");
    assert_eq!(forbidden.kind, ApiErrorKind::Forbidden);
    assert!(forbidden.message.contains("is forbidden"));
}

#[tokio::test]
async fn list_encodes_the_selector_and_returns_items_and_version() {
    let server = MockServer::start().await;
    let selector = "app.kubernetes.io/managed-by=cubepod-controller,cubepod.io/sandbox=a";
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ns/pods"))
        .and(query_param("labelSelector", selector))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "42"},
            "items": [{"metadata": {"name": "a", "namespace": "ns"}}],
        })))
        .expect(1)
        .mount(&server)
        .await;
    let list = client(&server, fast())
        .list(&Scope {
            resource: Resource::Pod,
            namespace: "ns".into(),
            label_selector: Some(selector.into()),
        })
        .await
        .expect("list");
    assert_eq!(list.resource_version, "42");
    assert_eq!(list.items.len(), 1);
    // Items of a list carry no kind; the client fills it in as the in-memory cluster has it.
    assert_eq!(list.items[0]["kind"], "Pod");
    assert_eq!(list.items[0]["apiVersion"], "v1");
}

// ---------------------------------------------------------------------------------------------
// Retries.

#[tokio::test]
async fn too_many_requests_waits_for_retry_after() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PVCS))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(status(429, "TooManyRequests", "too many requests")),
        )
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PVCS))
        .respond_with(ResponseTemplate::new(201).set_body_json(pvc("a")))
        .expect(1)
        .mount(&server)
        .await;
    let started = Instant::now();
    client(&server, fast())
        .create(Resource::PersistentVolumeClaim, "ns", pvc("a"))
        .await
        .expect("created on the second try");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
}

#[tokio::test]
async fn unavailable_twice_then_ok() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/a")))
        .respond_with(ResponseTemplate::new(503).set_body_string("upstream connect error"))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/a")))
        .respond_with(ResponseTemplate::new(200).set_body_json(pvc("a")))
        .expect(1)
        .mount(&server)
        .await;
    let got = client(&server, fast())
        .get(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect("third time");
    assert_eq!(got["metadata"]["name"], "a");
}

#[tokio::test]
async fn a_server_error_forever_is_unavailable_after_the_retries() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/a")))
        .respond_with(ResponseTemplate::new(500).set_body_json(status(
            500,
            "InternalError",
            "etcd is down",
        )))
        .expect(3)
        .mount(&server)
        .await;
    let options = RestOptions {
        max_retries: 2,
        ..fast()
    };
    let error = client(&server, options)
        .get(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect_err("gave up");
    assert_eq!(error.kind, ApiErrorKind::Unavailable);
    assert!(error.message.contains("etcd is down"), "{}", error.message);
    assert!(error.retry_after.is_some());
}

#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let conn = ConnectionConfig::new(&format!("http://127.0.0.1:{port}")).expect("url");
    let cluster = RestCluster::new(conn, fast()).expect("client");
    let error = cluster
        .get(Resource::Pod, "ns", "a")
        .await
        .expect_err("refused");
    assert_eq!(error.kind, ApiErrorKind::Unavailable);
    assert!(
        error.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_slow_response_times_out_and_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(pvc("a"))
                .set_delay(Duration::from_secs(2)),
        )
        .expect(2)
        .mount(&server)
        .await;
    let options = RestOptions {
        request_timeout: Duration::from_millis(200),
        max_retries: 1,
        ..fast()
    };
    let error = client(&server, options)
        .get(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect_err("timed out");
    assert_eq!(error.kind, ApiErrorKind::Unavailable);
    assert!(
        error.message.contains("no response within"),
        "{}",
        error.message
    );
}

// ---------------------------------------------------------------------------------------------
// Watches.

fn pod_scope() -> Scope {
    Scope {
        resource: Resource::Pod,
        namespace: "ns".into(),
        label_selector: Some("cubepod.io/sandbox=a".into()),
    }
}

#[tokio::test]
async fn a_watch_streams_events_then_closes() {
    let server = MockServer::start().await;
    let body = concat!(
        r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"11"}}}"#,
        "\n",
        r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}}"#,
        "\n"
    );
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ns/pods"))
        .and(query_param("watch", "true"))
        .and(query_param("resourceVersion", "10"))
        .and(query_param("allowWatchBookmarks", "true"))
        .and(query_param("timeoutSeconds", "290"))
        .and(query_param("labelSelector", "cubepod.io/sandbox=a"))
        .respond_with(ResponseTemplate::new(200).set_body_string(body))
        .expect(1)
        .mount(&server)
        .await;
    let mut events = client(&server, fast())
        .watch(&pod_scope(), "10")
        .await
        .expect("watch");
    let first = events.recv().await.expect("event").expect("ok");
    assert_eq!(first.kind, WatchEventType::Added);
    assert_eq!(first.object["metadata"]["name"], "a");
    let second = events.recv().await.expect("event").expect("ok");
    assert_eq!(second.kind, WatchEventType::Bookmark);
    assert_eq!(second.object["metadata"]["resourceVersion"], "12");
    assert!(events.recv().await.is_none(), "closed with the stream");
}

#[tokio::test]
async fn the_children_read_by_their_metadata_alone_are_listed_and_watched_as_metadata() {
    let server = MockServer::start().await;
    const SECRETS: &str = "/api/v1/namespaces/ns/secrets";
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .and(query_param("limit", "500"))
        .and(asks_for_metadata("PartialObjectMetadataList"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": "42"},
            "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "41"}}],
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .and(query_param("watch", "true"))
        .and(asks_for_metadata("PartialObjectMetadata"))
        .respond_with(ResponseTemplate::new(200).set_body_string(concat!(
            r#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"t","resourceVersion":"43"}}}"#,
            "\n"
        )))
        .expect(1)
        .mount(&server)
        .await;
    // A Pod's status is read: its watch asks for the whole object.
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ns/pods"))
        .and(query_param("watch", "true"))
        .and(header("accept", "application/json"))
        .respond_with(ResponseTemplate::new(200).set_body_string(""))
        .expect(1)
        .mount(&server)
        .await;
    let options = RestOptions {
        children: Projection::MetadataAndStatus,
        ..fast()
    };
    let cluster = client(&server, options);
    let secrets = Scope {
        resource: Resource::Secret,
        namespace: "ns".into(),
        label_selector: None,
    };
    let page = PageRequest {
        limit: 500,
        continue_token: None,
    };
    let list = cluster.list_page(&secrets, &page).await.expect("list");
    assert_eq!(list.resource_version, "42");
    assert_eq!(list.items[0]["metadata"]["name"], "s");
    let mut events = cluster.watch(&secrets, "42").await.expect("watch");
    let added = events.recv().await.expect("event").expect("ok");
    assert_eq!(added.object["metadata"]["name"], "t");
    let pods = Scope {
        label_selector: None,
        ..pod_scope()
    };
    let mut events = cluster.watch(&pods, "42").await.expect("watch");
    assert!(events.recv().await.is_none(), "closed with the stream");
}

#[tokio::test]
async fn a_write_of_a_child_read_by_its_metadata_asks_for_its_metadata_back() {
    // The API server renders a write's answer as Accept asks: the Secret comes back without
    // its data, as its watch brings it. A created Pod too, since the API server gives a new Pod
    // its own empty status, whatever was sent; a Pod read (a get), whose status is read, comes
    // back whole.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/v1/namespaces/ns/secrets"))
        .and(asks_for_metadata("PartialObjectMetadata"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "44"},
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/v1/namespaces/ns/pods"))
        .and(asks_for_metadata("PartialObjectMetadata"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "45"},
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ns/pods/p"))
        .and(header("accept", "application/json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "46"},
            "spec": {"containers": []},
            "status": {"phase": "Running", "podIP": "10.0.0.9"},
        })))
        .expect(1)
        .mount(&server)
        .await;
    let options = RestOptions {
        children: Projection::MetadataAndStatus,
        ..fast()
    };
    let cluster = client(&server, options);
    let secret = cluster
        .create_text(
            Resource::Secret,
            "ns",
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"t":"eA=="}}"#
                .to_string(),
        )
        .await
        .expect("created");
    assert_eq!(secret["metadata"]["resourceVersion"], "44");
    let pod = cluster
        .create_text(
            Resource::Pod,
            "ns",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#.to_string(),
        )
        .await
        .expect("created");
    assert_eq!(pod["metadata"]["resourceVersion"], "45");
    let pod = cluster.get(Resource::Pod, "ns", "p").await.expect("read");
    assert_eq!(pod["status"]["podIP"], "10.0.0.9");
    assert!(pod.get("spec").is_none(), "{pod}");
}

#[tokio::test]
async fn a_write_answered_by_its_metadata_asks_for_it_and_keeps_what_the_record_needs() {
    // A Sandbox's own finalizer and status writes: the answer is asked for as the object's
    // metadata, read without its managedFields, and the rest of it is not read. The patch's
    // text is sent as it is.
    const PATCH: &str = r#"{"metadata":{"resourceVersion":"45"},"status":{"phase":"Running"}}"#;
    let server = MockServer::start().await;
    let answer = json!({
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 3,
                     "resourceVersion": "46", "finalizers": ["cubepod.io/cleanup"],
                     "labels": {"team": "ml"},
                     "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        "spec": {"image": "not asked for"},
    });
    for subresource in ["", "/status"] {
        Mock::given(method("PATCH"))
            .and(path(format!(
                "/apis/cubepod.io/v1alpha1/namespaces/ns/sandboxes/a{subresource}"
            )))
            .and(asks_for_metadata("PartialObjectMetadata"))
            .and(body_string(PATCH))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer.clone()))
            .expect(1)
            .mount(&server)
            .await;
    }
    let cluster = client(&server, fast());
    for status in [false, true] {
        let read = cluster
            .patch_for_metadata(Resource::Sandbox, "ns", "a", PATCH.to_string(), status)
            .await
            .expect("patched");
        assert_eq!(
            read,
            json!({"metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 3,
                                "resourceVersion": "46", "finalizers": ["cubepod.io/cleanup"],
                                "labels": {"team": "ml"}}}),
            "status: {status}"
        );
    }
}

#[tokio::test]
async fn an_expired_watch_event_is_gone() {
    let server = MockServer::start().await;
    let body = concat!(
        r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","#,
        r#""message":"too old resource version: 10 (500)","reason":"Expired","code":410}}"#,
        "\n"
    );
    Mock::given(method("GET"))
        .and(query_param("watch", "true"))
        .respond_with(ResponseTemplate::new(200).set_body_string(body))
        .mount(&server)
        .await;
    let mut events = client(&server, fast())
        .watch(&pod_scope(), "10")
        .await
        .expect("watch");
    let error = events.recv().await.expect("item").expect_err("gone");
    assert_eq!(error.kind, ApiErrorKind::Gone);
    assert_eq!(error.message, "too old resource version: 10 (500)");
    assert!(events.recv().await.is_none());
}

#[tokio::test]
async fn a_watch_refused_with_410_is_gone() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(query_param("watch", "true"))
        .respond_with(ResponseTemplate::new(410).set_body_json(status(
            410,
            "Expired",
            "too old resource version: 10 (500)",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let error = client(&server, fast())
        .watch(&pod_scope(), "10")
        .await
        .expect_err("gone");
    assert_eq!(error.kind, ApiErrorKind::Gone);
}

// ---------------------------------------------------------------------------------------------
// Bearer token rotation.

fn write_kubeconfig(dir: &Path, cluster: &str, user: &str) -> PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
         contexts:\n- name: test\n  context:\n    cluster: c\n    user: u\n    namespace: team\n\
         clusters:\n- name: c\n  cluster:\n{}\
         users:\n- name: u\n  user:\n{}",
        indent(cluster),
        indent(user)
    );
    let path = dir.join("config");
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

fn indent(block: &str) -> String {
    block.lines().map(|line| format!("    {line}\n")).collect()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn a_rotated_token_file_is_read_after_the_refresh_interval() {
    let server = MockServer::start().await;
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("token"), "first\n").expect("token");
    let config = write_kubeconfig(
        dir.path(),
        &format!("server: {}", server.uri()),
        "tokenFile: token",
    );
    Mock::given(method("GET"))
        .and(header("authorization", bearer("first").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(pvc("a")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(header("authorization", bearer("second").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(pvc("a")))
        .expect(1)
        .mount(&server)
        .await;
    let conn = ConnectionConfig::from_kubeconfig_file(&config).expect("kubeconfig");
    let options = RestOptions {
        token_refresh: Duration::from_millis(50),
        ..fast()
    };
    let cluster = RestCluster::new(conn, options).expect("client");
    cluster
        .get(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect("with the first token");
    std::fs::write(dir.path().join("token"), "second\n").expect("rotate");
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster
        .get(Resource::PersistentVolumeClaim, "ns", "a")
        .await
        .expect("with the second token");
}

#[tokio::test]
async fn a_401_re_reads_the_token_file_once() {
    let server = MockServer::start().await;
    let dir = TempDir::new().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "old").expect("token");
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/before")))
        .and(header("authorization", bearer("old").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(pvc("before")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/after")))
        .and(header("authorization", bearer("old").as_str()))
        .respond_with(ResponseTemplate::new(401).set_body_json(status(
            401,
            "Unauthorized",
            "Unauthorized",
        )))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{PVCS}/after")))
        .and(header("authorization", bearer("new").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(pvc("after")))
        .expect(1)
        .mount(&server)
        .await;
    let mut conn = ConnectionConfig::new(&server.uri()).expect("url");
    conn.credentials = Credentials::TokenFile {
        path: token_file.clone(),
        origin: "token file".into(),
    };
    // Far from due: only the 401 makes the client read the file again.
    let options = RestOptions {
        token_refresh: Duration::from_secs(3600),
        ..fast()
    };
    let cluster = RestCluster::new(conn, options).expect("client");
    cluster
        .get(Resource::PersistentVolumeClaim, "ns", "before")
        .await
        .expect("with the old token");
    std::fs::write(&token_file, "new").expect("rotate");
    cluster
        .get(Resource::PersistentVolumeClaim, "ns", "after")
        .await
        .expect("retried with the new token");
}

#[tokio::test]
async fn a_401_with_a_fixed_token_is_unauthorized_at_once() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401).set_body_json(status(
            401,
            "Unauthorized",
            "Unauthorized",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let error = client(&server, fast())
        .get(Resource::Pod, "ns", "a")
        .await
        .expect_err("unauthorized");
    assert_eq!(error.kind, ApiErrorKind::Unauthorized);
}

// ---------------------------------------------------------------------------------------------
// TLS, against a real HTTPS server (HTTP/2 and HTTP/1.1 by ALPN).

struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("key");
        Self {
            ca: CertifiedIssuer::self_signed(params, key).expect("CA"),
        }
    }

    fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A certificate and key (PEM) for `names`, for a server or a client.
    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &*self.ca).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}

/// What the HTTPS server saw: each request's HTTP version and Authorization header.
type Seen = Arc<Mutex<Vec<(Version, Option<String>)>>>;

/// Serves a PodList on every request, over TLS with `cert`; asks for a client certificate from
/// `client_ca` when given.
async fn https_server(cert: &str, key: &str, client_ca: Option<&str>) -> (SocketAddr, Seen) {
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(cert.expect("ca")).expect("root");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let record = record.clone();
            tokio::spawn(async move {
                // A refused handshake is what some tests are about: just drop the connection.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                    let authorization = request
                        .headers()
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    record
                        .lock()
                        .expect("lock")
                        .push((request.version(), authorization));
                    let list = json!({"kind": "PodList", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": "3"}, "items": []});
                    async move {
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(list.to_string())))
                                .expect("response"),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn pods_everywhere() -> Scope {
    Scope {
        resource: Resource::Pod,
        namespace: "ns".into(),
        label_selector: None,
    }
}

async fn list_with(config: &Path) -> Result<(), String> {
    let conn = ConnectionConfig::from_kubeconfig_file(config).map_err(|e| e.to_string())?;
    let cluster = RestCluster::new(conn, fast()).map_err(|e| e.to_string())?;
    cluster
        .list(&pods_everywhere())
        .await
        .map(drop)
        .map_err(|e| e.message)
}

#[tokio::test]
async fn tls_with_the_cluster_ca_uses_http2() {
    let pki = Pki::new("cluster CA");
    let (cert, key) = pki.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (addr, seen) = https_server(&cert, &key, None).await;
    let dir = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(
        dir.path(),
        &format!(
            "server: https://{addr}\ncertificate-authority-data: {}",
            b64(&pki.ca_pem())
        ),
        &format!("token: {TOKEN}"),
    );
    list_with(&config).await.expect("trusted");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, Version::HTTP_2, "HTTP/2 negotiated by ALPN");
    assert_eq!(seen[0].1.as_deref(), Some(bearer(TOKEN).as_str()));
}

#[tokio::test]
async fn tls_with_another_ca_fails_naming_the_certificate() {
    let pki = Pki::new("cluster CA");
    let (cert, key) = pki.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (addr, seen) = https_server(&cert, &key, None).await;
    let dir = TempDir::new().expect("tempdir");
    let ca_file = dir.path().join("other-ca.crt");
    std::fs::write(&ca_file, Pki::new("another CA").ca_pem()).expect("ca");
    let config = write_kubeconfig(
        dir.path(),
        &format!("server: https://{addr}\ncertificate-authority: other-ca.crt"),
        "",
    );
    let started = Instant::now();
    let error = list_with(&config).await.expect_err("untrusted");
    assert!(
        error.contains("invalid peer certificate") && error.contains("UnknownIssuer"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "not retried");
    assert!(seen.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn insecure_skip_tls_verify_accepts_an_unknown_ca() {
    let pki = Pki::new("unknown CA");
    let (cert, key) = pki.issue(
        &["kubernetes.default.svc"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (addr, _) = https_server(&cert, &key, None).await;
    let dir = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(
        dir.path(),
        &format!("server: https://{addr}\ninsecure-skip-tls-verify: true"),
        "",
    );
    list_with(&config).await.expect("not verified");
}

#[tokio::test]
async fn tls_server_name_and_client_certificate() {
    let pki = Pki::new("cluster CA");
    let (cert, key) = pki.issue(
        &["kubernetes.default.svc"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (addr, seen) = https_server(&cert, &key, Some(&pki.ca_pem())).await;
    let (client_cert, client_key) = pki.issue(&["alice"], ExtendedKeyUsagePurpose::ClientAuth);
    let dir = TempDir::new().expect("tempdir");
    let cluster = format!(
        "server: https://{addr}\ncertificate-authority-data: {}\ntls-server-name: kubernetes.default.svc",
        b64(&pki.ca_pem())
    );
    let with_cert = write_kubeconfig(
        dir.path(),
        &cluster,
        &format!(
            "client-certificate-data: {}\nclient-key-data: {}",
            b64(&client_cert),
            b64(&client_key)
        ),
    );
    list_with(&with_cert)
        .await
        .expect("client certificate accepted");
    assert_eq!(seen.lock().expect("lock").len(), 1);

    let without = write_kubeconfig(dir.path(), &cluster, "");
    let error = list_with(&without)
        .await
        .expect_err("no client certificate");
    assert_eq!(seen.lock().expect("lock").len(), 1, "{error}");
}

// ---------------------------------------------------------------------------------------------
// Loading the configuration.

#[test]
fn a_kubeconfig_token_and_namespace() {
    let dir = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443/",
        &format!("token: {TOKEN}"),
    );
    let conn = ConnectionConfig::from_kubeconfig_file(&config).expect("config");
    assert_eq!(conn.server, "https://api.example:6443");
    assert_eq!(conn.namespace.as_deref(), Some("team"));
    assert!(matches!(conn.credentials, Credentials::Token(_)));
    assert!(conn.tls.ca.is_none() && !conn.tls.insecure_skip_verify);
    // Debug shows no secret.
    assert!(!format!("{conn:?}").contains(TOKEN));
}

#[test]
fn a_token_file_wins_over_a_token_and_is_relative_to_the_kubeconfig() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("token"), "from-file\n").expect("token");
    let config = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443",
        "token: inline\ntokenFile: token",
    );
    let conn = ConnectionConfig::from_kubeconfig_file(&config).expect("config");
    match conn.credentials {
        Credentials::TokenFile { path, .. } => assert_eq!(path, dir.path().join("token")),
        other => panic!("expected a token file, got {other:?}"),
    }
}

#[test]
fn a_missing_token_file_names_the_field_and_file() {
    let dir = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443",
        "tokenFile: /nonexistent/token",
    );
    let error = ConnectionConfig::from_kubeconfig_file(&config)
        .expect_err("missing")
        .to_string();
    assert!(
        error.starts_with(&format!(
            "kubeconfig {}: users[u].tokenFile /nonexistent/token: ",
            config.display()
        )),
        "{error}"
    );
}

#[test]
fn client_certificate_data_is_decoded() {
    let dir = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443",
        &format!(
            "client-certificate-data: {}\nclient-key-data: {}",
            b64("CERT PEM"),
            b64("KEY PEM")
        ),
    );
    let conn = ConnectionConfig::from_kubeconfig_file(&config).expect("config");
    assert_eq!(conn.tls.client_cert.expect("cert").bytes, b"CERT PEM");
    let key = conn.tls.client_key.expect("key");
    assert_eq!(key.bytes, b"KEY PEM");
    assert!(!format!("{key:?}").contains("KEY PEM"));
    assert!(matches!(conn.credentials, Credentials::None));
}

#[test]
fn bad_base64_names_the_field() {
    let dir = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443",
        &format!(
            "client-certificate-data: {}\nclient-key-data: '%%%not base64'",
            b64("CERT")
        ),
    );
    let error = ConnectionConfig::from_kubeconfig_file(&config)
        .expect_err("bad base64")
        .to_string();
    assert!(
        error.starts_with(&format!(
            "kubeconfig {}: users[u].client-key-data is not valid base64",
            config.display()
        )),
        "{error}"
    );
}

#[test]
fn a_current_context_that_names_no_context() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("config");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: prod\ncontexts: []\n",
    )
    .expect("write");
    let error = ConnectionConfig::from_kubeconfig_file(&path)
        .expect_err("no context")
        .to_string();
    assert_eq!(
        error,
        format!(
            "kubeconfig {}: current-context \"prod\" names no context",
            path.display()
        )
    );
}

#[test]
fn a_plain_http_server_as_kubectl_proxy_serves() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("config");
    std::fs::write(
        &path,
        "current-context: proxy\ncontexts:\n- name: proxy\n  context: {cluster: local}\n\
         clusters:\n- name: local\n  cluster: {server: 'http://127.0.0.1:8001'}\n",
    )
    .expect("write");
    let conn = ConnectionConfig::from_kubeconfig_file(&path).expect("config");
    assert_eq!(conn.server, "http://127.0.0.1:8001");
    assert!(matches!(conn.credentials, Credentials::None));
    RestCluster::new(conn, RestOptions::default()).expect("client");
}

#[test]
fn unsupported_and_contradictory_settings_are_refused() {
    let dir = TempDir::new().expect("tempdir");
    let exec = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443",
        "exec:\n  command: aws\n  apiVersion: client.authentication.k8s.io/v1",
    );
    let error = ConnectionConfig::from_kubeconfig_file(&exec)
        .expect_err("exec")
        .to_string();
    assert!(error.contains("users[u].exec"), "{error}");

    let both = write_kubeconfig(
        dir.path(),
        &format!(
            "server: https://api.example:6443\ninsecure-skip-tls-verify: true\n\
             certificate-authority-data: {}",
            b64("CA")
        ),
        "",
    );
    let error = ConnectionConfig::from_kubeconfig_file(&both)
        .expect_err("both")
        .to_string();
    assert!(
        error.contains("clusters[c].insecure-skip-tls-verify"),
        "{error}"
    );

    let no_scheme = write_kubeconfig(dir.path(), "server: api.example:6443", "");
    let error = ConnectionConfig::from_kubeconfig_file(&no_scheme)
        .expect_err("scheme")
        .to_string();
    assert!(error.contains("clusters[c].server"), "{error}");
}

#[test]
fn a_ca_file_that_holds_no_certificate_is_named() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("ca.crt"), "not a certificate").expect("ca");
    let config = write_kubeconfig(
        dir.path(),
        "server: https://api.example:6443\ncertificate-authority: ca.crt",
        "",
    );
    let conn = ConnectionConfig::from_kubeconfig_file(&config).expect("config");
    let error = RestCluster::new(conn, RestOptions::default())
        .expect_err("no certificate")
        .to_string();
    assert!(
        error.contains("clusters[c].certificate-authority") && error.contains("ca.crt"),
        "{error}"
    );
}

fn service_account(dir: &Path) {
    std::fs::write(dir.join("token"), "pod-token\n").expect("token");
    std::fs::write(dir.join("ca.crt"), Pki::new("cluster CA").ca_pem()).expect("ca");
    std::fs::write(dir.join("namespace"), "cubepod-system").expect("namespace");
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

#[test]
fn the_in_cluster_service_account() {
    let dir = TempDir::new().expect("tempdir");
    service_account(dir.path());
    let conn = ConnectionConfig::from_in_cluster(
        dir.path(),
        env(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]),
    )
    .expect("in-cluster");
    assert_eq!(conn.server, "https://10.96.0.1:443");
    assert_eq!(conn.namespace.as_deref(), Some("cubepod-system"));
    assert!(matches!(conn.credentials, Credentials::TokenFile { .. }));
    assert!(conn.tls.ca.is_some());
    assert!(!format!("{conn:?}").contains("pod-token"));
    RestCluster::new(conn, RestOptions::default()).expect("client");

    let v6 = ConnectionConfig::from_in_cluster(
        dir.path(),
        env(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]),
    )
    .expect("ipv6");
    assert_eq!(v6.server, "https://[fd00::1]:443");
}

#[test]
fn in_cluster_without_a_token_names_the_file() {
    let dir = TempDir::new().expect("tempdir");
    let error = ConnectionConfig::from_in_cluster(
        dir.path(),
        env(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]),
    )
    .expect_err("no token")
    .to_string();
    assert!(
        error.starts_with(&format!(
            "in-cluster token file {}: No such file",
            dir.path().join("token").display()
        )),
        "{error}"
    );
}

#[test]
fn load_prefers_kubeconfig_then_in_cluster_then_home() {
    let sa = TempDir::new().expect("tempdir");
    service_account(sa.path());
    let kube = TempDir::new().expect("tempdir");
    let config = write_kubeconfig(kube.path(), "server: https://api.example:6443", "");
    let in_cluster = [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ];

    // An explicit KUBECONFIG (first of a list) wins over the pod's environment.
    let list = format!("{}:/elsewhere/config", config.display());
    let mut vars = in_cluster.to_vec();
    vars.push(("KUBECONFIG", list.as_str()));
    let (conn, described) = ConnectionConfig::load_with(sa.path(), env(&vars))
        .expect("load")
        .expect("found");
    assert_eq!(conn.server, "https://api.example:6443");
    assert!(described.contains("context \"test\""), "{described}");

    let (conn, _) = ConnectionConfig::load_with(sa.path(), env(&in_cluster))
        .expect("load")
        .expect("found");
    assert_eq!(conn.server, "https://10.96.0.1:443");

    let home = TempDir::new().expect("tempdir");
    let home_path = home.path().display().to_string();
    assert!(
        ConnectionConfig::load_with(sa.path(), env(&[("HOME", home_path.as_str())]))
            .expect("load")
            .is_none()
    );
    std::fs::create_dir(home.path().join(".kube")).expect("mkdir");
    write_kubeconfig(&home.path().join(".kube"), "server: https://home:6443", "");
    let (conn, _) = ConnectionConfig::load_with(sa.path(), env(&[("HOME", home_path.as_str())]))
        .expect("load")
        .expect("found");
    assert_eq!(conn.server, "https://home:6443");
}
