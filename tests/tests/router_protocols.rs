//! The sandbox router's protocols and its metrics, as a user meets them: the real binary, curl,
//! an HTTP/2 client speaking gRPC's framing, and a WebSocket client (tokio-tungstenite).
//!
//! - `run` with the embedded cluster: HTTP/1.1 and h2c reach the sandbox; a gRPC call goes
//!   over HTTP/2 to the Pod and its trailers come back; a slow Pod is answered 504, a Pod that
//!   drops the connection 502; a WebSocket with messages flowing keeps recording
//!   activity; a wake; and `/metrics` counts all of it.
//! - `cubepod-controller router` over TLS (a certificate made by openssl): HTTP/2 and HTTP/1.1
//!   by ALPN, malformed names and headers answered 400 with the form expected, its own
//!   `/metrics` to a token allowed to get it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cubepod_apiserver::serve::KubeconfigAuth;
use cubepod_kube::Resource;
use cubepod_tests::apiserver::PROMETHEUS_TOKEN;
use cubepod_tests::convergence::{TOKEN, block, fake_server_with_namespaces};
use cubepod_tests::{Controller, free_port, metric, seed_file};
use http_body_util::{BodyExt, Full};
use serde_json::json;

const NS: &str = "cubepod-workloads";
const DOMAIN: &str = "sandboxes.localhost";

/// `curl` with `args` and the URL last: (status, HTTP version, body).
fn curl(args: &[&str]) -> (u16, String, String) {
    let output = Command::new("curl")
        .args(["-s", "-m", "20", "-w", "\n%{http_code} %{http_version}"])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("run curl");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, tail) = out.rsplit_once('\n').unwrap_or(("", &out));
    let (code, version) = tail.split_once(' ').unwrap_or((tail, ""));
    (
        code.trim().parse().unwrap_or(0),
        version.trim().to_owned(),
        body.to_owned(),
    )
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

const BOX: &str = r#"
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata:
  name: proto
  namespace: cubepod-workloads
spec:
  image: ghcr.io/cubepod/sandbox-base:1.0
  desiredState: Running
  idleTimeoutSeconds: 15
"#;

/// A gRPC-framed call over HTTP/2 (prior knowledge) to the router on `port`: the status, the
/// body and the trailers.
fn grpc_call(port: u16, authority: &str, token: &str, message: &[u8]) -> (u16, Bytes, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the router");
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await
        .expect("an HTTP/2 handshake");
        tokio::spawn(connection);
        // gRPC's length-prefixed message: not compressed, its length, its bytes.
        let mut frame = vec![0u8];
        frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
        frame.extend_from_slice(message);
        let request = hyper::Request::post(format!("http://{authority}/demo.Echo/Say"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::from(frame)))
            .expect("a request");
        let response = sender.send_request(request).await.expect("an answer");
        let status = response.status().as_u16();
        let collected = response.into_body().collect().await.expect("the body");
        let trailers = collected
            .trailers()
            .map(|t| {
                let mut pairs: Vec<String> = t
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.to_str().unwrap_or("?")))
                    .collect();
                pairs.sort();
                pairs.join(",")
            })
            .unwrap_or_default();
        (status, collected.to_bytes(), trailers)
    })
}

/// A WebSocket session through the router on `port` to `authority` (tokio-tungstenite's
/// client): `count` text messages, `gap` apart, and the echo of each.
fn websocket_session(
    port: u16,
    authority: &str,
    token: &str,
    count: usize,
    gap: Duration,
) -> Vec<String> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the router");
        let mut request = format!("ws://{authority}/ws")
            .into_client_request()
            .expect("a WebSocket request");
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("a header value"),
        );
        let (mut socket, response) = tokio_tungstenite::client_async(request, tcp)
            .await
            .expect("the WebSocket handshake through the router");
        assert_eq!(response.status().as_u16(), 101);
        let mut echoes = Vec::new();
        for i in 0..count {
            socket
                .send(Message::text(format!("message {i}")))
                .await
                .expect("send");
            match socket.next().await {
                Some(Ok(Message::Text(text))) => echoes.push(text.as_str().to_owned()),
                other => panic!("expected the echo of message {i}, got {other:?}"),
            }
            tokio::time::sleep(gap).await;
        }
        let _ = socket.close(None).await;
        echoes
    })
}

/// `cubepod.io/last-activity` of the sandbox, in seconds since the epoch.
fn last_activity(kubeconfig: &Path, name: &str) -> Option<i64> {
    let stamp = kubectl(
        kubeconfig,
        &[
            "get",
            "sandbox",
            name,
            "-n",
            NS,
            "-o",
            "jsonpath={.metadata.annotations.cubepod\\.io/last-activity}",
        ],
    );
    cubepod_policy_host::model::time::parse(stamp.trim()).ok()
}

#[test]
fn protocols_timeouts_and_upgrades_pass_through_and_metrics_count_them() {
    let port = free_port();
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = seed_file(dir.path(), BOX);
    let controller = Controller::start(&[
        &format!("--router-listen=127.0.0.1:{port}"),
        &format!("--seed={}", seed.display()),
        "--upstream-timeout=1s",
        "--activity-interval=1s",
    ]);
    let kubeconfig = controller.embedded_kubeconfig();
    let token = controller.embedded_token().expect("the embedded token");
    let auth = format!("Authorization: Bearer {token}");
    let host = format!("8080-proto.{NS}.{DOMAIN}");
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let get = |path: &str, extra: &[&str]| {
        let host_header = format!("Host: {host}");
        let mut args = vec!["-H", host_header.as_str(), "-H", auth.as_str()];
        args.extend_from_slice(extra);
        let url = url(path);
        args.push(&url);
        curl(&args)
    };
    wait_until(Duration::from_secs(60), "the sandbox's answer", || {
        get("/", &[]).0 == 200
    });

    // HTTP/1.1 and h2c both reach it.
    let (status, version, body) = get("/one", &[]);
    assert_eq!((status, version.as_str()), (200, "1.1"), "{body}");
    assert!(
        body.starts_with("sandbox proto in namespace cubepod-workloads"),
        "{body}"
    );
    let (status, version, body) = get("/two", &["--http2-prior-knowledge"]);
    assert_eq!((status, version.as_str()), (200, "2"), "{body}");
    assert!(body.ends_with("GET /two\n"), "{body}");

    // gRPC: HTTP/2 to the Pod, the message back, then its trailers.
    let (status, echoed, trailers) = grpc_call(port, &host, &token, b"hello over grpc");
    assert_eq!(status, 200);
    assert_eq!(&echoed[5..], b"hello over grpc");
    assert_eq!(
        trailers,
        "grpc-message=sandbox proto in namespace cubepod-workloads,grpc-status=0"
    );

    // A slow Pod: 504 after --upstream-timeout; one that drops the connection: 502.
    let started = Instant::now();
    let (status, _, body) = get("/__sleep/5000", &[]);
    assert_eq!(status, 504, "{body}");
    assert!(
        body.contains("did not answer within 1s (--upstream-timeout)"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let (status, _, body) = get("/__close", &[]);
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("refused or dropped the connection on port 8080"),
        "{body}"
    );

    // Malformed: 400 with what is wrong and the form expected.
    let (status, _, body) = curl(&["-H", &format!("Host: 99999-proto.{NS}.{DOMAIN}"), &url("/")]);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("\"99999\" is not a number from 1 to 65535"),
        "{body}"
    );
    let (status, _, body) = curl(&["-H", "X-Sandbox-Port: 8080", &url("/")]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("X-Sandbox-Name is missing"), "{body}");

    // A WebSocket, by a real client, keeps recording activity while messages flow, not only
    // at its upgrade: ten messages over five seconds, each echoed by the sandbox.
    let upgraded_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let echoes = websocket_session(port, &host, &token, 10, Duration::from_millis(500));
    let expected: Vec<String> = (0..10).map(|i| format!("proto: message {i}")).collect();
    assert_eq!(echoes, expected);
    wait_until(
        Duration::from_secs(5),
        "activity from the open WebSocket",
        || last_activity(&kubeconfig, "proto").is_some_and(|at| at >= upgraded_at + 3),
    );

    // Idle, it is paused; the next request wakes it.
    wait_until(Duration::from_secs(60), "the idle pause", || {
        kubectl(
            &kubeconfig,
            &[
                "get",
                "sandbox",
                "proto",
                "-n",
                NS,
                "-o",
                "jsonpath={.status.phase}",
            ],
        ) == "Paused"
    });
    let (status, _, body) = get("/after", &[]);
    assert_eq!(status, 200, "{body}");

    let (status, _, scrape) = curl(&[&format!("http://{}/metrics", controller.addr)]);
    assert_eq!(status, 200);
    let value = |name: &str, labels: &[(&str, &str)]| metric(&scrape, name, labels);
    let requests = |code: &str| value("cubepod_router_requests_total", &[("code", code)]);
    // Every 200 above: the waits' (at least one), two by curl, the gRPC call, the wake's.
    assert!(requests("200").is_some_and(|n| n >= 5.0), "{scrape}");
    assert_eq!(requests("101"), Some(1.0));
    assert_eq!(requests("400"), Some(2.0));
    assert_eq!(requests("502"), Some(1.0));
    assert_eq!(requests("504"), Some(1.0));
    let errors = |reason: &str| {
        value(
            "cubepod_router_upstream_errors_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(errors("refused"), Some(1.0));
    assert_eq!(errors("timeout"), Some(1.0));
    assert!(
        scrape.contains("\ncubepod_router_wake_seconds_count 1\n"),
        "{scrape}"
    );
    assert_eq!(value("cubepod_router_held_requests", &[]), Some(0.0));
    assert!(
        value(
            "cubepod_router_activity_writes_total",
            &[("result", "written")]
        )
        .is_some_and(|n| n >= 2.0),
        "{scrape}"
    );
    assert!(scrape.contains("# HELP cubepod_router_wake_seconds From the first request"));
}

/// `cubepod-controller router`, stopped when dropped.
struct Router(Child);

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn over_tls_both_http_versions_are_offered_and_metrics_are_served_to_a_token() {
    let fake = fake_server_with_namespaces(Duration::ZERO, 1, &["team-a"]);
    let sandbox = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "box", "namespace": "team-a"},
        "spec": {"image": "ghcr.io/cubepod/sandbox-base:1.0", "desiredState": "Paused"},
    });
    block(cubepod_kube::Cluster::create(
        &*fake.cluster(),
        Resource::Sandbox,
        "team-a",
        sandbox,
    ))
    .expect("create sandbox");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))
        .expect("kubeconfig");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=router"])
        .arg("-addext")
        .arg(format!(
            "subjectAltName=DNS:localhost,DNS:*.team-a.{DOMAIN}"
        ))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run openssl");
    assert!(made.success());
    let port = free_port();
    let _router = Router(
        Command::new(cubepod_tests::binary())
            .args([
                "router",
                &format!("--listen=127.0.0.1:{port}"),
                "--namespaces=team-a",
                &format!("--router-domain={DOMAIN}"),
            ])
            .arg(format!("--router-tls-cert={}", cert.display()))
            .arg(format!("--router-tls-key={}", key.display()))
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the router"),
    );
    let cacert = cert.display().to_string();
    let sandbox_host = format!("8080-box.team-a.{DOMAIN}");
    let resolve = [
        format!("localhost:{port}:127.0.0.1"),
        format!("{sandbox_host}:{port}:127.0.0.1"),
    ];
    let tls = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "--cacert",
            cacert.as_str(),
            "--resolve",
            resolve[0].as_str(),
            "--resolve",
            resolve[1].as_str(),
        ];
        args.extend_from_slice(extra);
        args.push(url);
        curl(&args)
    };
    let readyz = format!("https://localhost:{port}/readyz");
    wait_until(Duration::from_secs(30), "the router over TLS", || {
        tls(&readyz, &[]).0 == 200
    });
    // HTTP/2 by ALPN when the client offers it, HTTP/1.1 when it asks only that.
    assert_eq!(tls(&readyz, &[]).1, "2");
    assert_eq!(tls(&readyz, &["--http1.1"]).1, "1.1");

    let bearer = format!("Authorization: Bearer {TOKEN}");
    let sandbox_url = format!("https://{sandbox_host}:{port}/");
    let (status, _, body) = tls(&sandbox_url, &["-H", &bearer]);
    assert_eq!(status, 409, "{body}");
    let (status, _, body) = tls(&sandbox_url, &["-H", &bearer, "--http1.1"]);
    assert_eq!(status, 409, "{body}");
    // Malformed, by header: 400 naming what is wrong.
    let (status, _, body) = tls(
        &format!("https://localhost:{port}/"),
        &[
            "-H",
            "X-Sandbox-Name: box",
            "-H",
            "X-Sandbox-Namespace: team-a",
            "-H",
            "X-Sandbox-Port: http",
        ],
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("the port \"http\" is not a number from 1 to 65535"),
        "{body}"
    );
    let (status, _, body) = tls(
        &format!("https://localhost:{port}/"),
        &[
            "-H",
            "X-Sandbox-Name: Box_1",
            "-H",
            "X-Sandbox-Namespace: team-a",
            "-H",
            "X-Sandbox-Port: 80",
        ],
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"Box_1\" is not a DNS-1123 label"), "{body}");

    // Its /metrics: to a token allowed to get it, never to none.
    let metrics_url = format!("https://localhost:{port}/metrics");
    assert_eq!(tls(&metrics_url, &[]).0, 401);
    let prometheus = format!("Authorization: Bearer {PROMETHEUS_TOKEN}");
    let (status, _, scrape) = tls(&metrics_url, &["-H", &prometheus]);
    assert_eq!(status, 200, "{scrape}");
    let requests = |code: &str| metric(&scrape, "cubepod_router_requests_total", &[("code", code)]);
    assert_eq!(requests("409"), Some(2.0), "{scrape}");
    assert_eq!(requests("400"), Some(2.0), "{scrape}");
    // The router's families only: the controller's are not served by the router.
    assert!(!scrape.contains("cubepod_reconciles_total"), "{scrape}");
}
