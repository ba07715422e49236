//! The simulated kubelet's pod network on this machine: a Pod's IP (10.244.x.y) is reachable
//! nowhere, so each one the router asks for gets a loopback listener standing in for it. On
//! any port asked, it answers HTTP/1.1 with one line naming the sandbox and its rootfs
//! generation (the Pod's labels), so that the embedded demo can `curl` a sandbox through the
//! router and see which one answered, and which start of it; a request to upgrade (any
//! protocol) is answered 101 and its bytes echoed back.
//!
//! A listener serves its IP only while a Running Pod has it: a connection to a stopped Pod is
//! closed at once, as a connection to a gone Pod's address would fail.
//!
//! With a loopback pod network (`MemoryClusterConfig::pod_network` at 127.x.0.0), a Pod's IP
//! is an address of this machine: [`MemoryCluster::serve_pod_ip`] serves the same answers at
//! the IP itself, for a router in another process that dials Pod IPs as in a cluster.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use http_body_util::Full;
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
            let service = hyper::service::service_fn(
                move |request: Request<hyper::body::Incoming>| {
                    let pod = pod.clone();
                    async move {
                        let protocol = request.headers().get(hyper::header::UPGRADE).cloned();
                        if let Some(protocol) = protocol {
                            return Ok(echo(request, protocol));
                        }
                        let line = format!(
                            "sandbox {} in namespace {}, rootfs generation {}, pod IP {ip}: {} {}\n",
                            pod.sandbox,
                            pod.namespace,
                            pod.generation,
                            request.method(),
                            request.uri().path()
                        );
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(line))))
                    }
                },
            );
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

/// An upgrade of any protocol: 101 with the protocol asked, then every byte sent back as it
/// came (an echo of the raw stream, not of WebSocket frames).
fn echo(
    mut request: Request<hyper::body::Incoming>,
    protocol: hyper::header::HeaderValue,
) -> Response<Full<Bytes>> {
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
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
    response
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
