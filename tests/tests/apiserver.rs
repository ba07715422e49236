//! The fake API server over real HTTP: verbs, Status bodies, watches (and 410 after
//! compaction), merge patches, auth, TokenReviews and SubjectAccessReviews, fault rules and
//! HTTP/2, through a plain hyper + rustls client written here (and the controller's REST
//! client for the reviews).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cubepod_apiserver::MemoryClusterConfig;
use cubepod_apiserver::access::Subject;
use cubepod_kube::rest::{ConnectionConfig, RestCluster, RestOptions};
use cubepod_kube::review::{Decision, NonResourceRequest, Reviewer, UserInfo};
use cubepod_kube::{ApiErrorKind, Resource};
use cubepod_tests::apiserver::{
    FakeApiServer, FakeOptions, FaultAction, FaultRule, KubeconfigAuth, PROMETHEUS_TOKEN,
    PROMETHEUS_USER, client_config,
};
use cubepod_tests::kubectl::Kubectl;
use cubepod_tests::refusals;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER, WARNING};
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const TOKEN: &str = "s3cret";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const SANDBOXES: &str = "/apis/cubepod.io/v1alpha1/namespaces/ns/sandboxes";
const MERGE_PATCH: &str = "application/merge-patch+json";

/// The namespace of these tests' objects, besides the fake's own.
const NS: &str = "ns";

fn start(options: FakeOptions) -> FakeApiServer {
    let mut namespaces = options.namespaces.clone();
    namespaces.push(NS.into());
    FakeApiServer::start(FakeOptions {
        token: Some(TOKEN.into()),
        cluster_config: MemoryClusterConfig::instant(),
        namespaces,
        ..options
    })
    .expect("fake API server starts")
}

/// One connection per request: TLS with the server's CA, HTTP/1.1 or, when offered and
/// negotiated, HTTP/2.
struct Client {
    server_url: String,
    addr: std::net::SocketAddr,
    tls: Option<TlsConnector>,
    token: Option<String>,
    accept: Option<String>,
}

impl Client {
    fn new(server: &FakeApiServer, alpn: &[&[u8]]) -> Self {
        let tls = server.url().starts_with("https").then(|| {
            let config = client_config(server.ca_der(), alpn).expect("client TLS config");
            TlsConnector::from(Arc::new(config))
        });
        Self {
            server_url: server.url(),
            addr: server.addr(),
            tls,
            token: Some(TOKEN.into()),
            accept: None,
        }
    }

    fn http1(server: &FakeApiServer) -> Self {
        Self::new(server, &[b"http/1.1"])
    }

    fn with_token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(str::to_owned);
        self
    }

    fn with_accept(mut self, accept: &str) -> Self {
        self.accept = Some(accept.to_owned());
        self
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> Result<Response<Incoming>, Box<dyn std::error::Error + Send + Sync>> {
        let tcp = TcpStream::connect(self.addr).await?;
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let build = |uri: String| {
            let mut request = Request::builder()
                .method(method.clone())
                .uri(uri)
                .header(HOST, self.addr.to_string())
                .header(CONTENT_TYPE, content_type);
            if let Some(token) = &self.token {
                request = request.header(AUTHORIZATION, format!("Bearer {token}"));
            }
            if let Some(accept) = &self.accept {
                request = request.header(ACCEPT, accept);
            }
            request.body(Full::new(Bytes::from(bytes.clone())))
        };
        match &self.tls {
            Some(connector) => {
                let name = ServerName::try_from("localhost")?;
                let stream = connector.connect(name, tcp).await?;
                let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                // HTTP/2 takes the scheme and authority from an absolute URI.
                let uri = if h2 {
                    format!("{}{path}", self.server_url)
                } else {
                    path.to_owned()
                };
                exchange(stream, h2, build(uri)?).await
            }
            None => exchange(tcp, false, build(path.to_owned())?).await,
        }
    }

    /// A request whose answer is read whole: (status, JSON body).
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let content_type = if method == Method::PATCH {
            MERGE_PATCH
        } else {
            "application/json"
        };
        let response = self
            .send(method, path, content_type, body.as_ref())
            .await
            .expect("request answered");
        read_json(response).await
    }
}

async fn exchange<IO>(
    io: IO,
    h2: bool,
    request: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, Box<dyn std::error::Error + Send + Sync>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    if h2 {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(connection);
        Ok(sender.send_request(request).await?)
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(connection);
        Ok(sender.send_request(request).await?)
    }
}

async fn read_json(response: Response<Incoming>) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("whole body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes));
    });
    (status, value)
}

/// The lines of a watch response, one JSON event at a time.
struct Events {
    body: Incoming,
    buffer: Vec<u8>,
}

impl Events {
    fn new(response: Response<Incoming>) -> Self {
        Self {
            body: response.into_body(),
            buffer: Vec::new(),
        }
    }

    /// The next event; `None` when the stream ended. Panics after 10 s.
    async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(Duration::from_secs(10), self.read_line())
            .await
            .expect("a watch event or the stream's end within 10 s")
    }

    async fn read_line(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).expect("an event is JSON"));
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

fn pod(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": app } },
        "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
    })
}

fn sandbox(name: &str) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": { "name": name },
        "spec": { "image": "busybox" },
    })
}

fn assert_status(body: &Value, code: u16, reason: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn create_conflict_list_get_delete() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);

    let (code, created) = client.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["metadata"]["namespace"], "ns");
    assert!(created["metadata"]["resourceVersion"].is_string());

    let (code, again) = client.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_status(&again, 409, "AlreadyExists");
    assert_eq!(again["details"]["name"], "a");
    assert_eq!(again["details"]["kind"], "pods");

    client.call(Method::POST, PODS, Some(pod("b", "y"))).await;
    let (code, list) = client
        .call(Method::GET, &format!("{PODS}?labelSelector=app%3Dx"), None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(
        list["metadata"]["resourceVersion"],
        server.cluster().resource_version()
    );
    let names: Vec<&Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| &i["metadata"]["name"])
        .collect();
    assert_eq!(names, [&json!("a")]);

    let (code, all) = client.call(Method::GET, "/api/v1/pods", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2));

    let (code, got) = client.call(Method::GET, &format!("{PODS}/a"), None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"]);

    let (code, deleted) = client
        .call(Method::DELETE, &format!("{PODS}/a"), None)
        .await;
    assert_eq!(code, StatusCode::OK, "{deleted}");
    // A Pod's delete answers with the Pod, as kube-apiserver's pod storage does
    // (`ReturnDeletedObject`); other kinds answer a Success Status.
    assert_eq!(deleted["kind"], "Pod", "{deleted}");
    assert_eq!(deleted["metadata"]["uid"], created["metadata"]["uid"]);
    let (code, missing) = client.call(Method::GET, &format!("{PODS}/a"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_status(&missing, 404, "NotFound");
    let (code, _) = client
        .call(Method::DELETE, &format!("{PODS}/a"), None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // The cluster saw the client's writes, and the log saw every request.
    let writes = server.cluster().writes();
    assert_eq!(writes.iter().filter(|w| w.verb == "create").count(), 3);
    let requests = server.requests();
    assert_eq!(requests.len(), 9);
    assert!(requests.iter().all(|r| r.resource == Some(Resource::Pod)));
    assert_eq!(requests[1].status, Some(409));
}

/// Names of a list's items, and its continue token.
fn page_of(list: &Value) -> (Vec<String>, Option<String>) {
    let names = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    (
        names,
        list["metadata"]["continue"].as_str().map(str::to_owned),
    )
}

#[tokio::test]
async fn a_list_is_paged_by_its_limit_unless_the_server_ignores_it() {
    for ignore_limit in [false, true] {
        let server = start(FakeOptions {
            ignore_limit,
            ..FakeOptions::default()
        });
        let client = Client::http1(&server);
        for name in ["a", "b", "c"] {
            let (code, _) = client.call(Method::POST, PODS, Some(pod(name, "x"))).await;
            assert_eq!(code, StatusCode::CREATED);
        }
        let (code, first) = client
            .call(Method::GET, &format!("{PODS}?limit=2"), None)
            .await;
        assert_eq!(code, StatusCode::OK);
        let (names, token) = page_of(&first);
        if ignore_limit {
            // Whole, with no continue token: the client has nothing to page on.
            assert_eq!(
                (names, token),
                (vec!["a".into(), "b".into(), "c".into()], None)
            );
            continue;
        }
        assert_eq!(names, ["a", "b"]);
        let token = token.expect("a continue token after a short page");
        let (_, rest) = client
            .call(
                Method::GET,
                &format!("{PODS}?limit=2&continue={token}"),
                None,
            )
            .await;
        assert_eq!(page_of(&rest), (vec!["c".into()], None));
    }
}

#[tokio::test]
async fn watch_from_a_lists_version_sees_a_later_create() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    client
        .call(Method::POST, SANDBOXES, Some(sandbox("old")))
        .await;
    let (_, list) = client.call(Method::GET, SANDBOXES, None).await;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list resourceVersion");

    let path = format!("{SANDBOXES}?watch=1&resourceVersion={version}&timeoutSeconds=5");
    let response = client
        .send(Method::GET, &path, "application/json", None)
        .await
        .expect("watch answered");
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Events::new(response);

    // The watch holds its connection open; other requests go on beside it.
    let (code, _) = client
        .call(Method::POST, SANDBOXES, Some(sandbox("new")))
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let event = events.next().await.expect("an event");
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_eq!(event["object"]["metadata"]["name"], "new");

    client
        .call(
            Method::PATCH,
            &format!("{SANDBOXES}/new"),
            Some(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await;
    let event = events.next().await.expect("an event");
    assert_eq!(event["type"], "MODIFIED", "{event}");
}

#[tokio::test]
async fn watch_without_a_version_starts_with_the_objects_and_ends_with_a_bookmark() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    client.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    client.call(Method::POST, PODS, Some(pod("b", "y"))).await;

    let path = format!(
        "{PODS}?watch=true&labelSelector=app%3Dx&allowWatchBookmarks=true&timeoutSeconds=1"
    );
    let response = client
        .send(Method::GET, &path, "application/json", None)
        .await
        .expect("watch answered");
    let mut events = Events::new(response);
    let first = events.next().await.expect("the existing object");
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "a");
    let bookmark = events.next().await.expect("a bookmark at the timeout");
    assert_eq!(bookmark["type"], "BOOKMARK", "{bookmark}");
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        server.cluster().resource_version()
    );
    assert_eq!(
        events.next().await,
        None,
        "the stream ends after timeoutSeconds"
    );
}

#[tokio::test]
async fn the_metadata_alone_is_served_as_client_gos_metadata_client_asks_for_it() {
    const SECRETS: &str = "/api/v1/namespaces/ns/secrets";
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns", "labels": {"app": "x"}},
        "data": {"token": "c2VjcmV0"}});
    let (code, _) = client.call(Method::POST, SECRETS, Some(secret)).await;
    assert_eq!(code, StatusCode::CREATED);
    let partial = |body: &Value| {
        assert_eq!(body["kind"], "PartialObjectMetadata", "{body}");
        assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(body["metadata"]["labels"]["app"], "x");
        assert!(body.get("data").is_none(), "no data: {body}");
    };

    let list = Client::http1(&server).with_accept(
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    );
    let (code, body) = list.call(Method::GET, SECRETS, None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["kind"], "PartialObjectMetadataList", "{body}");
    assert!(body["metadata"]["resourceVersion"].is_string());
    partial(&body["items"][0]);
    // The list's media type for one object (and the other way round) is not served: the
    // header's plain JSON is.
    let (_, whole) = list.call(Method::GET, &format!("{SECRETS}/s"), None).await;
    assert_eq!(whole["kind"], "Secret");

    let one = Client::http1(&server).with_accept(
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    );
    let (_, body) = one.call(Method::GET, &format!("{SECRETS}/s"), None).await;
    partial(&body);
    let response = one
        .send(
            Method::GET,
            &format!("{SECRETS}?watch=true&resourceVersion=0&timeoutSeconds=5"),
            "application/json",
            None,
        )
        .await
        .expect("watch answered");
    let mut events = Events::new(response);
    let added = events.next().await.expect("the existing Secret");
    assert_eq!(added["type"], "ADDED");
    partial(&added["object"]);

    // A write's answer is rendered as its Accept asks, as the API server renders every
    // answer: a create's, a patch's, and a delete's while the object stays (its finalizer).
    let other = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "t", "namespace": "ns", "labels": {"app": "x"},
                     "finalizers": ["example.com/hold"]},
        "data": {"token": "c2VjcmV0"}});
    let (code, created) = one.call(Method::POST, SECRETS, Some(other)).await;
    assert_eq!(code, StatusCode::CREATED);
    partial(&created);
    let annotate = json!({"metadata": {"annotations": {"a": "b"}}});
    let (code, patched) = one
        .call(
            Method::PATCH,
            &format!("{SECRETS}/t"),
            Some(annotate.clone()),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    partial(&patched);
    assert_eq!(patched["metadata"]["annotations"]["a"], "b");
    let (code, held) = one
        .call(Method::DELETE, &format!("{SECRETS}/t"), None)
        .await;
    assert_eq!(code, StatusCode::OK);
    partial(&held);
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    // Asked for whole, the same write answers whole.
    let (_, whole) = client
        .call(Method::PATCH, &format!("{SECRETS}/s"), Some(annotate))
        .await;
    assert_eq!(whole["kind"], "Secret", "{whole}");
    assert_eq!(whole["data"]["token"], "c2VjcmV0");
    // A delete's Success Status is sent as it is, whatever the Accept.
    let (code, status) = one
        .call(Method::DELETE, &format!("{SECRETS}/s"), None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(status["kind"], "Status", "{status}");
}

#[tokio::test]
async fn watch_from_a_compacted_version_gets_a_410_error_event() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    client.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    let (_, list) = client.call(Method::GET, PODS, None).await;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    client.call(Method::POST, PODS, Some(pod("b", "x"))).await;
    server.cluster().compact();

    let path = format!("{PODS}?watch=1&resourceVersion={version}");
    let response = client
        .send(Method::GET, &path, "application/json", None)
        .await
        .expect("watch answered");
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Events::new(response);
    let error = events.next().await.expect("an ERROR event");
    assert_eq!(error["type"], "ERROR", "{error}");
    assert_status(&error["object"], 410, "Expired");
    assert_eq!(events.next().await, None);
}

#[tokio::test]
async fn merge_patches_the_status_subresource_and_refuses_other_patch_types() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    client
        .call(Method::POST, SANDBOXES, Some(sandbox("s")))
        .await;

    let status_path = format!("{SANDBOXES}/s/status");
    let patch = json!({"status": {"phase": "Running"}, "spec": {"image": "ignored"}});
    let (code, patched) = client.call(Method::PATCH, &status_path, Some(patch)).await;
    assert_eq!(code, StatusCode::OK, "{patched}");
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(
        patched["spec"]["image"], "busybox",
        "/status writes status only"
    );

    let response = client
        .send(
            Method::PATCH,
            &status_path,
            "application/strategic-merge-patch+json",
            Some(&json!({"status": {}})),
        )
        .await
        .expect("answered");
    let (code, refused) = read_json(response).await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_status(&refused, 415, "UnsupportedMediaType");

    // A server-side apply names its field manager.
    let response = client
        .send(
            Method::PATCH,
            &format!("{SANDBOXES}/s"),
            "application/apply-patch+yaml",
            Some(&sandbox("s")),
        )
        .await
        .expect("answered");
    let (code, refused) = read_json(response).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required \
         for apply patch"
    );

    // A stale resourceVersion in the patch is a Conflict.
    let stale = json!({"metadata": {"resourceVersion": "1"}, "spec": {"image": "x"}});
    let (code, conflict) = client
        .call(Method::PATCH, &format!("{SANDBOXES}/s"), Some(stale))
        .await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_status(&conflict, 409, "Conflict");
}

#[tokio::test]
async fn bad_input_gets_a_status_not_a_panic() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);

    let response = client
        .send(Method::POST, PODS, "application/json", None)
        .await
        .expect("answered");
    let (code, empty) = read_json(response).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_status(&empty, 400, "BadRequest");

    let (code, array) = client.call(Method::POST, PODS, Some(json!([1, 2]))).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_status(&array, 400, "BadRequest");

    for path in [
        "/api/v1/namespaces/ns/endpoints",
        "/nope",
        "/api/v1/namespaces/ns/pods/a/exec",
    ] {
        let (code, body) = client.call(Method::GET, path, None).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{path}");
        assert_status(&body, 404, "NotFound");
    }
    let (code, body) = client
        .call(Method::GET, &format!("{PODS}?watch=maybe"), None)
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_status(&body, 400, "BadRequest");
    let (code, body) = client
        .call(
            Method::GET,
            &format!("{PODS}?watch=1&resourceVersion=abc"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    // A PUT replaces an object that exists: of one that does not, NotFound, as for a Pod.
    let (code, body) = client
        .call(Method::PUT, &format!("{PODS}/a"), Some(pod("a", "x")))
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");
    assert_status(&body, 404, "NotFound");
    let (code, _) = client
        .call(Method::POST, "/api/v1/pods", Some(pod("a", "x")))
        .await;
    assert_eq!(
        code,
        StatusCode::METHOD_NOT_ALLOWED,
        "no create across namespaces"
    );

    // generateName, as event recorders use it.
    let event = json!({"metadata": {"generateName": "sb."}, "reason": "Created"});
    let (code, created) = client
        .call(Method::POST, "/api/v1/namespaces/ns/events", Some(event))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let name = created["metadata"]["name"].as_str().expect("a name");
    assert!(name.starts_with("sb.") && name.len() == 8, "{name}");
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_unauthorized_and_tokens_rotate() {
    let server = start(FakeOptions::default());
    for token in [None, Some("wrong")] {
        let client = Client::http1(&server).with_token(token);
        let (code, body) = client.call(Method::GET, PODS, None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "token {token:?}");
        assert_status(&body, 401, "Unauthorized");
    }
    server.set_token(Some("rotated"));
    let (code, _) = Client::http1(&server).call(Method::GET, PODS, None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let rotated = Client::http1(&server).with_token(Some("rotated"));
    let (code, _) = rotated.call(Method::GET, PODS, None).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn a_503_rule_with_retry_after_fires_twice_then_requests_succeed() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    server.faults().add(
        FaultRule::new(FaultAction::unavailable(1))
            .method(Method::GET)
            .resource(Resource::Pod)
            .times(2),
    );
    // Not matched: a different verb goes through.
    let (code, _) = client.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    assert_eq!(code, StatusCode::CREATED);

    for _ in 0..2 {
        let response = client
            .send(Method::GET, &format!("{PODS}/a"), "application/json", None)
            .await
            .expect("answered");
        assert_eq!(
            response.headers().get(RETRY_AFTER).map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        let (code, body) = read_json(response).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_status(&body, 503, "ServiceUnavailable");
        assert_eq!(body["details"]["retryAfterSeconds"], 1);
    }
    let (code, _) = client.call(Method::GET, &format!("{PODS}/a"), None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(server.faults().rules().is_empty(), "the rule is spent");
    let statuses: Vec<Option<u16>> = server.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Some(201), Some(503), Some(503), Some(200)]);
}

#[tokio::test]
async fn reset_and_watch_limit_faults() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    server.faults().add(
        FaultRule::new(FaultAction::Reset)
            .resource(Resource::Secret)
            .times(1),
    );
    let path = "/api/v1/namespaces/ns/secrets";
    assert!(
        client
            .send(Method::GET, path, "application/json", None)
            .await
            .is_err()
    );
    assert_eq!(server.requests()[0].status, None);
    let (code, _) = client.call(Method::GET, path, None).await;
    assert_eq!(code, StatusCode::OK);

    server
        .faults()
        .add(FaultRule::new(FaultAction::EndWatchAfter(1)).watch(true));
    client.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    client.call(Method::POST, PODS, Some(pod("b", "x"))).await;
    let response = client
        .send(
            Method::GET,
            &format!("{PODS}?watch=1"),
            "application/json",
            None,
        )
        .await
        .expect("watch answered");
    let mut events = Events::new(response);
    assert_eq!(events.next().await.expect("one event")["type"], "ADDED");
    assert_eq!(events.next().await, None, "cut after one event");
}

#[tokio::test]
async fn http2_is_negotiated_when_offered() {
    let server = start(FakeOptions::default());
    let both = Client::new(&server, &[b"h2", b"http/1.1"]);
    let response = both
        .send(Method::GET, PODS, "application/json", None)
        .await
        .expect("answered");
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(read_json(response).await.0, StatusCode::OK);

    // A watch streams over HTTP/2 as well.
    let response = both
        .send(
            Method::GET,
            &format!("{PODS}?watch=1&timeoutSeconds=5"),
            "",
            None,
        )
        .await
        .expect("watch answered");
    let mut events = Events::new(response);
    both.call(Method::POST, PODS, Some(pod("a", "x"))).await;
    assert_eq!(events.next().await.expect("an event")["type"], "ADDED");

    let response = Client::http1(&server)
        .send(Method::GET, PODS, "application/json", None)
        .await
        .expect("answered");
    assert_eq!(response.version(), Version::HTTP_11);
    let versions: Vec<Version> = server.requests().iter().map(|r| r.version).collect();
    assert_eq!(
        versions,
        [
            Version::HTTP_2,
            Version::HTTP_2,
            Version::HTTP_2,
            Version::HTTP_11
        ]
    );
}

#[tokio::test]
async fn discovery_names_the_crds_until_they_are_uninstalled() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    let (code, version) = client.call(Method::GET, "/version", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(version["major"], "1");

    let (code, resources) = client
        .call(Method::GET, "/apis/cubepod.io/v1alpha1", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(resources["kind"], "APIResourceList");
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "sandboxes",
            "sandboxes/status",
            "podwarmpools",
            "podwarmpools/status",
            "podwarmpools/scale",
            "policyrollouts",
            "policyrollouts/status"
        ]
    );
    // The scale client finds the Scale's own kind here, as the API server lists it.
    let scale = resources["resources"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["name"] == "podwarmpools/scale"))
        .expect("podwarmpools/scale");
    assert_eq!(
        (&scale["group"], &scale["version"], &scale["kind"]),
        (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
    );

    server.set_crds_installed(false);
    let (code, body) = client
        .call(Method::GET, "/apis/cubepod.io/v1alpha1", None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
    let (code, _) = client.call(Method::GET, SANDBOXES, None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (_, groups) = client.call(Method::GET, "/apis", None).await;
    assert!(!groups.to_string().contains("cubepod.io"), "{groups}");

    server.set_crds_installed(true);
    let (code, _) = client.call(Method::GET, SANDBOXES, None).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn plain_http_without_auth() {
    let server = FakeApiServer::start(FakeOptions {
        tls: false,
        ..FakeOptions::default()
    })
    .expect("starts");
    assert!(server.url().starts_with("http://"));
    let client = Client::http1(&server).with_token(None);
    let (code, _) = client.call(Method::GET, PODS, None).await;
    assert_eq!(code, StatusCode::OK);
}

/// An invalid custom resource is a 422 Status as `errors.NewInvalid` makes it (the kind, not the
/// resource, in `details`, one cause per field), and nothing is written; a create in a namespace
/// that does not exist is NotFound; namespaces are read as the API server serves them.
#[tokio::test]
async fn an_invalid_sandbox_is_a_422_with_causes_and_namespaces_are_served() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    let mut bad = sandbox("bad");
    bad["spec"]["idleTimeoutSeconds"] = json!(-5);
    bad["spec"]["desiredState"] = json!("Stopped");
    let (code, refused) = client.call(Method::POST, SANDBOXES, Some(bad)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_status(&refused, 422, "Invalid");
    assert_eq!(
        refused["details"],
        json!({"name": "bad", "group": "cubepod.io", "kind": "Sandbox", "causes": [
            {"reason": "FieldValueNotSupported", "field": "spec.desiredState",
             "message": "Unsupported value: \"Stopped\": supported values: \"Running\", \"Paused\""},
            {"reason": "FieldValueInvalid", "field": "spec.idleTimeoutSeconds",
             "message": "Invalid value: -5: spec.idleTimeoutSeconds in body should be greater than or equal to 0"},
            {"reason": "FieldValueInvalid", "field": "<nil>",
             "message": "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"},
        ]})
    );
    assert!(
        refused["message"].as_str().is_some_and(
            |m| m.starts_with("Sandbox.cubepod.io \"bad\" is invalid: [spec.desiredState: ")
        ),
        "{refused}"
    );
    assert_eq!(server.cluster().count(Resource::Sandbox), 0);

    let elsewhere = "/apis/cubepod.io/v1alpha1/namespaces/nowhere/sandboxes";
    let (code, missing) = client
        .call(Method::POST, elsewhere, Some(sandbox("a")))
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["message"], "namespaces \"nowhere\" not found");

    let (code, created) = client
        .call(Method::POST, SANDBOXES, Some(sandbox("a")))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["spec"]["desiredState"], "Running", "defaulted");

    let (code, namespace) = client
        .call(Method::GET, "/api/v1/namespaces/ns", None)
        .await;
    assert_eq!(code, StatusCode::OK, "{namespace}");
    assert_eq!(namespace["kind"], "Namespace");
    assert_eq!(namespace["status"]["phase"], "Active");
    let (code, list) = client.call(Method::GET, "/api/v1/namespaces", None).await;
    assert_eq!(code, StatusCode::OK, "{list}");
    assert_eq!(list["kind"], "NamespaceList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "cubepod-system",
            "cubepod-workloads",
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "ns"
        ]
    );
    let (code, gone) = client
        .call(Method::GET, "/api/v1/namespaces/nowhere", None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_status(&gone, 404, "NotFound");
    assert_eq!(gone["message"], "namespaces \"nowhere\" not found");
    let (code, _) = client
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"metadata": {"name": "x"}})),
        )
        .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
}

/// The real kubectl against the fake: the same table of refusals as against the embedded
/// cluster (`tests/tests/kubectl.rs`), the same lines, since both serve `kube::memory::serve`.
#[test]
fn kubectl_gets_the_refusals_of_the_embedded_cluster_from_the_fake_too() {
    let server = FakeApiServer::start(FakeOptions {
        token: Some(TOKEN.into()),
        cluster_config: MemoryClusterConfig::instant(),
        ..FakeOptions::default()
    })
    .expect("fake API server starts");
    let home = tempfile::tempdir().expect("temp dir");
    let kubeconfig = server
        .write_kubeconfig(home.path(), &KubeconfigAuth::Token(TOKEN.into()))
        .expect("kubeconfig written");
    let kubectl = Kubectl::new(&kubeconfig, home.path());
    refusals::check(&kubectl);
    refusals::check_defaults_and_not_found(&kubectl);
}

#[test]
fn starts_and_stops_outside_a_runtime_and_writes_a_kubeconfig() {
    let mut server = FakeApiServer::start(FakeOptions::default()).expect("starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = server
        .write_kubeconfig(
            dir.path(),
            &KubeconfigAuth::TokenFile(dir.path().join("token")),
        )
        .expect("kubeconfig written");
    let text = std::fs::read_to_string(path).expect("kubeconfig read");
    let config: Value = serde_yaml_ng::from_str(&text).expect("kubeconfig is YAML");
    assert_eq!(config["current-context"], "fake");
    assert_eq!(config["clusters"][0]["cluster"]["server"], server.url());
    let ca = config["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("CA data");
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .expect("base64");
    assert_eq!(pem, server.ca_pem().as_bytes());
    assert!(config["users"][0]["user"]["tokenFile"].is_string());

    // Seeding without a runtime works; then the server stops and refuses connections.
    server
        .cluster()
        .insert(
            Resource::Secret,
            json!({"metadata": {"name": "s", "namespace": "cubepod-workloads"}}),
        )
        .expect("seeded");
    let addr = server.addr();
    server.shutdown();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "still accepting after shutdown"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What kubectl asks of the server besides the verbs: Tables, field validation against the
/// CRD's schema (unknown fields pruned), field selectors, and dry runs refused.
#[tokio::test]
async fn tables_field_validation_field_selectors_and_dry_run() {
    let server = start(FakeOptions::default());
    let client = Client::http1(&server);
    let mut typo = sandbox("a");
    typo["spec"]["colour"] = json!("blue");

    // Strict: refused, naming the field; nothing created.
    let (code, status) = client
        .call(
            Method::POST,
            &format!("{SANDBOXES}?fieldValidation=Strict"),
            Some(typo.clone()),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("unknown field \"spec.colour\""),
        "{message}"
    );
    let (code, _) = client
        .call(Method::GET, &format!("{SANDBOXES}/a"), None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // A dry run is refused rather than written.
    let (code, _) = client
        .call(
            Method::POST,
            &format!("{SANDBOXES}?dryRun=All"),
            Some(sandbox("a")),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, _) = client
        .call(Method::GET, &format!("{SANDBOXES}/a"), None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // Warn, the default: created without the field, and a Warning header says so.
    let response = client
        .send(Method::POST, SANDBOXES, "application/json", Some(&typo))
        .await
        .unwrap();
    let warning = response.headers().get(WARNING).cloned();
    let (code, created) = read_json(response).await;
    assert_eq!(code, StatusCode::CREATED);
    assert!(created["spec"].get("colour").is_none(), "{created}");
    let warning = warning.expect("a Warning header");
    assert_eq!(
        warning.to_str().unwrap(),
        "299 - \"unknown field \\\"spec.colour\\\"\""
    );
    client
        .call(Method::POST, SANDBOXES, Some(sandbox("b")))
        .await;

    // A Table, as kubectl get asks for it, with the CRD's printer columns.
    let tables = Client::http1(&server)
        .with_accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
    let (code, table) = tables.call(Method::GET, SANDBOXES, None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["columnDefinitions"][0]["name"], "Name");
    assert_eq!(table["columnDefinitions"][1]["name"], "Phase");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["cells"][0], "a");
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(rows[0]["object"]["metadata"]["name"], "a");

    // A field selector, on a list and in a Table.
    let (_, list) = client
        .call(
            Method::GET,
            &format!("{SANDBOXES}?fieldSelector=metadata.name%3Db"),
            None,
        )
        .await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b"]);
    let (_, one) = tables
        .call(
            Method::GET,
            &format!("{SANDBOXES}?fieldSelector=metadata.name!%3Db&includeObject=None"),
            None,
        )
        .await;
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert!(one["rows"][0].get("object").is_none());
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

fn access_review(user: &str, groups: &[&str], path: &str, verb: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups,
                 "nonResourceAttributes": {"path": path, "verb": verb}},
    })
}

#[tokio::test]
async fn token_and_access_reviews_answer_from_the_registered_tokens_and_grants() {
    let server = start(FakeOptions::default());
    server
        .access()
        .add_token("bob-token", UserInfo::named("bob", &["dev"]));
    server
        .access()
        .allow(Subject::Group("dev".into()), &["get"], &["/debug/*"]);
    let client = Client::http1(&server);
    let review = |token: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": token}})
    };

    let (code, answer) = client
        .call(Method::POST, TOKEN_REVIEWS, Some(review(PROMETHEUS_TOKEN)))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["status"]["authenticated"], true);
    assert_eq!(answer["status"]["user"]["username"], PROMETHEUS_USER);
    assert!(
        answer.to_string().find(PROMETHEUS_TOKEN).is_none(),
        "{answer}"
    );
    let (_, admin) = client
        .call(Method::POST, TOKEN_REVIEWS, Some(review(TOKEN)))
        .await;
    assert_eq!(admin["status"]["user"]["groups"][0], "system:masters");
    let (_, unknown) = client
        .call(Method::POST, TOKEN_REVIEWS, Some(review("nope")))
        .await;
    assert_eq!(unknown["status"]["authenticated"], false);
    let (code, _) = client
        .call(Method::POST, TOKEN_REVIEWS, Some(review("")))
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    let allowed = |answer: &Value| answer["status"]["allowed"] == true;
    let (code, answer) = client
        .call(
            Method::POST,
            ACCESS_REVIEWS,
            Some(access_review(PROMETHEUS_USER, &[], "/metrics", "get")),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{answer}");
    assert!(allowed(&answer), "{answer}");
    for (user, groups, path, verb, expected) in [
        (PROMETHEUS_USER, &[][..], "/metrics", "post", false),
        (PROMETHEUS_USER, &[][..], "/healthz", "get", false),
        ("bob", &["dev"][..], "/debug/pprof", "get", true),
        ("bob", &["dev"][..], "/metrics", "get", false),
        ("carol", &["dev"][..], "/debug/x", "get", true),
        ("root", &["system:masters"][..], "/anything", "delete", true),
    ] {
        let (_, answer) = client
            .call(
                Method::POST,
                ACCESS_REVIEWS,
                Some(access_review(user, groups, path, verb)),
            )
            .await;
        assert_eq!(allowed(&answer), expected, "{user} {verb} {path}: {answer}");
    }
    let (code, _) = client
        .call(
            Method::POST,
            ACCESS_REVIEWS,
            Some(access_review("", &[], "/metrics", "get")),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    // The reviews are behind the server's own authentication, as every path.
    let (code, _) = Client::http1(&server)
        .with_token(None)
        .call(Method::POST, TOKEN_REVIEWS, Some(review(PROMETHEUS_TOKEN)))
        .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_rest_client_reviews_tokens_and_access_on_the_api_server() {
    let server = start(FakeOptions::default());
    server
        .access()
        .add_token("bob-token", UserInfo::named("bob", &[]));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))
        .unwrap();
    let conn = ConnectionConfig::from_kubeconfig_file(&kubeconfig).expect("the kubeconfig");
    let rest = RestCluster::new(conn, RestOptions::default()).expect("a client");

    let prometheus = rest
        .review_token(PROMETHEUS_TOKEN)
        .await
        .expect("reviewed")
        .expect("authenticated");
    assert_eq!(prometheus.username, PROMETHEUS_USER);
    assert_eq!(rest.review_token("nope").await.expect("reviewed"), None);
    let get = |user: UserInfo, path: &str| NonResourceRequest {
        user,
        verb: "get".into(),
        path: path.into(),
    };
    assert_eq!(
        rest.review_access(&get(prometheus.clone(), "/metrics"))
            .await
            .expect("reviewed"),
        Decision::Allow
    );
    let bob = UserInfo::named("bob", &[]);
    assert!(matches!(
        rest.review_access(&get(bob, "/metrics"))
            .await
            .expect("reviewed"),
        Decision::Deny { .. }
    ));
    // A controller whose token the API server refuses gets an error, not an answer.
    server.set_token(Some("rotated"));
    let refused = rest.review_token(PROMETHEUS_TOKEN).await.unwrap_err();
    assert!(refused.is(ApiErrorKind::Unauthorized), "{refused:?}");
}
