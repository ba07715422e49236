//! [`RestCluster`]: the Kubernetes API over HTTPS, behind the same [`Cluster`] seam as the
//! in-memory cluster. No client framework: hyper, rustls and serde_json.
//!
//! Semantics are the API server's own: create is a POST to the collection (AlreadyExists when
//! the name is taken), delete a DELETE with `propagationPolicy: Background` (NotFound when
//! gone), patches are JSON merge patches; the caller decides which errors mean done. Transient
//! failures are retried here (see `retry.rs`); watches stream (see `watch.rs`).

mod auth;
mod config;
mod cork;
mod error;
mod list;
mod projection;
mod read_ahead;
mod requests;
mod retry;
mod review;
mod status;
mod tls;
mod transport;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper::Method;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use self::config::{ConnectionConfig, Credentials, Pem, TlsSettings, Token};
pub use self::error::RestError;
pub use self::projection::Projection;
pub use self::requests::RestClientRequests;
pub use self::tls::client_config;

use self::transport::{Call, Transport};
use super::{
    ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, EchoFilter, FastPath, ObjectList,
    PageRequest, Resource, Scope, WatchEvent,
};

const JSON: &str = "application/json";
const MERGE_PATCH: &str = "application/merge-patch+json";

/// Query values: everything but RFC 3986's unreserved characters is escaped.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// How the REST client behaves: timeouts, retries, token refresh, and what it keeps of
/// answers.
#[derive(Clone, Debug)]
pub struct RestOptions {
    /// Bound on one attempt: connect, send, and the whole response (a watch: its headers).
    pub request_timeout: Duration,
    /// Retries of a transient failure (429, 5xx, connection errors, timeouts).
    pub max_retries: u32,
    /// First backoff delay; doubles per retry, with jitter.
    pub retry_base: Duration,
    /// Longest backoff delay.
    pub retry_max: Duration,
    /// How old a token read from a file may get before it is read again.
    pub token_refresh: Duration,
    /// A watch's `timeoutSeconds`: the server ends it then, and the caller resumes.
    pub watch_timeout: Duration,
    /// What of a sandbox's children (Pods, PVCs, Secrets, NetworkPolicies, Services) answers,
    /// lists and watch events keep.
    pub children: Projection,
    /// Where every HTTP attempt is counted (`rest_client_requests_total`), if anywhere.
    pub request_metrics: Option<RestClientRequests>,
}

impl Default for RestOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            max_retries: 5,
            retry_base: Duration::from_millis(200),
            retry_max: Duration::from_secs(10),
            token_refresh: Duration::from_secs(60),
            watch_timeout: Duration::from_secs(290),
            children: Projection::Whole,
            request_metrics: None,
        }
    }
}

/// The cluster over the Kubernetes REST API: a [`Cluster`] that speaks HTTP/1.1 or HTTP/2 to
/// one API server, retrying transient failures.
pub struct RestCluster {
    transport: Transport,
    server: String,
    options: RestOptions,
}

impl fmt::Debug for RestCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestCluster")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl RestCluster {
    /// Builds the client (TLS roots, client certificate, connection pool). Nothing is sent yet.
    pub fn new(conn: ConnectionConfig, options: RestOptions) -> Result<Arc<Self>, RestError> {
        if conn.server.starts_with("http://") && !matches!(conn.credentials, Credentials::None) {
            tracing::warn!(server = %conn.server, "sending a bearer token over plain http://");
        }
        let transport = Transport::new(&conn, &options)?;
        Ok(Arc::new(Self {
            transport,
            server: conn.server,
            options,
        }))
    }

    /// One object's request (a get or a write), its answer read through the resource's
    /// projection. A child read as its metadata alone is asked for as that, as its watch is: a
    /// write's answer then holds what the watch would bring (no spec, no Secret's data), since
    /// the API server renders every answer as `Accept` asks.
    async fn call_json(&self, call: Call, resource: Resource) -> ApiResult<Value> {
        self.call_projected(call, self.projection(resource)).await
    }

    /// [`Self::call_json`], the answer read through `projection`.
    async fn call_projected(&self, call: Call, projection: Projection) -> ApiResult<Value> {
        let call = call.with_accept(projection.accept(false));
        let body = self.transport.send(&call).await?;
        projection.from_slice(&body).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Other,
                format!(
                    "{} {}: the response is not JSON: {e}",
                    call.method, call.path
                ),
            )
        })
    }

    fn projection(&self, resource: Resource) -> Projection {
        self.options.children.of(resource)
    }

    async fn write(
        &self,
        resource: Resource,
        method: Method,
        path: String,
        body: &Value,
        content_type: &'static str,
    ) -> ApiResult<Value> {
        self.write_projected(self.projection(resource), method, path, body, content_type)
            .await
    }

    async fn write_projected(
        &self,
        projection: Projection,
        method: Method,
        path: String,
        body: &Value,
        content_type: &'static str,
    ) -> ApiResult<Value> {
        let bytes = serde_json::to_vec(body).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Invalid,
                format!("cannot serialize the request: {e}"),
            )
        })?;
        self.call_projected(
            Call::new(method, path).with_body(bytes, content_type),
            projection,
        )
        .await
    }

    async fn list_scope(&self, scope: &Scope, page: Option<&PageRequest>) -> ApiResult<ObjectList> {
        let path = list_path(scope, page);
        let call =
            Call::new(Method::GET, path).with_accept(self.projection(scope.resource).accept(true));
        let body = self.transport.send(&call).await?;
        // Straight into the items, not the whole list as one Value and then a copy of it: a
        // list is the largest answer the controller reads.
        let list =
            list::ListBody::from_slice(&body, self.projection(scope.resource)).map_err(|e| {
                ApiError::new(
                    ApiErrorKind::Other,
                    format!("{} {}: not a list: {e}", call.method, call.path),
                )
            })?;
        drop(body);
        let mut items = list.items;
        typed_items(&mut items, scope.resource);
        Ok(ObjectList {
            items,
            resource_version: list.resource_version.unwrap_or_default(),
            continue_token: list.continue_token.filter(|t| !t.is_empty()),
        })
    }

    /// [`Self::list_scope`] read as the body comes, items handed to `each` a batch at a time
    /// ([`list::ItemStream`]): a server that ignores `limit` costs one item's bytes and a batch.
    async fn list_scope_each(
        &self,
        scope: &Scope,
        page: &PageRequest,
        each: &mut (dyn FnMut(Vec<Value>) + Send),
    ) -> ApiResult<ObjectList> {
        let path = list_path(scope, Some(page));
        let projection = self.projection(scope.resource);
        let call = Call::new(Method::GET, path).with_accept(projection.accept(true));
        let mut body = self.transport.open(&call).await?;
        let broken = |why: String| {
            ApiError::new(
                ApiErrorKind::Other,
                format!("{} {}: not a list: {why}", call.method, call.path),
            )
        };
        // A list's items carry no kind or apiVersion; the in-memory cluster's do, so add them.
        let resource = scope.resource;
        let mut typed = |mut items: Vec<Value>| {
            typed_items(&mut items, resource);
            each(items);
        };
        let mut stream = list::ItemStream::new(projection, LIST_BATCH);
        loop {
            let frame = tokio::time::timeout(self.options.request_timeout, body.frame())
                .await
                .map_err(|_| {
                    ApiError::new(
                        ApiErrorKind::Unavailable,
                        format!(
                            "{} {}: no part of the list for {:?}",
                            call.method, call.path, self.options.request_timeout
                        ),
                    )
                })?;
            match frame {
                None => break,
                Some(Err(e)) => return Err(broken(format!("the body broke off: {e}"))),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        stream
                            .push(&data, &mut typed)
                            .map_err(|e| broken(e.to_string()))?;
                    }
                }
            }
        }
        let (version, token) = stream
            .finish(&mut typed)
            .map_err(|e| broken(e.to_string()))?;
        Ok(ObjectList {
            items: Vec::new(),
            resource_version: version.unwrap_or_default(),
            continue_token: token.filter(|t| !t.is_empty()),
        })
    }

    async fn watch_scope(
        &self,
        scope: &Scope,
        resource_version: &str,
        echoes: Option<Arc<dyn EchoFilter>>,
    ) -> ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>> {
        let path = watch_path(
            scope,
            resource_version,
            self.options.watch_timeout.as_secs().max(1),
        );
        let projection = self.projection(scope.resource);
        let call = Call::new(Method::GET, path).with_accept(projection.accept(false));
        let body = self.transport.open(&call).await?;
        // Past the server's own timeout by a request's worth, the stream is taken for dead.
        let idle_limit = self.options.watch_timeout + self.options.request_timeout;
        let what = format!("watch {} in {:?}", scope.resource, scope.namespace);
        Ok(watch::spawn(body, idle_limit, what, projection, echoes))
    }
}

/// Items a streamed list hands on at once.
const LIST_BATCH: usize = 100;

/// A list's path and query, keys in the order client-go sends them (Go's `url.Values.Encode`
/// sorts them).
fn list_path(scope: &Scope, page: Option<&PageRequest>) -> String {
    let mut path = collection(scope.resource, &scope.namespace);
    let mut query = Vec::new();
    if let Some(token) = page.and_then(|p| p.continue_token.as_ref()) {
        query.push(format!("continue={}", encode(token)));
    }
    if let Some(selector) = scope.label_selector.as_deref().filter(|s| !s.is_empty()) {
        query.push(format!("labelSelector={}", encode(selector)));
    }
    if let Some(page) = page {
        query.push(format!("limit={}", page.limit));
    }
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query.join("&"));
    }
    path
}

/// A list's items carry no kind or apiVersion; the in-memory cluster's do, so add them. (A
/// metadata list's items say `PartialObjectMetadata`; nothing reads a child's kind.)
fn typed_items(items: &mut [Value], resource: Resource) {
    for item in items {
        if let Some(fields) = item.as_object_mut() {
            fields
                .entry("kind")
                .or_insert_with(|| resource.kind().into());
            fields
                .entry("apiVersion")
                .or_insert_with(|| resource.api_version().into());
        }
    }
}

/// A watch's path and query, as client-go's reflector asks for it: `allowWatchBookmarks=true`,
/// the selector, the version, `timeoutSeconds` and `watch=true`, keys in the order Go's
/// `url.Values.Encode` puts them. `watch=true`, not `watch=1`: the API server takes both (Go's
/// `ParseBool`), but a server or emulator that only knows client-go's spelling answers `1` with
/// a list, and the controller would never see a change.
fn watch_path(scope: &Scope, resource_version: &str, timeout_seconds: u64) -> String {
    let mut query = vec!["allowWatchBookmarks=true".to_owned()];
    if let Some(selector) = scope.label_selector.as_deref().filter(|s| !s.is_empty()) {
        query.push(format!("labelSelector={}", encode(selector)));
    }
    if !resource_version.is_empty() {
        query.push(format!("resourceVersion={}", encode(resource_version)));
    }
    query.push(format!("timeoutSeconds={timeout_seconds}"));
    query.push("watch=true".to_owned());
    format!(
        "{}?{}",
        collection(scope.resource, &scope.namespace),
        query.join("&")
    )
}

/// The collection's path; an empty namespace means all namespaces.
fn collection(resource: Resource, namespace: &str) -> String {
    if !namespace.is_empty() {
        return resource.collection_path(namespace);
    }
    let version = resource.api_version();
    let root = if version.contains('/') { "apis" } else { "api" };
    format!("/{root}/{version}/{}", resource.plural())
}

fn encode(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE).to_string()
}

impl Cluster for RestCluster {
    fn create(
        &self,
        resource: Resource,
        namespace: &str,
        object: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let path = resource.collection_path(namespace);
        let projection = self.options.children.of_created(resource);
        Box::pin(async move {
            self.write_projected(projection, Method::POST, path, &object, JSON)
                .await
        })
    }

    fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let path = resource.object_path(namespace, name);
        Box::pin(async move { self.call_json(Call::new(Method::GET, path), resource).await })
    }

    fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<()>> {
        let path = resource.object_path(namespace, name);
        Box::pin(async move {
            let options = json!({
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "propagationPolicy": "Background",
            });
            let call =
                Call::new(Method::DELETE, path).with_body(options.to_string().into_bytes(), JSON);
            // 200 (the object, or a Status) and 202 (accepted) both mean done: no body to read.
            self.transport.send(&call).await.map(drop)
        })
    }

    fn patch(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let path = resource.object_path(namespace, name);
        Box::pin(async move {
            self.write(resource, Method::PATCH, path, &patch, MERGE_PATCH)
                .await
        })
    }

    fn patch_status(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let path = format!("{}/status", resource.object_path(namespace, name));
        Box::pin(async move {
            self.write(resource, Method::PATCH, path, &patch, MERGE_PATCH)
                .await
        })
    }

    fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        let scope = scope.clone();
        Box::pin(async move { self.list_scope(&scope, None).await })
    }

    fn list_page(&self, scope: &Scope, page: &PageRequest) -> BoxFuture<'_, ApiResult<ObjectList>> {
        let (scope, page) = (scope.clone(), page.clone());
        Box::pin(async move { self.list_scope(&scope, Some(&page)).await })
    }

    fn list_page_each<'a>(
        &'a self,
        scope: &'a Scope,
        page: &'a PageRequest,
        each: &'a mut (dyn FnMut(Vec<Value>) + Send),
    ) -> BoxFuture<'a, ApiResult<ObjectList>> {
        Box::pin(async move { self.list_scope_each(scope, page, each).await })
    }

    fn watch(
        &self,
        scope: &Scope,
        resource_version: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        let scope = scope.clone();
        let resource_version = resource_version.to_owned();
        Box::pin(async move { self.watch_scope(&scope, &resource_version, None).await })
    }

    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }
}

/// Manifests and patches sent as the text they are, a Sandbox's own write answered with its
/// metadata alone, echoes of own writes dropped before they are decoded.
impl FastPath for RestCluster {
    fn create_text(
        &self,
        resource: Resource,
        namespace: &str,
        manifest: String,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let path = resource.collection_path(namespace);
        let projection = self.options.children.of_created(resource);
        Box::pin(async move {
            self.call_projected(
                Call::new(Method::POST, path).with_body(manifest.into_bytes(), JSON),
                projection,
            )
            .await
        })
    }

    fn patch_for_metadata(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: String,
        status: bool,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let mut path = resource.object_path(namespace, name);
        if status {
            path.push_str("/status");
        }
        Box::pin(async move {
            self.call_projected(
                Call::new(Method::PATCH, path).with_body(patch.into_bytes(), MERGE_PATCH),
                Projection::ObjectMetadata,
            )
            .await
        })
    }

    fn watch_skipping_echoes(
        &self,
        scope: &Scope,
        resource_version: &str,
        echoes: Arc<dyn EchoFilter>,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        let scope = scope.clone();
        let resource_version = resource_version.to_owned();
        Box::pin(async move {
            self.watch_scope(&scope, &resource_version, Some(echoes))
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(collection(Resource::Pod, ""), "/api/v1/pods");
        assert_eq!(
            collection(Resource::Sandbox, ""),
            "/apis/cubepod.io/v1alpha1/sandboxes"
        );
        assert_eq!(
            collection(Resource::Pod, "ns"),
            "/api/v1/namespaces/ns/pods"
        );
        assert_eq!(
            encode("app.kubernetes.io/managed-by=cubepod-controller,a!=b"),
            "app.kubernetes.io%2Fmanaged-by%3Dcubepod-controller%2Ca%21%3Db"
        );
    }

    #[test]
    fn watches_are_asked_for_as_client_go_asks() {
        let scope = Scope {
            resource: Resource::Pod,
            namespace: "ns".into(),
            label_selector: Some("a=b".into()),
        };
        assert_eq!(
            watch_path(&scope, "42", 290),
            "/api/v1/namespaces/ns/pods?allowWatchBookmarks=true&labelSelector=a%3Db\
             &resourceVersion=42&timeoutSeconds=290&watch=true"
        );
        let all = Scope {
            label_selector: None,
            ..scope
        };
        assert_eq!(
            watch_path(&all, "", 5),
            "/api/v1/namespaces/ns/pods?allowWatchBookmarks=true&timeoutSeconds=5&watch=true"
        );
    }
}
