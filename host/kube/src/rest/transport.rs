//! One request to the API server, made reliable: the bearer token attached, a time bound on
//! each attempt, transient failures retried (see [`super::retry`]), a 401 retried once with a
//! re-read token, and everything else turned into an [`ApiError`] carrying the Status message.
//! One pooled client serves every request: connections are reused, HTTP/2 where the server
//! offers it in ALPN, HTTP/1.1 otherwise (and for plain http://).

use std::error::Error as StdError;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::ServerName;

use super::RestOptions;
use super::auth::Bearer;
use super::config::ConnectionConfig;
use super::cork::CorkConnector;
use super::error::RestError;
use super::read_ahead::ReadAheadConnector;
use super::retry::{self, Backoff};
use super::{status, tls};
use crate::rest::RestClientRequests;
use crate::{ApiError, ApiErrorKind, ApiResult};

/// In client-go's form, `<program>/v<version> (<os>/<arch>)` with Go's names of the platform,
/// which API server audit logs and priority-and-fairness rules match on.
fn user_agent() -> &'static HeaderValue {
    static VALUE: std::sync::OnceLock<HeaderValue> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        let text = format!(
            "cubepod-controller/v{} ({}/{arch})",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS
        );
        // Made of the crate's version and Rust's names of the platform: printable ASCII.
        HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("cubepod-controller"))
    })
}
/// Idle pooled connections are closed after this; the API server's own limit is longer.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Pings on HTTP/2 and TCP keepalive: a dead peer is noticed even on a quiet watch.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// A request, kept whole so that it can be sent again.
pub(crate) struct Call {
    pub(crate) method: Method,
    /// Path and query, appended to the server URL.
    pub(crate) path: String,
    /// JSON body and its content type.
    pub(crate) body: Option<(Bytes, &'static str)>,
    /// The `Accept` header: `application/json` unless a list or watch asks for less.
    pub(crate) accept: &'static str,
}

impl Call {
    pub(crate) fn new(method: Method, path: String) -> Self {
        Self {
            method,
            path,
            body: None,
            accept: "application/json",
        }
    }

    pub(crate) fn with_accept(mut self, accept: &'static str) -> Self {
        self.accept = accept;
        self
    }

    pub(crate) fn with_body(mut self, body: Vec<u8>, content_type: &'static str) -> Self {
        self.body = Some((Bytes::from(body), content_type));
        self
    }
}

enum Reply {
    Body(Bytes),
    Stream(Incoming),
}

/// Why an attempt failed, and so what to do next.
enum Failure {
    /// Retry with backoff.
    Transient(ApiError),
    /// 401: re-read the token and retry once.
    Unauthorized(ApiError),
    Final(ApiError),
}

pub(crate) struct Transport {
    client: Client<CorkConnector<HttpsConnector<ReadAheadConnector<HttpConnector>>>, Full<Bytes>>,
    server: String,
    /// `server` split once, so that a request's URI is joined from its parts rather than
    /// formatted and parsed whole at every request.
    origin: Origin,
    bearer: Bearer,
    backoff: Backoff,
    max_retries: u32,
    request_timeout: Duration,
    /// `rest_client_requests_total` and its `host` label: the server URL's host and port, as
    /// client-go reports it.
    request_metrics: Option<(RestClientRequests, String)>,
}

/// client-go's `code` label of an attempt that got no response.
const NO_RESPONSE: &str = "<error>";

impl Transport {
    pub(crate) fn new(conn: &ConnectionConfig, options: &RestOptions) -> Result<Self, RestError> {
        let tls = tls::client_config(&conn.tls)?;
        let mut http = HttpConnector::new();
        // The TLS layer above handles https; this one only opens TCP.
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_keepalive(Some(KEEPALIVE));
        http.set_connect_timeout(Some(options.request_timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let builder = match &conn.tls.server_name {
            Some(name) => {
                let name = ServerName::try_from(name.clone()).map_err(|e| {
                    RestError::invalid(
                        &conn.source,
                        format!("tls-server-name {name:?} is not a valid name: {e}"),
                    )
                })?;
                builder.with_server_name_resolver(FixedServerNameResolver::new(name))
            }
            None => builder,
        };
        let connector = builder
            .enable_http1()
            .enable_http2()
            .wrap_connector(ReadAheadConnector(http));
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE)
            .build(CorkConnector(connector));
        let origin = Origin::parse(&conn.server).ok_or_else(|| {
            RestError::invalid(
                &conn.source,
                format!("{:?} is not a URL with a scheme and a host", conn.server),
            )
        })?;
        Ok(Self {
            client,
            server: conn.server.clone(),
            origin,
            bearer: Bearer::new(&conn.credentials, options.token_refresh),
            backoff: Backoff {
                base: options.retry_base,
                max: options.retry_max,
            },
            max_retries: options.max_retries,
            request_timeout: options.request_timeout,
            request_metrics: options.request_metrics.clone().map(|metrics| {
                let host = conn
                    .server
                    .parse::<hyper::Uri>()
                    .ok()
                    .and_then(|uri| uri.authority().map(|a| a.to_string()))
                    .unwrap_or_else(|| conn.server.clone());
                (metrics, host)
            }),
        })
    }

    /// Counts one attempt, by the status it got (or `<error>`).
    fn count(&self, call: &Call, code: Option<StatusCode>) {
        if let Some((metrics, host)) = &self.request_metrics {
            metrics.inc(
                code.as_ref().map_or(NO_RESPONSE, StatusCode::as_str),
                call.method.as_str(),
                host,
            );
        }
    }

    /// Sends `call` and returns the body of its 2xx response.
    pub(crate) async fn send(&self, call: &Call) -> ApiResult<Bytes> {
        match self.execute(call, false).await? {
            Reply::Body(body) => Ok(body),
            Reply::Stream(_) => unreachable!("a non-streaming call reads its body"),
        }
    }

    /// Sends `call` and returns its 2xx response's body unread, for streaming.
    pub(crate) async fn open(&self, call: &Call) -> ApiResult<Incoming> {
        match self.execute(call, true).await? {
            Reply::Stream(body) => Ok(body),
            Reply::Body(_) => unreachable!("a streaming call leaves its body unread"),
        }
    }

    async fn execute(&self, call: &Call, stream: bool) -> ApiResult<Reply> {
        let mut retries = 0;
        let mut reauthenticated = false;
        loop {
            let error = match self.attempt(call, stream).await {
                Ok(reply) => return Ok(reply),
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Unauthorized(error)) => {
                    if !reauthenticated && self.bearer.reload() {
                        reauthenticated = true;
                        tracing::debug!(method = %call.method, path = %call.path, "401 Unauthorized; retrying with the token re-read");
                        continue;
                    }
                    return Err(error);
                }
                Err(Failure::Transient(error)) => error,
            };
            let delay = error
                .retry_after
                .unwrap_or_else(|| self.backoff.delay(retries));
            if retries >= self.max_retries {
                return Err(ApiError {
                    kind: ApiErrorKind::Unavailable,
                    message: format!("{} (gave up after {retries} retries)", error.message),
                    retry_after: Some(delay),
                    causes: Vec::new(),
                });
            }
            tracing::debug!(
                method = %call.method,
                path = %call.path,
                retry = retries + 1,
                ?delay,
                %error,
                "transient failure; retrying"
            );
            tokio::time::sleep(delay).await;
            retries += 1;
        }
    }

    /// One attempt under the request timeout (for a stream: until its response headers).
    async fn attempt(&self, call: &Call, stream: bool) -> Result<Reply, Failure> {
        let request = self.request(call).map_err(Failure::Final)?;
        // Whether the attempt was counted yet: at its response, or at its failure.
        let counted = std::sync::atomic::AtomicBool::new(false);
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                counted.store(true, std::sync::atomic::Ordering::Relaxed);
                self.count(call, None);
                self.transport_failure(call, &e)
            })?;
            let code = response.status();
            counted.store(true, std::sync::atomic::Ordering::Relaxed);
            self.count(call, Some(code));
            if code.is_success() {
                if stream {
                    return Ok(Reply::Stream(response.into_body()));
                }
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| self.transport_failure(call, &e))?;
                return Ok(Reply::Body(body.to_bytes()));
            }
            let retry_after = retry::retry_after(response.headers());
            // A body cut short still leaves the status to report.
            let body = match response.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => Bytes::new(),
            };
            let error = status::from_response(code, &body, retry_after);
            Err(if code == StatusCode::UNAUTHORIZED {
                Failure::Unauthorized(error)
            } else if retry::is_transient(code) {
                Failure::Transient(error)
            } else {
                Failure::Final(error)
            })
        };
        match tokio::time::timeout(self.request_timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Transient({
                if !counted.load(std::sync::atomic::Ordering::Relaxed) {
                    self.count(call, None);
                }
                ApiError::new(
                    ApiErrorKind::Unavailable,
                    format!(
                        "{} {}: no response within {:?}",
                        call.method, call.path, self.request_timeout
                    ),
                )
            })),
        }
    }

    /// The request of one attempt. Its headers are made once (the user agent, the bearer
    /// token's when it is read) and set without a builder's per-call validation.
    fn request(&self, call: &Call) -> ApiResult<Request<Full<Bytes>>> {
        let uri = self.origin.uri(&call.path).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Other,
                format!(
                    "{} {}: cannot build the request: {e}",
                    call.method, call.path
                ),
            )
        })?;
        let body = match &call.body {
            Some((bytes, _)) => Full::new(bytes.clone()),
            None => Full::new(Bytes::new()),
        };
        let mut request = Request::new(body);
        *request.method_mut() = call.method.clone();
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(ACCEPT, HeaderValue::from_static(call.accept));
        headers.insert(USER_AGENT, user_agent().clone());
        if let Some(token) = self.bearer.header() {
            headers.insert(AUTHORIZATION, token);
        }
        if let Some((_, content_type)) = &call.body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        }
        Ok(request)
    }

    /// A failure below HTTP: TLS refusals are final (trying again cannot help), the rest
    /// (refused, reset, DNS, a body cut short) transient.
    fn transport_failure(&self, call: &Call, error: &(dyn StdError + 'static)) -> Failure {
        let message = format!(
            "{} {}{}: {}",
            call.method,
            self.server,
            call.path,
            chain(error)
        );
        if has_tls_error(error) {
            Failure::Final(ApiError::new(ApiErrorKind::Other, message))
        } else {
            Failure::Transient(ApiError::new(ApiErrorKind::Unavailable, message))
        }
    }
}

/// The server URL's scheme and authority, shared by every request's URI, and its path (an API
/// server behind a proxy may be served under one), which each request's path follows.
struct Origin {
    scheme: Scheme,
    authority: Authority,
    prefix: String,
}

impl Origin {
    fn parse(server: &str) -> Option<Self> {
        let parts = hyper::Uri::try_from(server).ok()?.into_parts();
        Some(Self {
            scheme: parts.scheme?,
            authority: parts.authority?,
            prefix: parts
                .path_and_query
                .map(|p| p.path().trim_end_matches('/').to_owned())
                .unwrap_or_default(),
        })
    }

    /// The URI of `path` (with its query) on this server: only the path is parsed.
    fn uri(&self, path: &str) -> Result<hyper::Uri, hyper::http::Error> {
        let mut full = String::with_capacity(self.prefix.len() + path.len());
        full.push_str(&self.prefix);
        full.push_str(path);
        let path_and_query = PathAndQuery::from_maybe_shared(Bytes::from(full))?;
        let mut parts = hyper::http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path_and_query);
        Ok(hyper::Uri::from_parts(parts)?)
    }
}

/// The error and its causes, `: `-separated, each said once.
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

/// Whether a rustls error is among the causes. An io::Error hides its inner error from
/// `source()`, so it is opened by hand.
fn has_tls_error(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && has_tls_error(inner)
        {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::Origin;

    fn uri(server: &str, path: &str) -> String {
        let origin = Origin::parse(server).expect("a server URL");
        origin.uri(path).expect("a request URI").to_string()
    }

    #[test]
    fn a_request_uri_is_the_server_then_the_path() {
        assert_eq!(
            uri("https://10.0.0.1:6443", "/api/v1/namespaces/a/pods?watch=1"),
            "https://10.0.0.1:6443/api/v1/namespaces/a/pods?watch=1"
        );
        assert_eq!(
            uri("http://127.0.0.1:8001/", "/api/v1/pods"),
            "http://127.0.0.1:8001/api/v1/pods"
        );
    }

    #[test]
    fn a_server_under_a_path_keeps_it_once() {
        for server in [
            "https://rancher.example/k8s/clusters/c-1",
            "https://rancher.example/k8s/clusters/c-1/",
        ] {
            assert_eq!(
                uri(server, "/apis/cubepod.dev/v1alpha1/sandboxes"),
                "https://rancher.example/k8s/clusters/c-1/apis/cubepod.dev/v1alpha1/sandboxes"
            );
        }
    }

    #[test]
    fn a_server_without_a_scheme_or_host_is_refused() {
        for server in ["10.0.0.1:6443", "/api", "", "https://"] {
            assert!(Origin::parse(server).is_none(), "{server:?} was taken");
        }
    }

    #[test]
    fn a_path_that_is_no_path_is_an_error_not_a_panic() {
        let origin = Origin::parse("https://10.0.0.1:6443").expect("a server URL");
        assert!(origin.uri("/api/v1/pods\n").is_err());
        assert!(origin.uri("/api/v1/pods with space").is_err());
    }
}
