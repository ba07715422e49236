//! Forwarding to a sandbox's Pod: the request as it came (body streamed, never buffered), to
//! the Pod's IP on the port asked, over pooled HTTP/1.1 keep-alive connections; an upgrade
//! (WebSocket) answered 101 by the Pod is then spliced byte for byte both ways.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, HeaderName, UPGRADE};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
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
    timeout: Duration,
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
    pub(super) fn new(network: PodNetwork, timeout: Duration) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(Connector { network, timeout });
        Self { client, timeout }
    }

    /// `request` forwarded to `ip:port`, and the Pod's answer (or why there is none).
    pub(super) async fn forward(
        &self,
        mut request: Request<Incoming>,
        ip: IpAddr,
        port: u16,
    ) -> Response<Body> {
        let upgrade =
            request.version() == Version::HTTP_11 && request.headers().contains_key(UPGRADE);
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
        for name in HOP_BY_HOP {
            headers.remove(name);
        }
        if !upgrade {
            strip_connection(headers);
        }
        *request.uri_mut() = uri;
        // The Pod is spoken to over HTTP/1.1 whatever the client spoke.
        *request.version_mut() = Version::HTTP_11;
        let answered = tokio::time::timeout(self.timeout, self.client.request(request)).await;
        let mut response = match answered {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                tracing::debug!(%authority, %error, "the sandbox's Pod did not answer");
                return text(
                    StatusCode::BAD_GATEWAY,
                    "the sandbox's Pod refused or dropped the connection on that port",
                );
            }
            Err(_) => {
                return text(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "the sandbox's Pod did not answer within {}",
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
                    let mut client = TokioIo::new(client);
                    let mut pod = TokioIo::new(pod);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut pod).await;
                }
            });
        } else {
            strip_connection(response.headers_mut());
        }
        response.map(|body| body.boxed())
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
