//! The simulated kubelet's pod network on this machine: a Pod's IP (10.244.x.y) is reachable
//! nowhere, so each one the router asks for gets a loopback listener standing in for it. On
//! any port asked, it answers HTTP/1.1 and HTTP/2 (h2c) with one line naming the sandbox and
//! its rootfs generation (the Pod's labels), so that the embedded demo can `curl` a sandbox
//! through the router and see which one answered, and which start of it; a request to upgrade
//! is answered 101: a WebSocket (`Upgrade: websocket` with its key) echoes each message back
//! prefixed with the sandbox's name, any other protocol has its raw bytes echoed back.
//!
//! To show what the router does with an application that misbehaves or speaks gRPC:
//! - `/__sleep/<ms>` answers after that many milliseconds (a slow server);
//! - `/__close` drops the connection without an answer (a crashed one);
//! - a request of `content-type: application/grpc` gets its body back, then the trailers
//!   `grpc-status: 0` and `grpc-message` naming the sandbox.
//!
//! A listener serves its IP only while a Running Pod has it: a connection to a stopped Pod is
//! closed at once, as a connection to a gone Pod's address would fail.
//!
//! With a loopback pod network (`MemoryClusterConfig::pod_network` at 127.x.0.0), a Pod's IP
//! is an address of this machine: [`MemoryCluster::serve_pod_ip`] serves the same answers at
//! the IP itself, for a router in another process that dials Pod IPs as in a cluster.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::MemoryCluster;
use cubepod_kube::Resource;

/// The loopback address standing in for each Pod IP asked for so far.
#[derive(Default)]
pub(crate) struct PodNetwork {
    listeners: Mutex<HashMap<IpAddr, SocketAddr>>,
}

/// What the responder says of the Pod at an IP: its sandbox, namespace and rootfs generation.
struct Answering {
    namespace: String,
    sandbox: String,
    generation: String,
}

impl MemoryCluster {
    /// Where the Running Pod of `ip` answers on this machine (a loopback address, any port
    /// asked of the Pod answered there); `None` when no Running Pod has that IP, or no
    /// listener can be bound.
    pub async fn pod_address(&self, ip: IpAddr) -> Option<SocketAddr> {
        answering(&self.objects(Resource::Pod), ip)?;
        if let Some(address) = self.pod_network.lookup(ip) {
            return Some(address);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ok()?;
        let address = listener.local_addr().ok()?;
        let mut listeners = self
            .pod_network
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Another request bound one meanwhile: that one serves, this one is dropped.
        if let Some(bound) = listeners.get(&ip) {
            return Some(*bound);
        }
        listeners.insert(ip, address);
        tokio::spawn(serve(listener, ip, self.this.clone()));
        Some(address)
    }
}

impl MemoryCluster {
    /// Serves the Pods that have (or will have) `ip` at `ip:port` itself, as the stand-ins
    /// above do: with a loopback pod network ([`crate::MemoryClusterConfig::pod_network`]),
    /// the Pod's own address, which a router in another process dials directly.
    pub async fn serve_pod_ip(&self, ip: IpAddr, port: u16) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, port)).await?;
        let address = listener.local_addr()?;
        tokio::spawn(serve(listener, ip, self.this.clone()));
        Ok(address)
    }
}

impl PodNetwork {
    fn lookup(&self, ip: IpAddr) -> Option<SocketAddr> {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&ip)
            .copied()
    }
}

/// The Running Pod of `ip` among `pods`, as its responder names it.
fn answering(pods: &[Value], ip: IpAddr) -> Option<Answering> {
    let ip = ip.to_string();
    let pod = pods.iter().find(|pod| {
        pod.pointer("/status/podIP").and_then(Value::as_str) == Some(ip.as_str())
            && pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
            && pod.pointer("/metadata/deletionTimestamp").is_none()
    })?;
    let text = |pointer: &str| {
        pod.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(Answering {
        namespace: text("/metadata/namespace"),
        sandbox: text("/metadata/labels/cubepod.io~1sandbox"),
        generation: text("/metadata/labels/cubepod.io~1rootfs-generation"),
    })
}

/// Accepts until the cluster is dropped; each connection is served while its Pod runs.
async fn serve(listener: tokio::net::TcpListener, ip: IpAddr, cluster: Weak<MemoryCluster>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        let Some(pod) = answering(&cluster.objects(Resource::Pod), ip) else {
            // No Pod runs at this IP now: the connection fails, as it would.
            drop(stream);
            continue;
        };
        let pod = Arc::new(pod);
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let pod = pod.clone();
                    async move { answer(request, &pod, ip).await }
                });
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let _ = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await;
        });
    }
}

type Answer = Response<BoxBody<Bytes, hyper::Error>>;

/// Dropping the connection unanswered, as `/__close` asks.
#[derive(Debug, thiserror::Error)]
#[error("the request asked the Pod's stand-in to drop the connection")]
struct Dropped;

/// One request to the Pod at `ip`: its line, or what its path or content type asks.
async fn answer(
    request: Request<hyper::body::Incoming>,
    pod: &Answering,
    ip: IpAddr,
) -> Result<Answer, Dropped> {
    let protocol = request.headers().get(hyper::header::UPGRADE).cloned();
    if let Some(protocol) = protocol {
        let answer = echo(request, protocol, pod.sandbox.clone());
        return Ok(answer.map(|b| b.map_err(|never| match never {}).boxed()));
    }
    let path = request.uri().path().to_owned();
    if path == "/__close" {
        return Err(Dropped);
    }
    if let Some(ms) = path
        .strip_prefix("/__sleep/")
        .and_then(|ms| ms.parse::<u64>().ok())
    {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    let grpc = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
        let message = format!("sandbox {} in namespace {}", pod.sandbox, pod.namespace);
        if let Ok(message) = hyper::header::HeaderValue::from_str(&message) {
            trailers.insert("grpc-message", message);
        }
        // The request's body streams back as it comes, the trailers after it.
        let body = request
            .into_body()
            .with_trailers(std::future::ready(Some(Ok(trailers))))
            .boxed();
        let mut response = Response::new(body);
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/grpc"),
        );
        return Ok(response);
    }
    let line = format!(
        "sandbox {} in namespace {}, rootfs generation {}, pod IP {ip}: {} {}\n",
        pod.sandbox,
        pod.namespace,
        pod.generation,
        request.method(),
        path
    );
    Ok(Response::new(
        Full::new(Bytes::from(line))
            .map_err(|never| match never {})
            .boxed(),
    ))
}

/// An upgrade: 101 with the protocol asked. A WebSocket handshake (its key given) is answered
/// as RFC 6455 asks and each message echoed as `<sandbox>: <message>`; any other protocol has
/// every byte sent back as it came.
fn echo(
    mut request: Request<hyper::body::Incoming>,
    protocol: hyper::header::HeaderValue,
    sandbox: String,
) -> Response<Full<Bytes>> {
    let websocket_key = protocol
        .as_bytes()
        .eq_ignore_ascii_case(b"websocket")
        .then(|| request.headers().get(hyper::header::SEC_WEBSOCKET_KEY))
        .flatten()
        .map(|key| tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()));
    let upgrade = hyper::upgrade::on(&mut request);
    let websocket = websocket_key.is_some();
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        if websocket {
            websocket_echo(TokioIo::new(upgraded), &sandbox).await;
        } else {
            let (mut reader, mut writer) = tokio::io::split(TokioIo::new(upgraded));
            let _ = tokio::io::copy(&mut reader, &mut writer).await;
        }
    });
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("upgrade"),
    );
    headers.insert(hyper::header::UPGRADE, protocol);
    if let Some(accept) = websocket_key.and_then(|a| hyper::header::HeaderValue::from_str(&a).ok())
    {
        headers.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

/// A WebSocket's messages echoed until the client closes: text and binary as
/// `<sandbox>: <message>`; pings are answered by the protocol itself.
async fn websocket_echo(
    stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    sandbox: &str,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::{Message, Role};
    let mut socket =
        tokio_tungstenite::WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
    while let Some(Ok(message)) = socket.next().await {
        let reply = match message {
            Message::Text(text) => Message::text(format!("{sandbox}: {}", text.as_str())),
            Message::Binary(bytes) => {
                let mut reply = format!("{sandbox}: ").into_bytes();
                reply.extend_from_slice(&bytes);
                Message::binary(reply)
            }
            Message::Close(_) => break,
            _ => continue,
        };
        if socket.send(reply).await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_running_pod_of_the_ip_answers() {
        let pod = |ip: &str, phase: &str| {
            json!({"metadata": {"namespace": "ns", "labels": {
                    "cubepod.io/sandbox": "s", "cubepod.io/rootfs-generation": "3"}},
                "status": {"podIP": ip, "phase": phase}})
        };
        let ip: IpAddr = "10.244.0.7".parse().unwrap();
        let found = answering(
            &[pod("10.244.0.6", "Running"), pod("10.244.0.7", "Running")],
            ip,
        )
        .expect("running");
        assert_eq!(
            (found.sandbox.as_str(), found.generation.as_str()),
            ("s", "3")
        );
        assert!(answering(&[pod("10.244.0.7", "Pending")], ip).is_none());
        assert!(answering(&[], ip).is_none());
    }
}
