//! A stateful fake Kubernetes API server: a [`MemoryCluster`] served over real HTTP/1.1 and
//! HTTP/2 on loopback, with TLS from a per-server test CA, bearer-token auth, a request log
//! and fault injection, so that the real controller binary runs against it as against a
//! cluster's API server.
//!
//! The server runs on a runtime of its own, so that sync tests (which drive the binary) and
//! `#[tokio::test]`s use it alike, and dropping it stops every connection and watch at once.

//! The tests' fake Kubernetes API server: the host's served [`MemoryCluster`]
//! (`cubepod_apiserver::serve`, the same server `run` gives the embedded cluster) with
//! a test layer around every request: fault injection, a request log, and an emulator mode that
//! reads `watch=` as some third-party API emulators do.
//!
//! The server runs on a runtime of its own, so that sync tests (which drive the binary) and
//! `#[tokio::test]`s use it alike, and dropping it stops every connection and watch at once.

mod faults;
mod requests;
mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cubepod_apiserver::access::{self, AccessControl, Subject};
use cubepod_apiserver::serve::{ApiServer, Layer, RequestInfo, ServeOptions, Verdict};
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_kube::BoxFuture;
use cubepod_kube::review::UserInfo;
use hyper::http::request::Parts;
use rustls::pki_types::CertificateDer;
use tokio::runtime::Runtime;

pub use self::faults::{DEFAULT_SEED, FaultAction, FaultInjector, FaultMatcher, FaultRule};
pub use self::requests::RequestRecord;
pub use self::tls::client_config;
pub use cubepod_apiserver::serve::{KubeconfigAuth, ServeError, TlsError};

/// The file name `write_kubeconfig` writes in the directory given.
pub const KUBECONFIG_FILE: &str = "kubeconfig";

/// The token of the Prometheus every fake API server knows, as a cluster with the Prometheus
/// Operator does: [`PROMETHEUS_USER`], allowed to get `/metrics` (kube-prometheus's own
/// ClusterRole grants it so). The tests scrape controllers on the fake with it.
pub const PROMETHEUS_TOKEN: &str = "fake-prometheus-token";
pub const PROMETHEUS_USER: &str = "system:serviceaccount:monitoring:prometheus-k8s";

/// The namespaces `kubectl apply -k deploy/` makes: the fake's by default.
pub const DEPLOY_NAMESPACES: [&str; 2] = ["cubepod-system", "cubepod-workloads"];

#[derive(Clone, Debug)]
pub struct FakeOptions {
    /// HTTPS with the test CA (default); plain HTTP otherwise.
    pub tls: bool,
    /// The bearer token every request must carry; `None`: no auth.
    pub token: Option<String>,
    pub cluster_config: MemoryClusterConfig,
    /// The namespaces that exist besides every cluster's (`default`, `kube-system`, ...), added
    /// to `cluster_config`'s; a create anywhere else is NotFound, as from a real API server.
    pub namespaces: Vec<String>,
    /// A watch's length when the client names no `timeoutSeconds` (the API server picks
    /// 30 to 60 minutes).
    pub watch_timeout: Duration,
    /// Periodic BOOKMARKs on watches that allow them; `None`: only when a watch times out.
    pub bookmark_interval: Option<Duration>,
    /// The seed of the fault injector's RNG.
    pub fault_seed: u64,
    /// As a third-party emulator reads the query: only `watch=true` opens a watch; any other
    /// value (`watch=1`, which the API server takes, as Go's `ParseBool` does) is dropped, so
    /// the request is answered with a list.
    pub watch_true_only: bool,
    /// Every list answered whole, whatever its `limit`, as a list served from the API server's
    /// watch cache (`resourceVersion=0`) may be.
    pub ignore_limit: bool,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self {
            tls: true,
            token: None,
            cluster_config: MemoryClusterConfig::default(),
            namespaces: DEPLOY_NAMESPACES.iter().map(|n| (*n).to_owned()).collect(),
            watch_timeout: Duration::from_secs(30 * 60),
            bookmark_interval: None,
            fault_seed: faults::DEFAULT_SEED,
            watch_true_only: false,
            ignore_limit: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("starting the fake API server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("binding the fake API server to loopback: {0}")]
    Bind(#[source] std::io::Error),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// The test layer: faults decide, the log records, the emulator mode rewrites the query.
struct TestLayer {
    faults: FaultInjector,
    requests: requests::RequestLog,
    watch_true_only: bool,
}

impl Layer for TestLayer {
    fn rewrite(&self, parts: &mut Parts) {
        if !self.watch_true_only {
            return;
        }
        let Some(query) = parts.uri.query() else {
            return;
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.starts_with("watch=") || *pair == "watch=true")
            .collect();
        if kept.len() == query.split('&').count() {
            return;
        }
        let path_and_query = if kept.is_empty() {
            parts.uri.path().to_owned()
        } else {
            format!("{}?{}", parts.uri.path(), kept.join("&"))
        };
        if let Ok(uri) = path_and_query.parse() {
            parts.uri = uri;
        }
    }

    fn decide<'a>(&'a self, request: &'a RequestInfo) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let decision = self
                .faults
                .decide(&request.method, request.resource, request.watch);
            if !decision.delay.is_zero() {
                tokio::time::sleep(decision.delay).await;
            }
            decision.outcome
        })
    }

    fn record(&self, request: RequestInfo, status: Option<u16>) {
        self.requests.record(RequestRecord {
            method: request.method,
            version: request.version,
            path: request.path,
            resource: request.resource,
            watch: request.watch,
            status,
        });
    }
}

pub struct FakeApiServer {
    server: ApiServer,
    layer: Arc<TestLayer>,
    /// The accepted token, to unregister when it changes.
    token: std::sync::Mutex<Option<String>>,
    /// `None` once shut down.
    runtime: Option<Runtime>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

impl FakeApiServer {
    /// Starts serving a new MemoryCluster on `127.0.0.1:<free port>`. Callable from sync code
    /// and from inside a tokio runtime alike.
    pub fn start(options: FakeOptions) -> Result<FakeApiServer, StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fake-apiserver")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(StartError::Bind)?;
        let layer = Arc::new(TestLayer {
            faults: FaultInjector::new(options.fault_seed),
            requests: requests::RequestLog::default(),
            watch_true_only: options.watch_true_only,
        });
        let cluster =
            MemoryCluster::new(options.cluster_config.with_namespaces(options.namespaces));
        let access = cluster.access();
        if let Some(token) = &options.token {
            access.add_token(token, access::admin());
        }
        access.add_token(
            PROMETHEUS_TOKEN,
            UserInfo::named(
                PROMETHEUS_USER,
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:monitoring",
                ],
            ),
        );
        access.allow(
            Subject::User(PROMETHEUS_USER.to_string()),
            &["get"],
            &["/metrics"],
        );
        // Serving needs the server's runtime, entered without blocking on it.
        let server = {
            let _guard = runtime.enter();
            ApiServer::start(
                listener,
                cluster,
                ServeOptions {
                    tls: options.tls,
                    token: options.token.clone(),
                    watch_timeout: options.watch_timeout,
                    bookmark_interval: options.bookmark_interval,
                    ignore_limit: options.ignore_limit,
                },
                Some(Arc::clone(&layer) as Arc<dyn Layer>),
            )?
        };
        Ok(FakeApiServer {
            server,
            layer,
            token: std::sync::Mutex::new(options.token),
            runtime: Some(runtime),
        })
    }

    /// `https://127.0.0.1:PORT` (`http://` without TLS).
    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The CA that signed the server's certificate, PEM (kubeconfig's
    /// `certificate-authority-data`, base64-encoded).
    pub fn ca_pem(&self) -> &str {
        self.server.ca_pem()
    }

    /// The same CA, DER, for a rustls root store.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        self.server.ca_der()
    }

    /// The cluster behind the API: seed it, and assert on `objects()` and `writes()`.
    pub fn cluster(&self) -> Arc<MemoryCluster> {
        self.server.cluster()
    }

    /// Changes the accepted bearer token (`None`: no auth), e.g. to test rotation. The new one
    /// authenticates as the cluster's administrator in reviews too; the old one no more.
    pub fn set_token(&self, token: Option<&str>) {
        if let Some(old) = self.token.lock().unwrap_or_else(|p| p.into_inner()).take() {
            self.access().remove_token(&old);
        }
        if let Some(token) = token {
            self.access().add_token(token, access::admin());
            *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.to_string());
        }
        self.server.set_token(token);
    }

    /// Who the server authenticates in TokenReviews and what they may do in
    /// SubjectAccessReviews: register tokens, users and grants here.
    pub fn access(&self) -> Arc<AccessControl> {
        self.server.cluster().access().clone()
    }

    /// Whether the cubepod.io CRDs are served; without them their paths and discovery 404.
    pub fn set_crds_installed(&self, installed: bool) {
        self.server.set_crds_installed(installed);
    }

    pub fn faults(&self) -> &FaultInjector {
        &self.layer.faults
    }

    /// Every request served so far, in order of completion of its response head.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.layer.requests.snapshot()
    }

    pub fn clear_requests(&self) {
        self.layer.requests.clear();
    }

    /// Writes `dir/kubeconfig`, pointing at this server with its CA, and returns its path.
    pub fn write_kubeconfig(&self, dir: &Path, auth: &KubeconfigAuth) -> std::io::Result<PathBuf> {
        self.server
            .kubeconfig("fake", auth)
            .write(&dir.join(KUBECONFIG_FILE))
    }

    /// Stops serving: open connections and watches are cut, new connections refused. The
    /// port is released asynchronously, moments later.
    pub fn shutdown(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Unlike dropping a runtime, this is allowed inside another runtime.
            runtime.shutdown_background();
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
