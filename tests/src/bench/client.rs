//! The load generator: POSTs over HTTP/2 (with TLS, or in the clear with prior knowledge when
//! the fake serves plain HTTP) to the fake API server, many streams in flight over a few
//! connections, as a busy set of clients would send them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;

use crate::apiserver::{FakeApiServer, client_config};

/// HTTP/2 connections to one fake API server.
pub struct ApiClient {
    senders: Vec<SendRequest<Full<Bytes>>>,
    authorization: HeaderValue,
    authority: String,
    scheme: &'static str,
}

/// How a burst of POSTs went.
#[derive(Clone, Copy, Debug)]
pub struct Burst {
    pub sent: usize,
    /// Answers other than 201 Created.
    pub failed: usize,
    pub took: Duration,
}

impl Burst {
    pub fn per_second(&self) -> f64 {
        (self.sent - self.failed) as f64 / self.took.as_secs_f64()
    }
}

impl ApiClient {
    /// Opens `connections` HTTP/2 connections (TLS with ALPN h2, or h2c when the fake serves
    /// plain HTTP) authenticated with `token`.
    pub async fn connect(fake: &FakeApiServer, token: &str, connections: usize) -> Result<Self> {
        let tls = fake.url().starts_with("https://");
        let connector = if tls {
            let config = client_config(fake.ca_der(), &[b"h2"]).context("client TLS config")?;
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        } else {
            None
        };
        let mut senders = Vec::new();
        for _ in 0..connections.max(1) {
            let tcp = tokio::net::TcpStream::connect(fake.addr())
                .await
                .context("connecting to the fake API server")?;
            tcp.set_nodelay(true).context("TCP_NODELAY")?;
            let sender = match &connector {
                Some(connector) => {
                    let name = ServerName::try_from("127.0.0.1").context("server name")?;
                    let stream = connector
                        .connect(name, tcp)
                        .await
                        .context("TLS handshake with the fake API server")?;
                    handshake(TokioIo::new(stream)).await?
                }
                None => handshake(TokioIo::new(tcp)).await?,
            };
            senders.push(sender);
        }
        Ok(Self {
            senders,
            authorization: HeaderValue::from_str(&format!("Bearer {token}"))
                .context("token header")?,
            authority: fake.addr().to_string(),
            scheme: if tls { "https" } else { "http" },
        })
    }

    /// POSTs `body` to `path` on connection `connection`; returns the HTTP status.
    pub async fn post(&self, connection: usize, path: &str, body: Bytes) -> Result<u16> {
        let mut sender = self.senders[connection % self.senders.len()].clone();
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}://{}{path}", self.scheme, self.authority))
            .header(CONTENT_TYPE, "application/json")
            .header(AUTHORIZATION, self.authorization.clone())
            .body(Full::new(body))
            .context("building a request")?;
        sender.ready().await.context("connection not ready")?;
        let response = sender
            .send_request(request)
            .await
            .context("sending a POST")?;
        let status = response.status().as_u16();
        // Read the answer whole, as a client does.
        response
            .into_body()
            .collect()
            .await
            .context("reading an answer")?;
        Ok(status)
    }
}

/// An HTTP/2 handshake over `io`, its connection driven by a task of its own.
async fn handshake<T>(io: TokioIo<T>) -> Result<SendRequest<Full<Bytes>>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .context("HTTP/2 handshake")?;
    tokio::spawn(async move {
        // Ends when the client or the server goes; nothing to report then.
        let _ = connection.await;
    });
    Ok(sender)
}

/// POSTs every `(path, body)` of `items`, `in_flight` at a time, spread over the client's
/// connections; times the whole burst.
pub async fn post_all(
    client: Arc<ApiClient>,
    items: Arc<Vec<(String, Bytes)>>,
    in_flight: usize,
) -> Result<Burst> {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..in_flight.max(1) {
        let (client, items, next, failed) =
            (client.clone(), items.clone(), next.clone(), failed.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((path, body)) = items.get(i) else {
                    return Ok::<(), anyhow::Error>(());
                };
                if client.post(worker, path, body.clone()).await? != 201 {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a load generator task panicked")??;
    }
    let burst = Burst {
        sent: items.len(),
        failed: failed.load(Ordering::Relaxed),
        took: started.elapsed(),
    };
    if burst.failed == burst.sent && burst.sent > 0 {
        bail!("every POST of the burst was refused");
    }
    Ok(burst)
}
