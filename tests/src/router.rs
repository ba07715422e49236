//! The sandbox router as the tests (`tests/tests/router_races.rs`) and `cubepod-bench` run it:
//! `cubepod-controller router` processes against the fake API server, whose Pod IPs are on a
//! loopback range and served at their own addresses by the simulated kubelet's stand-in
//! (`MemoryCluster::serve_pod_ip`), so that a router in another process dials a Pod's IP
//! directly, as in a cluster; and a keep-alive HTTP/1.1 or HTTP/2 client.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use crate::apiserver::{FakeApiServer, FakeOptions};
use crate::convergence::TOKEN;
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_sdk::names::{
    API_VERSION, GENERATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL,
};

/// The domain of the sandboxes' host names.
pub const DOMAIN: &str = "sandboxes.localhost";

/// `<port>-<sandbox>.<namespace>.<DOMAIN>`.
pub fn host(port: u16, sandbox: &str, namespace: &str) -> String {
    format!("{port}-{sandbox}.{namespace}.{DOMAIN}")
}

/// A fake API server (its token [`TOKEN`], allowed everything) whose namespaces include
/// `namespace`, its kubelet starting Pods after `pod_start` at IPs of the /16 at
/// `pod_network` (a loopback range: 127.x.0.0).
pub fn fake_api(
    namespace: &str,
    pod_start: Duration,
    pod_network: Ipv4Addr,
) -> Result<FakeApiServer> {
    let mut options = FakeOptions::default();
    options.namespaces.push(namespace.to_owned());
    Ok(FakeApiServer::start(FakeOptions {
        token: Some(TOKEN.to_owned()),
        cluster_config: MemoryClusterConfig {
            pod_start_delay: pod_start,
            pod_stop_delay: Duration::from_millis(100),
            pod_network,
            ..MemoryClusterConfig::default()
        },
        ..options
    })?)
}

/// Serves the first `count` Pod IPs of `pod_network` at their own addresses, all on one port
/// (a free one, taken by the first): that port. Pods get these IPs in the order they start.
pub async fn serve_pod_ips(
    cluster: &MemoryCluster,
    pod_network: Ipv4Addr,
    count: u16,
) -> Result<u16> {
    let network = u32::from(pod_network);
    let mut port = 0;
    for offset in 1..=u32::from(count) {
        let ip = IpAddr::V4(Ipv4Addr::from(network + offset));
        let bound = cluster
            .serve_pod_ip(ip, port)
            .await
            .with_context(|| format!("serving Pod IP {ip} on port {port}"))?;
        port = bound.port();
    }
    Ok(port)
}

/// A Running Sandbox named `name` and its Pod, labelled and owned as its controller makes it
/// (the kubelet starts it: Running and Ready at the next Pod IP).
pub async fn sandbox_with_pod(cluster: &MemoryCluster, namespace: &str, name: &str) -> Result<()> {
    let image = "ghcr.io/cubepod/sandbox-base:1.0";
    let sandbox = cluster
        .create(
            Resource::Sandbox,
            namespace,
            json!({
                "apiVersion": API_VERSION, "kind": "Sandbox",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"image": image, "desiredState": "Running"},
            }),
        )
        .await
        .with_context(|| format!("creating sandbox {name}"))?;
    let uid = sandbox
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .context("the created sandbox has no uid")?;
    cluster
        .create(
            Resource::Pod,
            namespace,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": name, "namespace": namespace,
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY, SANDBOX_LABEL: name, GENERATION_LABEL: "1"},
                    "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Sandbox",
                        "name": name, "uid": uid, "controller": true}],
                },
                "spec": {"containers": [{"name": "sandbox", "image": image}]},
            }),
        )
        .await
        .with_context(|| format!("creating the Pod of sandbox {name}"))?;
    Ok(())
}

/// What the simulated kubelet's stand-in answers for sandbox `name`: its first words.
pub fn answer_of(name: &str, namespace: &str) -> String {
    format!("sandbox {name} in namespace {namespace}, rootfs generation")
}

/// A `cubepod-controller router` process on `127.0.0.1:<port>`, killed when dropped.
pub struct RouterProcess {
    pub child: Child,
    pub port: u16,
    log: PathBuf,
}

impl RouterProcess {
    /// Starts `binary router` against `kubeconfig` for `namespace`, with `extra` flags, its
    /// log in `dir`; returns once `/readyz` answers 200 (its cache loaded).
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        dir: &Path,
        port: u16,
        namespace: &str,
        extra: &[&str],
    ) -> Result<RouterProcess> {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!(
            "router-{port}-{}.log",
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::File::create(&log).context("the router's log file")?;
        let child = Command::new(binary)
            .args([
                "router",
                &format!("--listen=127.0.0.1:{port}"),
                &format!("--namespaces={namespace}"),
                &format!("--router-domain={DOMAIN}"),
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .with_context(|| format!("starting {} router", binary.display()))?;
        let router = RouterProcess { child, port, log };
        router.wait_ready(Duration::from_secs(30))?;
        Ok(router)
    }

    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if matches!(crate::http_get(addr, "/readyz"), Ok((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the router on port {} was not ready within {timeout:?}: {}",
                    self.port,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One keep-alive connection: HTTP/1.1, its requests sent one after another, or HTTP/2 (prior
/// knowledge, as h2c), whose clones share it, a stream each.
#[derive(Clone)]
pub struct Connection {
    sender: Sender,
    token: String,
}

#[derive(Clone)]
enum Sender {
    Http1(Arc<tokio::sync::Mutex<http1::SendRequest<Empty<Bytes>>>>),
    Http2(http2::SendRequest<Empty<Bytes>>),
}

impl Connection {
    /// An HTTP/1.1 connection whose requests carry the fake API server's token, [`TOKEN`].
    pub async fn open(addr: SocketAddr) -> Result<Connection> {
        Connection::open_with_token(addr, TOKEN).await
    }

    /// An HTTP/1.1 connection whose requests carry `token`.
    pub async fn open_with_token(addr: SocketAddr, token: &str) -> Result<Connection> {
        let stream = connect(addr).await?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .context("the HTTP/1.1 handshake")?;
        tokio::spawn(connection);
        Ok(Connection {
            sender: Sender::Http1(Arc::new(tokio::sync::Mutex::new(sender))),
            token: token.to_owned(),
        })
    }

    /// An HTTP/2 connection (h2c, prior knowledge) whose requests carry [`TOKEN`].
    pub async fn open_http2(addr: SocketAddr) -> Result<Connection> {
        let stream = connect(addr).await?;
        let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .context("the HTTP/2 handshake")?;
        tokio::spawn(connection);
        Ok(Connection {
            sender: Sender::Http2(sender),
            token: TOKEN.to_owned(),
        })
    }

    /// `GET path` with `host` as its Host (HTTP/1.1) or authority (HTTP/2) and the
    /// connection's token: the status, and the time to the response's head; the body is read
    /// whole.
    pub async fn get(&mut self, host: &str, path: &str) -> Result<(u16, Duration, Bytes)> {
        let builder = match self.sender {
            Sender::Http1(_) => Request::builder()
                .uri(path)
                .header(hyper::header::HOST, host),
            Sender::Http2(_) => Request::builder().uri(format!("http://{host}{path}")),
        };
        let request = builder
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .body(Empty::new())
            .context("a request")?;
        let sent;
        let response = match &mut self.sender {
            Sender::Http1(sender) => {
                let mut sender = sender.lock().await;
                sender.ready().await.context("the connection closed")?;
                sent = Instant::now();
                sender.send_request(request).await
            }
            Sender::Http2(sender) => {
                sender.ready().await.context("the connection closed")?;
                sent = Instant::now();
                sender.send_request(request).await
            }
        }
        .context("no answer")?;
        let head = sent.elapsed();
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .context("the body was cut")?
            .to_bytes();
        Ok((status, head, body))
    }
}

async fn connect(addr: SocketAddr) -> Result<tokio::net::TcpStream> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// `curl` of `http://127.0.0.1:<port><path>` with `headers`: (status, body); status 0 when no
/// HTTP answer came (the connection failed or was cut).
pub fn curl(port: u16, headers: &[String], path: &str, timeout: Duration) -> (u16, String) {
    let output = curl_command(port, headers, path, timeout)
        .output()
        .expect("run curl");
    curl_answer(&String::from_utf8_lossy(&output.stdout))
}

/// The `curl` command of [`curl`], to run in the background; its output read by
/// [`curl_answer`].
pub fn curl_command(port: u16, headers: &[String], path: &str, timeout: Duration) -> Command {
    let mut command = Command::new("curl");
    command
        .args([
            "-s",
            "-m",
            &timeout.as_secs().to_string(),
            "-w",
            "\n%{http_code}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for header in headers {
        command.args(["-H", header]);
    }
    command.arg(format!("http://127.0.0.1:{port}{path}"));
    command
}

/// (status, body) from the output of [`curl_command`].
pub fn curl_answer(out: &str) -> (u16, String) {
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", out));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}
