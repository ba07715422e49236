//! A [`MemoryCluster`] served over the Kubernetes API: real HTTP/1.1 and HTTP/2 on loopback,
//! TLS from a CA made for the server, bearer-token auth, discovery, OpenAPI, Table responses,
//! watches. The embedded cluster of `cubepod-controller run` is served through it, so that
//! kubectl (and any client-go program) works against it; the tests' fake API server is it,
//! with a [`Layer`] for fault injection and a request log.

mod accept;
mod body;
mod discovery;
mod events_v1;
mod fields;
mod handlers;
mod kubeconfig;
mod openapi;
mod order;
mod partial;
mod pki;
mod render;
mod request_body;
mod reviews;
mod routes;
mod scale;
mod status;
mod table;
mod watch;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use hyper::http::request::Parts;
use hyper::{Method, Version};
use rustls::pki_types::CertificateDer;
use tokio::task::JoinHandle;

use super::MemoryCluster;
use cubepod_kube::{BoxFuture, Resource};

pub use self::kubeconfig::{Kubeconfig, KubeconfigAuth};
pub use self::pki::{TlsError, provider};

use self::handlers::Shared;

/// How the cluster is served: TLS, auth, watch lengths and bookmarks.
#[derive(Clone)]
pub struct ServeOptions {
    /// HTTPS with the server's own CA (default); plain HTTP otherwise.
    pub tls: bool,
    /// The bearer token every request must carry; `None`: no auth.
    pub token: Option<String>,
    /// A watch's length when the client names no `timeoutSeconds` (the API server picks
    /// 30 to 60 minutes).
    pub watch_timeout: Duration,
    /// Periodic BOOKMARKs on watches that allow them; `None`: only when a watch times out.
    pub bookmark_interval: Option<Duration>,
    /// Answers every list whole, whatever its `limit`, as the API server may from its watch
    /// cache (a list at `resourceVersion=0`): what a client that pages must bear.
    pub ignore_limit: bool,
}

// By hand: a derived Debug would print the token.
impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("watch_timeout", &self.watch_timeout)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("ignore_limit", &self.ignore_limit)
            .finish()
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            tls: true,
            token: None,
            watch_timeout: Duration::from_secs(30 * 60),
            bookmark_interval: None,
            ignore_limit: false,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener is unusable: reading its address, making it non-blocking or handing it to
    /// tokio failed.
    #[error("binding the API server to {addr}: {source}")]
    Bind {
        /// The listener's address (`127.0.0.1:0` when it could not be read).
        addr: SocketAddr,
        /// The socket's error.
        source: std::io::Error,
    },
    /// Its certificates or TLS configuration.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// What a request is, as a [`Layer`] sees it.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// The HTTP method.
    pub method: Method,
    /// HTTP/1.1 or HTTP/2, as negotiated.
    pub version: Version,
    /// The URL path, without the query.
    pub path: String,
    /// The resource addressed, if the path names one.
    pub resource: Option<Resource>,
    /// Whether the request is a watch (`?watch=true`).
    pub watch: bool,
}

/// What a [`Layer`] makes of a request before it is served.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Serve it; a watch ends after this many object events, if given.
    Proceed {
        /// How many object events a watch gets before the server ends it.
        end_watch_after: Option<u32>,
    },
    /// Answer with a Status of this code and reason (and `Retry-After`, seconds).
    Respond {
        /// The HTTP status: `429`, `500`.
        code: u16,
        /// The Status's `reason`: `TooManyRequests`.
        reason: String,
        /// The `Retry-After` header, seconds, if any.
        retry_after: Option<u64>,
    },
    /// Close the connection (HTTP/2: reset the stream) without a response.
    Reset,
}

/// A hook around every request: the tests' fault injection and request log. The embedded
/// cluster runs without one.
pub trait Layer: Send + Sync + 'static {
    /// Sees the request head first, and may change it (an emulator's way of reading a query).
    fn rewrite(&self, parts: &mut Parts) {
        let _ = parts;
    }
    /// Decides whether the request is served; may take its time (a delay).
    fn decide<'a>(&'a self, request: &'a RequestInfo) -> BoxFuture<'a, Verdict>;
    /// The request's outcome: the HTTP status, `None` when the connection was reset.
    fn record(&self, request: RequestInfo, status: Option<u16>);
}

/// A served cluster. Dropping it stops accepting connections; connections and watches already
/// open end with the runtime they run on.
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls: bool,
    url: String,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Serves `cluster` on `listener` (bound by the caller: loopback), on the current tokio
    /// runtime; must be called inside one.
    pub fn start(
        listener: std::net::TcpListener,
        cluster: Arc<MemoryCluster>,
        options: ServeOptions,
        layer: Option<Arc<dyn Layer>>,
    ) -> Result<ApiServer, ServeError> {
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            source,
        })?;
        let bind = |source| ServeError::Bind { addr, source };
        listener.set_nonblocking(true).map_err(bind)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(bind)?;
        let pki = pki::generate()?;
        let shared = Arc::new(Shared {
            cluster,
            token: RwLock::new(options.token),
            crds_installed: AtomicBool::new(true),
            layer,
            watch_timeout: options.watch_timeout,
            bookmark_interval: options.bookmark_interval,
            ignore_limit: options.ignore_limit,
        });
        let acceptor = options
            .tls
            .then(|| tokio_rustls::TlsAcceptor::from(Arc::clone(&pki.server_config)));
        let accept = tokio::spawn(accept::accept_loop(listener, acceptor, Arc::clone(&shared)));
        let scheme = if options.tls { "https" } else { "http" };
        Ok(ApiServer {
            shared,
            addr,
            tls: options.tls,
            url: format!("{scheme}://{addr}"),
            ca_pem: pki.ca_pem,
            ca_der: pki.ca_der,
            accept,
        })
    }

    /// `https://127.0.0.1:PORT` (`http://` without TLS).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The address the server listens on.
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

    /// The cluster it serves.
    pub fn cluster(&self) -> Arc<MemoryCluster> {
        Arc::clone(&self.shared.cluster)
    }

    /// Changes the accepted bearer token (`None`: no auth).
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

    /// A kubeconfig for this server (its CA included), to write or print.
    pub fn kubeconfig<'a>(&'a self, name: &'a str, auth: &'a KubeconfigAuth) -> Kubeconfig<'a> {
        Kubeconfig {
            name,
            server: &self.url,
            ca_pem: self.tls.then_some(self.ca_pem.as_str()),
            auth,
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
