//! A stateful fake Kubernetes API server: a [`MemoryCluster`] served over real HTTP/1.1 and
//! HTTP/2 on loopback, with TLS from a per-server test CA, bearer-token auth, a request log
//! and fault injection, so that the real controller binary runs against it as against a
//! cluster's API server.
//!
//! The server runs on a runtime of its own, so that sync tests (which drive the binary) and
//! `#[tokio::test]`s use it alike, and dropping it stops every connection and watch at once.

mod body;
mod discovery;
mod faults;
mod handlers;
mod kubeconfig;
mod requests;
mod routes;
mod server;
mod status;
mod tls;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use cubepod_host::kube::memory::{MemoryCluster, MemoryClusterConfig};
use rustls::pki_types::CertificateDer;
use tokio::runtime::Runtime;

pub use self::faults::{DEFAULT_SEED, FaultAction, FaultInjector, FaultMatcher, FaultRule};
pub use self::kubeconfig::KubeconfigAuth;
pub use self::requests::RequestRecord;
pub use self::tls::{TlsError, client_config};

use self::handlers::Shared;

#[derive(Clone, Debug)]
pub struct FakeOptions {
    /// HTTPS with the test CA (default); plain HTTP otherwise.
    pub tls: bool,
    /// The bearer token every request must carry; `None`: no auth.
    pub token: Option<String>,
    pub cluster_config: MemoryClusterConfig,
    /// A watch's length when the client names no `timeoutSeconds` (the API server picks
    /// 30 to 60 minutes).
    pub watch_timeout: Duration,
    /// Periodic BOOKMARKs on watches that allow them; `None`: only when a watch times out.
    pub bookmark_interval: Option<Duration>,
    /// The seed of the fault injector's RNG.
    pub fault_seed: u64,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self {
            tls: true,
            token: None,
            cluster_config: MemoryClusterConfig::default(),
            watch_timeout: Duration::from_secs(30 * 60),
            bookmark_interval: None,
            fault_seed: faults::DEFAULT_SEED,
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
    Tls(#[from] TlsError),
}

pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls: bool,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
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
        let pki = tls::generate()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fake-apiserver")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(StartError::Bind)?;
        listener.set_nonblocking(true).map_err(StartError::Bind)?;
        let addr = listener.local_addr().map_err(StartError::Bind)?;
        // Registering the socket needs the server's runtime, entered without blocking on it.
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(StartError::Bind)?
        };
        let shared = Arc::new(Shared {
            cluster: MemoryCluster::new(options.cluster_config),
            token: std::sync::RwLock::new(options.token),
            crds_installed: AtomicBool::new(true),
            faults: FaultInjector::new(options.fault_seed),
            requests: requests::RequestLog::default(),
            watch_timeout: options.watch_timeout,
            bookmark_interval: options.bookmark_interval,
        });
        let acceptor = options
            .tls
            .then(|| tokio_rustls::TlsAcceptor::from(Arc::clone(&pki.server_config)));
        runtime.spawn(server::accept_loop(listener, acceptor, Arc::clone(&shared)));
        Ok(FakeApiServer {
            shared,
            addr,
            tls: options.tls,
            ca_pem: pki.ca_pem,
            ca_der: pki.ca_der,
            runtime: Some(runtime),
        })
    }

    /// `https://127.0.0.1:PORT` (`http://` without TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA that signed the server's certificate, PEM (kubeconfig's
    /// `certificate-authority-data`, base64-encoded).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The same CA, DER, for a rustls root store.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// The cluster behind the API: seed it, and assert on `objects()` and `writes()`.
    pub fn cluster(&self) -> Arc<MemoryCluster> {
        Arc::clone(&self.shared.cluster)
    }

    /// Changes the accepted bearer token (`None`: no auth), e.g. to test rotation.
    pub fn set_token(&self, token: Option<&str>) {
        *self
            .shared
            .token
            .write()
            .unwrap_or_else(PoisonError::into_inner) = token.map(str::to_owned);
    }

    /// Whether the cubepod.io CRDs are served; without them their paths and discovery 404.
    pub fn set_crds_installed(&self, installed: bool) {
        self.shared
            .crds_installed
            .store(installed, Ordering::Relaxed);
    }

    pub fn faults(&self) -> &FaultInjector {
        &self.shared.faults
    }

    /// Every request served so far, in order of completion of its response head.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.requests.snapshot()
    }

    pub fn clear_requests(&self) {
        self.shared.requests.clear();
    }

    /// Writes `dir/kubeconfig`, pointing at this server with its CA, and returns its path.
    pub fn write_kubeconfig(&self, dir: &Path, auth: &KubeconfigAuth) -> std::io::Result<PathBuf> {
        let ca = self.tls.then_some(self.ca_pem.as_str());
        kubeconfig::write(dir, &self.url(), ca, auth)
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
