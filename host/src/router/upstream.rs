//! Forwarding to a sandbox's Pod: the request as it came (body streamed, never buffered), to
//! the Pod's IP on the port asked, over pooled HTTP/1.1 keep-alive connections, or, for gRPC
//! (an HTTP/2 request of `content-type: application/grpc`), over HTTP/2 with prior knowledge,
//! trailers passed both ways; an upgrade (WebSocket) answered 101 by the Pod is then spliced
//! byte for byte both ways, its traffic counted as activity while bytes flow.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_TYPE, HeaderName, HeaderValue, TE, UPGRADE};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus::IntCounterVec;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{Body, text};
use cubepod_apiserver::MemoryCluster;

/// How the router reaches a Pod's IP.
#[derive(Clone)]
pub enum PodNetwork {
    /// The cluster's network: the Pod's IP and port, directly.
    Direct,
    /// The embedded cluster, whose Pod IPs are simulated: its loopback stand-in for each.
    Embedded(Arc<MemoryCluster>),
}

/// Connects to `http://<pod IP>:<port>` over [`PodNetwork`].
#[derive(Clone)]
struct Connector {
    network: PodNetwork,
    timeout: Duration,
}

type Connecting = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TcpStream>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let network = self.network.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let refused = |why: &str| {
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, why.to_owned())
            };
            let ip: IpAddr = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
                .and_then(|h| h.parse().ok())
                .ok_or_else(|| refused("not a Pod IP"))?;
            let port = uri.port_u16().unwrap_or(80);
            let address = match &network {
                PodNetwork::Direct => SocketAddr::new(ip, port),
                PodNetwork::Embedded(cluster) => cluster
                    .pod_address(ip)
                    .await
                    .ok_or_else(|| refused("no Running Pod has this IP"))?,
            };
            let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                })??;
            let _ = stream.set_nodelay(true);
            Ok(TokioIo::new(stream))
        })
    }
}

pub(super) struct Upstream {
    client: Client<Connector, Incoming>,
    /// HTTP/2 with prior knowledge, for gRPC.
    h2: Client<Connector, Incoming>,
    timeout: Duration,
    /// `cubepod_router_upstream_errors_total`, by reason.
    errors: IntCounterVec,
}

/// What an upgraded connection calls while bytes flow through it: `seen`, at most once per
/// `every`.
pub(super) struct Traffic {
    pub(super) every: Duration,
    pub(super) seen: Box<dyn Fn() + Send + Sync>,
}

/// Headers of one hop, not passed on (RFC 9110 7.6.1); `Connection` and `Upgrade` are kept for
/// an upgrade.
const HOP_BY_HOP: [&str; 6] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
];

impl Upstream {
    pub(super) fn new(network: PodNetwork, timeout: Duration, errors: IntCounterVec) -> Self {
        let connector = Connector { network, timeout };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector.clone());
        let h2 = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .http2_only(true)
            .build(connector);
        Self {
            client,
            h2,
            timeout,
            errors,
        }
    }

    /// `request` forwarded to `ip:port`, and the Pod's answer (or why there is none).
    pub(super) async fn forward(
        &self,
        mut request: Request<Incoming>,
        ip: IpAddr,
        port: u16,
        traffic: Traffic,
    ) -> Response<Body> {
        let upgrade =
            request.version() == Version::HTTP_11 && request.headers().contains_key(UPGRADE);
        // gRPC needs HTTP/2 end to end (its status is in trailers, and `te: trailers` must
        // reach the server); everything else goes over HTTP/1.1, which every server speaks.
        let grpc = request.version() == Version::HTTP_2
            && request
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/grpc"));
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let authority = SocketAddr::new(ip, port);
        let Ok(uri) = format!("http://{authority}{path}").parse::<Uri>() else {
            return text(
                StatusCode::BAD_REQUEST,
                "the request's path is not a valid URI path",
            );
        };
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
        let headers = request.headers_mut();
        let trailers = headers
            .get(TE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == "trailers"));
        for name in HOP_BY_HOP {
            headers.remove(name);
        }
        if !upgrade {
            strip_connection(headers);
        }
        if grpc && trailers {
            headers.insert(TE, HeaderValue::from_static("trailers"));
        }
        *request.uri_mut() = uri;
        let (client, version) = if grpc {
            (&self.h2, Version::HTTP_2)
        } else {
            (&self.client, Version::HTTP_11)
        };
        *request.version_mut() = version;
        let answered = tokio::time::timeout(self.timeout, client.request(request)).await;
        let mut response = match answered {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                tracing::debug!(%authority, %error, "the sandbox's Pod did not answer");
                self.errors.with_label_values(&["refused"]).inc();
                return text(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "the sandbox's Pod refused or dropped the connection on port {port}: is \
                         its server listening there?"
                    ),
                );
            }
            Err(_) => {
                self.errors.with_label_values(&["timeout"]).inc();
                return text(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "the sandbox's Pod did not answer within {} (--upstream-timeout)",
                        humantime::format_duration(self.timeout)
                    ),
                );
            }
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let pod_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                if let (Ok(client), Ok(pod)) = tokio::join!(client_upgrade, pod_upgrade) {
                    splice(TokioIo::new(client), TokioIo::new(pod), traffic).await;
                }
            });
        } else {
            strip_connection(response.headers_mut());
        }
        response.map(|body| body.boxed())
    }
}

/// Copies bytes both ways between an upgraded client and Pod until either closes, calling
/// `traffic.seen` once per `traffic.every` in which bytes flowed.
async fn splice<C, P>(client: C, mut pod: P, traffic: Traffic)
where
    C: AsyncRead + AsyncWrite + Unpin,
    P: AsyncRead + AsyncWrite + Unpin,
{
    let flowed = Arc::new(AtomicU64::new(0));
    let mut client = Counted {
        inner: client,
        bytes: flowed.clone(),
    };
    let copy = tokio::io::copy_bidirectional(&mut client, &mut pod);
    tokio::pin!(copy);
    let mut ticks = tokio::time::interval(traffic.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once, and the request itself was just counted.
    ticks.tick().await;
    let mut counted = 0;
    loop {
        tokio::select! {
            _ = &mut copy => return,
            _ = ticks.tick() => {
                let now = flowed.load(Ordering::Relaxed);
                if now != counted {
                    counted = now;
                    (traffic.seen)();
                }
            }
        }
    }
}

/// A stream that counts the bytes read from it and written to it.
struct Counted<T> {
    inner: T,
    bytes: Arc<AtomicU64>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        self.bytes.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &polled {
            self.bytes.fetch_add(*written as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Removes `Connection`, the headers it names, and `Upgrade`.
fn strip_connection(headers: &mut hyper::HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    headers.remove(CONNECTION);
    headers.remove(UPGRADE);
    headers.remove(hyper::header::TRANSFER_ENCODING);
}
