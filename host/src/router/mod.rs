//! The sandbox router: HTTP/1.1 and HTTP/2 (h2c) to a sandbox's Pod, routed by host name
//! (`<port>-<sandbox>.<namespace>.<domain>`) or by the `X-Sandbox-*` headers, guarded as the
//! API server guards `pods/proxy` (a bearer token reviewed, then `create` on `sandboxes/proxy`
//! in the sandbox's namespace), streaming bodies both ways and passing upgrades (WebSocket)
//! through. It reads Sandboxes and their Pods from a watch cache fed by the controller's own
//! reflectors, never the API per request.
//!
//! Two things it writes, both rare: a sandbox paused for idleness is woken by its first request
//! (`wake.rs`: one write however many requests arrive, the requests held until the Pod is
//! Ready), and traffic is recorded as `cubepod.io/last-activity` at most once per sandbox per
//! `--activity-interval` (`activity.rs`).

mod activity;
mod target;
mod upstream;
mod wake;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

use crate::controller::cache::{Cache, CacheWriter};
use crate::controller::queue::{Backoff, WorkKey, WorkQueue};
use crate::controller::reflector::Reflector;
use crate::metrics::RouterMetrics;
use crate::server::auth::Gate;
use cubepod_kube::review::{ResourceRequest, Reviewer};
use cubepod_kube::{Cluster, Resource, Scope};
use cubepod_policy_host::model::ObjectRef;

pub use upstream::PodNetwork;

/// What the router is told by its flags.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// The domain of sandbox host names: `<port>-<sandbox>.<namespace>.<domain>`.
    pub domain: String,
    /// The namespaces whose sandboxes it routes to.
    pub namespaces: Vec<String>,
    /// How long a request is held while its sandbox wakes or starts.
    pub wake_timeout: Duration,
    /// How many requests per sandbox may be held at once.
    pub max_held_requests: usize,
    /// At most one `cubepod.io/last-activity` write per sandbox per this interval.
    pub activity_interval: Duration,
    /// How long the Pod may take to connect and answer a request's head.
    pub upstream_timeout: Duration,
}

type Body = BoxBody<Bytes, hyper::Error>;

/// How often a request held while the cache loads looks again.
const LOADING_POLL: Duration = Duration::from_millis(10);

/// The router's state: the cache, the access gate, the wakes and activity in flight.
pub struct Router {
    cluster: Arc<dyn Cluster>,
    cache: Arc<Cache>,
    gate: Gate,
    config: RouterConfig,
    wakes: wake::Wakes,
    activity: activity::Activity,
    upstream: upstream::Upstream,
    metrics: RouterMetrics,
    synced: Vec<Arc<AtomicBool>>,
    /// Requests held while the cache loads, whatever their sandbox.
    held_loading: AtomicUsize,
}

impl Router {
    /// A router over `cluster`, its cache filled by reflectors of every namespace's Sandboxes
    /// and sandbox Pods, running until `shutdown`.
    pub fn start(
        cluster: Arc<dyn Cluster>,
        reviewer: Arc<dyn Reviewer>,
        network: PodNetwork,
        config: RouterConfig,
        metrics: RouterMetrics,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Router> {
        // The reflectors write the cache; the router only reads it.
        let writer = CacheWriter::default();
        let cache = writer.reader();
        // The queue only carries which sandboxes changed, to the requests held for them.
        let queue = WorkQueue::new(Backoff::default(), Arc::new(crate::metrics::Metrics::new()));
        let mut synced = Vec::new();
        for namespace in &config.namespaces {
            for (resource, label_selector) in [
                (Resource::Sandbox, None),
                (
                    Resource::Pod,
                    Some(cubepod_policy_host::model::children::selector()),
                ),
            ] {
                let done = Arc::new(AtomicBool::new(false));
                synced.push(done.clone());
                let reflector = Reflector {
                    cluster: cluster.clone(),
                    scope: Scope {
                        resource,
                        namespace: namespace.clone(),
                        label_selector,
                    },
                    cache: writer.clone(),
                    queue: queue.clone(),
                    synced: done,
                };
                tokio::spawn(reflector.run(shutdown.clone()));
            }
        }
        let router = Arc::new(Router {
            cluster: cluster.clone(),
            cache,
            gate: Gate::new(reviewer),
            wakes: wake::Wakes::default(),
            activity: activity::Activity::new(
                cluster,
                config.activity_interval,
                metrics.activity_writes.clone(),
            ),
            upstream: upstream::Upstream::new(
                network,
                config.upstream_timeout,
                metrics.upstream_errors.clone(),
            ),
            config,
            metrics,
            synced,
            held_loading: AtomicUsize::new(0),
        });
        let notifier = router.clone();
        let changes = queue.clone();
        tokio::spawn(async move {
            while let Some(key) = changes.next().await {
                if let WorkKey::Sandbox(sandbox) = &key {
                    notifier.wakes.changed(sandbox);
                }
                changes.done(&key);
            }
        });
        let mut stop = shutdown;
        tokio::spawn(async move {
            let _ = stop.wait_for(|stop| *stop).await;
            queue.shut_down();
        });
        router
    }

    fn synced(&self) -> bool {
        all_synced(&self.synced)
    }

    /// One request, answered; counted by its code when it named a sandbox, or named one badly.
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let authority = request.uri().authority().map(|a| a.as_str().to_owned());
        let response =
            match target::target(request.headers(), authority.as_deref(), &self.config.domain) {
                Ok(target) => self.clone().proxy(request, target).await,
                Err(error) => match self.own(&request).await {
                    Some(response) => return response,
                    None => text(StatusCode::BAD_REQUEST, &error.to_string()),
                },
            };
        self.metrics
            .requests
            .with_label_values(&[response.status().as_str()])
            .inc();
        response
    }

    /// The router's own paths, for a request that names no sandbox: the kubelet's probes, and
    /// `/metrics` to a bearer token allowed to get it (as the controller's `/metrics`).
    async fn own(&self, request: &Request<Incoming>) -> Option<Response<Body>> {
        match request.uri().path() {
            "/healthz" => Some(text(StatusCode::OK, "ok")),
            "/readyz" if self.synced() => Some(text(StatusCode::OK, "ok")),
            "/readyz" => Some(text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the router's cache of sandboxes is still loading",
            )),
            "/metrics" => {
                let allowed = self
                    .gate
                    .check(request.headers(), request.method(), "/metrics")
                    .await;
                Some(match allowed {
                    Err(refusal) => text(refusal.status, &refusal.message),
                    Ok(()) => {
                        let mut response = Response::new(
                            Full::new(Bytes::from(self.metrics.render()))
                                .map_err(|never| match never {})
                                .boxed(),
                        );
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                        );
                        response
                    }
                })
            }
            _ => None,
        }
    }

    /// A request for `target`: past the gate, held while its sandbox wakes or starts, then
    /// forwarded to its Pod.
    async fn proxy(
        self: Arc<Self>,
        mut request: Request<Incoming>,
        target: target::Target,
    ) -> Response<Body> {
        let path = request.uri().path().to_owned();
        let allowed = self
            .gate
            .check_resource(request.headers(), &path, |user| ResourceRequest {
                user,
                verb: "create".to_owned(),
                namespace: target.namespace.clone(),
                group: "cubepod.io".to_owned(),
                resource: "sandboxes".to_owned(),
                subresource: "proxy".to_owned(),
                name: target.name.clone(),
            })
            .await;
        if let Err(refusal) = allowed {
            return text(refusal.status, &refusal.message);
        }
        // The caller's credential is for the router, never for the sandbox's code.
        request.headers_mut().remove(hyper::header::AUTHORIZATION);
        if !self.synced() {
            let Some(_held) = Held::take(
                &self.held_loading,
                self.config.max_held_requests,
                &self.metrics.held,
            ) else {
                return retry_later(
                    "the router's cache of sandboxes is still loading and holds as many \
                     requests as it may (--max-held-requests); try again in a moment",
                );
            };
            if !loaded(&self.synced, self.config.wake_timeout).await {
                return retry_later(
                    "the router's cache of sandboxes is still loading; try again in a moment",
                );
            }
        }
        let key = ObjectRef::new(&target.namespace, &target.name);
        let ip = match self.wakes.ready(&self, &key).await {
            Ok(ip) => ip,
            Err(refusal) => return refusal.response(),
        };
        self.seen(&key);
        // An upgraded connection counts as activity for as long as bytes flow through it.
        let router = self.clone();
        let traffic = upstream::Traffic {
            every: self.config.activity_interval,
            seen: Box::new(move || router.seen(&key)),
        };
        self.upstream
            .forward(request, ip, target.port, traffic)
            .await
    }

    /// Traffic reached the sandbox `key`: activity, written at most once per interval.
    fn seen(&self, key: &ObjectRef) {
        self.activity.seen(key, &self.cache);
    }
}

/// Binds `addr` and serves the router there until `shutdown`: HTTP/1.1 and HTTP/2 on the same
/// port, with upgrades; plain (h2c), or over TLS with `tls` (ALPN `h2` and `http/1.1`). The
/// address bound (port 0: a free one) and the accepting task.
pub async fn listen(
    router: Arc<Router>,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    crate::server::listen(addr, shutdown, "router", move |stream| {
        let router = router.clone();
        let acceptor = acceptor.clone();
        async move {
            let _ = stream.set_nodelay(true);
            match acceptor {
                None => serve_connection(router, stream).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        crate::server::secure::HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    );
                    match handshake.await {
                        Ok(Ok(stream)) => serve_connection(router, stream).await,
                        Ok(Err(error)) => {
                            tracing::debug!(%error, "router: TLS handshake failed");
                        }
                        Err(_) => tracing::debug!("router: TLS handshake timed out"),
                    }
                }
            }
        }
    })
    .await
}

/// Serves one connection, HTTP/1.1 or HTTP/2 as the client speaks, with upgrades.
async fn serve_connection<S>(router: Arc<Router>, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let router = router.clone();
        async move { Ok::<_, Infallible>(router.handle(request).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    if let Err(error) = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%error, "router connection ended with an error");
    }
}

/// Why a request is answered by the router itself.
#[derive(Debug)]
pub(crate) struct Refusal {
    status: StatusCode,
    message: String,
    retry_after: Option<u64>,
}

impl Refusal {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn retry(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            retry_after: Some(RETRY_SECONDS),
        }
    }

    fn response(&self) -> Response<Body> {
        let mut response = text(self.status, &self.message);
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// What a 503 asks the client to wait before trying again.
const RETRY_SECONDS: u64 = 5;

fn all_synced(synced: &[Arc<AtomicBool>]) -> bool {
    synced.iter().all(|s| s.load(Ordering::Acquire))
}

/// Whether every reflector has loaded, waiting for them up to `timeout`: a replica just
/// started (or restarted under its clients) holds a request for the moment its lists take, as
/// it holds one for a waking sandbox, rather than turning it away. The wait is a poll, as it
/// only ever spans a replica's start.
async fn loaded(synced: &[Arc<AtomicBool>], timeout: Duration) -> bool {
    let started = tokio::time::Instant::now();
    while !all_synced(synced) {
        if started.elapsed() >= timeout {
            return false;
        }
        tokio::time::sleep(LOADING_POLL).await;
    }
    true
}

/// One of at most `max` requests held at once, counted in `count` until dropped.
struct Held<'a>(&'a AtomicUsize, &'a prometheus::IntGauge);

impl<'a> Held<'a> {
    /// One more of `count`, if fewer than `max` are held; shown on `gauge` while held
    /// (`cubepod_router_held_requests`, as requests held for a waking sandbox are).
    fn take(count: &'a AtomicUsize, max: usize, gauge: &'a prometheus::IntGauge) -> Option<Self> {
        let held = count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Held(count, gauge));
        if held.is_some() {
            gauge.inc();
        }
        held
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        self.1.dec();
    }
}

fn retry_later(message: &str) -> Response<Body> {
    Refusal::retry(message).response()
}

/// A plain-text answer of the router's own: one line.
pub(crate) fn text(status: StatusCode, message: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("{message}\n")))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that comes while the cache loads is held until it has loaded, and turned
    /// away (to try again) only past the wake timeout.
    #[tokio::test]
    async fn a_request_waits_for_the_cache_to_load_up_to_the_wake_timeout() {
        let flags = vec![
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
        ];
        let late = flags[1].clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            late.store(true, Ordering::Release);
        });
        let started = tokio::time::Instant::now();
        assert!(loaded(&flags, Duration::from_secs(30)).await);
        assert!(started.elapsed() >= Duration::from_millis(100));

        let never = vec![Arc::new(AtomicBool::new(false))];
        let started = tokio::time::Instant::now();
        assert!(!loaded(&never, Duration::from_millis(200)).await);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    /// Past the bound a request is not held; one that ends makes room for the next.
    #[test]
    fn requests_held_while_the_cache_loads_are_bounded() {
        let count = AtomicUsize::new(0);
        let gauge = prometheus::IntGauge::new("held", "held").expect("a gauge");
        let first = Held::take(&count, 2, &gauge).expect("room for one");
        let _second = Held::take(&count, 2, &gauge).expect("room for two");
        assert!(Held::take(&count, 2, &gauge).is_none(), "a third was held");
        assert_eq!(gauge.get(), 2, "the held requests are shown");
        drop(first);
        assert_eq!(gauge.get(), 1);
        assert!(
            Held::take(&count, 2, &gauge).is_some(),
            "no room after one ended"
        );
    }
}
