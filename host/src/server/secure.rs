//! `/metrics` over HTTPS (`--metrics-listen`, `:8443`), every request first through the
//! [`Gate`]: as kubebuilder's scaffold serves controller-runtime's metrics. Nothing else is
//! served here; the probes stay plain on `--listen` for the kubelet.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::auth::Gate;
use super::{METRICS_TYPE, PLAIN, text};
use crate::metrics::Metrics;

/// A client that has not finished its TLS handshake or sent its request head by then is dropped.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` and serves `/metrics` with TLS from `tls`, each request checked by `gate`;
/// returns the bound address (port 0 picks one) and the serving task.
pub(crate) async fn serve(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    gate: Arc<Gate>,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let acceptor = TlsAcceptor::from(tls);
    super::listen(addr, shutdown, "metrics", move |stream| {
        let (acceptor, gate, metrics) = (acceptor.clone(), gate.clone(), metrics.clone());
        async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "metrics server: TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (gate, metrics) = (gate.clone(), metrics.clone());
                async move { Ok::<_, Infallible>(answer(&gate, &metrics, &request).await) }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT);
            if let Err(error) = http.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(%error, "metrics server: connection ended with an error");
            }
        }
    })
    .await
}

/// The gate first, whatever the path (as controller-runtime's filter wraps the whole server),
/// then `/metrics`.
async fn answer(
    gate: &Gate,
    metrics: &Metrics,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if let Err(refusal) = gate.check(request.headers(), request.method(), path).await {
        return text(refusal.status, format!("{}\n", refusal.message), PLAIN);
    }
    match (request.method(), path) {
        (&Method::GET, "/metrics") => text(StatusCode::OK, metrics.render(), METRICS_TYPE),
        (_, "/metrics") => text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into(), PLAIN),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics\n".into(),
            PLAIN,
        ),
    }
}
