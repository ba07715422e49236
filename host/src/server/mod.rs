//! The controller's HTTP servers: the probes, `/healthz` and `/readyz`, plain on `--listen`
//! (`:8081`) for the kubelet; `/metrics` over HTTPS with authentication and authorization on
//! `--metrics-listen` (`:8443`, [`secure`]), or, with `--metrics-secure=false`, plain beside the
//! probes on a loopback address (the embedded demo's default).

pub(crate) mod auth;
pub(crate) mod cert;
pub(crate) mod secure;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::controller::health::Health;
use crate::metrics::Metrics;

/// The loop beats every 500 ms; this much silence means it is stuck.
const MAX_SILENCE: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub(crate) struct ServerState {
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: Arc<Metrics>,
    /// `/metrics` served here, plain (`--metrics-secure=false`); otherwise a 404 that says
    /// where it is.
    pub(crate) plain_metrics: bool,
}

const PLAIN: &str = "text/plain; charset=utf-8";
const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// Answers one request; public so that tests can call the router in-process.
pub(crate) fn route(state: &ServerState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if method != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into(), PLAIN);
    }
    match path {
        "/healthz" => {
            if state.health.alive(MAX_SILENCE) {
                text(StatusCode::OK, "ok\n".into(), PLAIN)
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("control loop silent since {}\n", state.health.last_beat()),
                    PLAIN,
                )
            }
        }
        "/readyz" => {
            let policy = state.health.policy();
            let synced = state.health.synced();
            let policy_line = match &policy {
                Some(p) => format!(
                    "policy: {} {} (contract {}, sha256 {})",
                    p.name, p.version, p.contract_version, p.digest
                ),
                None => "policy: none admitted yet: nothing is reconciled, no Lease is taken, \
                         until a module is"
                    .to_string(),
            };
            let cache_line = match (&policy, synced) {
                (_, true) => "cache: synced",
                (Some(_), false) => "cache: syncing",
                // The control loop starts with the first module.
                (None, false) => "cache: not started",
            };
            let leader_line = state.health.leadership.state().describe();
            let mut body = format!("{policy_line}\n{cache_line}\n{leader_line}\n");
            // Not a readiness failure once a module runs: it stays and reconciles. Before the
            // first, this is why the replica is not ready.
            if let Some(problem) = state.health.policy_file() {
                body.push_str(&format!("policy file: {problem}\n"));
            }
            let status = if policy.is_some() && synced {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, body, PLAIN)
        }
        "/metrics" if state.plain_metrics => {
            text(StatusCode::OK, state.metrics.render(), METRICS_TYPE)
        }
        "/metrics" => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics is served over HTTPS on --metrics-listen (:8443), to a bearer \
             token allowed to get it\n"
                .into(),
            PLAIN,
        ),
        _ if state.plain_metrics => text(
            StatusCode::NOT_FOUND,
            "not found: try /healthz, /readyz or /metrics\n".into(),
            PLAIN,
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /healthz or /readyz\n".into(),
            PLAIN,
        ),
    }
}

/// What to do about an address that could not be bound, after its error: for one in use,
/// the flag that serves elsewhere (`flag`: `--listen`).
pub(crate) fn bind_hint(error: &std::io::Error, flag: &str) -> String {
    match error.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "; another process listens there: stop it, or give {flag} another address \
             (port 0 picks a free one)"
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("; a port below 1024 needs privileges: give {flag} a port above 1023")
        }
        std::io::ErrorKind::AddrNotAvailable => {
            format!("; no interface of this host has that address: give {flag} one it has")
        }
        _ => String::new(),
    }
}

/// Binds `addr`; returns the bound address (port 0 picks one) and the serving task.
pub(crate) async fn serve(
    addr: SocketAddr,
    state: ServerState,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    listen(addr, shutdown, "probes", move |stream| {
        let state = state.clone();
        async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = route(&state, request.method(), request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(error) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "connection ended with an error");
            }
        }
    })
    .await
}

/// Binds `addr` and hands each accepted connection to `connection`, on a task of its own,
/// until `shutdown` changes; returns the bound address (port 0 picks one) and the accepting
/// task. `server` names it in the log.
pub(crate) async fn listen<F, C>(
    addr: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
    server: &'static str,
    connection: F,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)>
where
    F: Fn(tokio::net::TcpStream) -> C + Send + 'static,
    C: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = shutdown.changed() => return,
            };
            match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream));
                }
                Err(error) => tracing::warn!(server, %error, "accept failed"),
            }
        }
    });
    Ok((bound, task))
}
