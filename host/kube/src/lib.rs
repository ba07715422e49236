#![forbid(unsafe_code)]
//! The cluster as the controller sees it: one seam, [`Cluster`], with two backends behind it,
//! the Kubernetes REST API ([`rest::RestCluster`]) and the in-memory API server of the
//! `cubepod-apiserver` crate. Objects cross it as Kubernetes JSON, so both backends speak the
//! API's own shapes. [`Cluster`] is the API's semantics only; what the REST client does faster
//! with the same outcome (a manifest sent as its text, echoes dropped unread) is its
//! [`FastPath`], which callers reach through [`fast_path`]'s functions.

pub mod discard;
pub mod fast_path;
pub mod resource;
pub mod rest;
pub mod review;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use discard::Discarding;
pub use fast_path::{EchoFilter, FastPath};
pub use resource::Resource;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

/// The future a [`Cluster`] method returns: boxed, so that the trait is object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why the API refused or failed a request: the API server's Status `reason`, in kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// 404: no such object (or namespace).
    NotFound,
    /// 409 on a create: the name is taken.
    AlreadyExists,
    /// A write against a stale resourceVersion (409 Conflict).
    Conflict,
    /// 422: the object fails validation; [`ApiError::causes`] names the fields.
    Invalid,
    /// 403: the caller may not do this.
    Forbidden,
    /// 401: the caller's credentials are missing or not accepted.
    Unauthorized,
    /// 410 Gone: the watch's resourceVersion is too old; list again.
    Gone,
    /// Transient: 429, 5xx, a reset or a timeout.
    Unavailable,
    /// Any other failure.
    Other,
}

impl ApiErrorKind {
    /// The `result` label of `cubepod_kube_requests_total`.
    pub const fn label(self) -> &'static str {
        match self {
            ApiErrorKind::NotFound => "not_found",
            ApiErrorKind::AlreadyExists => "already_exists",
            ApiErrorKind::Conflict => "conflict",
            ApiErrorKind::Invalid => "invalid",
            ApiErrorKind::Forbidden => "forbidden",
            ApiErrorKind::Unauthorized => "unauthorized",
            ApiErrorKind::Gone => "gone",
            ApiErrorKind::Unavailable => "unavailable",
            ApiErrorKind::Other => "error",
        }
    }
}

/// An error from the cluster, with the API's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// What kind of failure, for the caller to act on.
    pub kind: ApiErrorKind,
    /// The API server's message, for people.
    pub message: String,
    /// For [`ApiErrorKind::Unavailable`]: when to try again, if the server said (Retry-After).
    pub retry_after: Option<Duration>,
    /// For [`ApiErrorKind::Invalid`]: each field's error (the Status's `details.causes`).
    pub causes: Vec<StatusCause>,
}

/// One entry of a Status's `details.causes`: why one field was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: String,
    /// The error without its field (`Invalid value: -5: ...`).
    pub message: String,
    /// `spec.idleTimeoutSeconds`.
    pub field: String,
}

impl ApiError {
    /// An error of `kind` with `message`, no retry hint and no causes.
    pub fn new(kind: ApiErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
            causes: Vec::new(),
        }
    }

    /// NotFound for the object, with the API server's wording.
    pub fn not_found(resource: Resource, namespace: &str, name: &str) -> Self {
        Self::new(
            ApiErrorKind::NotFound,
            format!("{resource} \"{name}\" not found in namespace \"{namespace}\""),
        )
    }

    /// Whether the error is of `kind`.
    pub fn is(&self, kind: ApiErrorKind) -> bool {
        self.kind == kind
    }
}

/// The result of a request to the cluster.
pub type ApiResult<T> = Result<T, ApiError>;

/// What happened to a watched object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEventType {
    /// The object appeared: created, or newly matching the watch's selector.
    Added,
    /// Changed; the object is the new version.
    Modified,
    /// Gone; the object is its last version.
    Deleted,
    /// A bookmark: only the resourceVersion moved.
    Bookmark,
}

/// One event of a watch.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchEventType,
    /// The object after it (for a bookmark, only its `metadata.resourceVersion` counts);
    /// shared, so that a cache keeps it without a copy.
    pub object: Arc<Value>,
}

/// A list's items (or one page of them) and the resourceVersion to watch from.
#[derive(Clone, Debug, Default)]
pub struct ObjectList {
    /// The objects (of this page).
    pub items: Vec<Value>,
    /// The list's resourceVersion: a watch from it misses nothing after the list.
    pub resource_version: String,
    /// Where the next page starts (the API's `metadata.continue`); `None` on the last page.
    pub continue_token: Option<String>,
}

/// Which page of a list to fetch: at most `limit` items, from `continue_token` (the previous
/// page's) on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRequest {
    /// The most items the page may hold.
    pub limit: u32,
    /// The previous page's [`ObjectList::continue_token`]; `None` for the first page.
    pub continue_token: Option<String>,
}

/// What to list or watch: a resource in one namespace, optionally by label selector
/// (`key=value`, comma-separated, as the API takes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The kind of object.
    pub resource: Resource,
    /// The namespace to list or watch in.
    pub namespace: String,
    /// `key=value,key2=value2`; `None`: every object.
    pub label_selector: Option<String>,
}

/// The Kubernetes API as the controller uses it. Every method has the API server's semantics:
/// create fails with AlreadyExists, delete with NotFound, writes carry resourceVersions. What a
/// client does faster with the same outcome is its [`FastPath`].
pub trait Cluster: Send + Sync + 'static {
    /// Creates `object` in `namespace`; the answer is the object as stored.
    fn create(
        &self,
        resource: Resource,
        namespace: &str,
        object: Value,
    ) -> BoxFuture<'_, ApiResult<Value>>;
    /// The object, or NotFound.
    fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<Value>>;
    /// Deletes with `propagationPolicy: Background`.
    fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<()>>;
    /// A JSON merge patch (RFC 7386) of the object; `metadata.resourceVersion` in the patch
    /// makes it conditional (409 Conflict when the object moved on).
    fn patch(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>>;
    /// A JSON merge patch of the `status` subresource.
    fn patch_status(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>>;
    /// Every object in `scope`, in one list.
    fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>>;
    /// One page of a list. Every page is of the first page's snapshot, whose resourceVersion
    /// is the one to watch from; an expired `continue_token` is Gone (list again from the
    /// start). A cluster that does not paginate answers with everything in one page.
    fn list_page(&self, scope: &Scope, page: &PageRequest) -> BoxFuture<'_, ApiResult<ObjectList>> {
        let _ = page;
        self.list(scope)
    }
    /// [`Self::list_page`], its items handed to `each` in batches as they are read, so that a
    /// page (or a whole list from a server that ignores `limit`) need never be held at once;
    /// the answer's items are those not handed (none, from a client that streams). The
    /// default reads the page whole.
    fn list_page_each<'a>(
        &'a self,
        scope: &'a Scope,
        page: &'a PageRequest,
        each: &'a mut (dyn FnMut(Vec<Value>) + Send),
    ) -> BoxFuture<'a, ApiResult<ObjectList>> {
        Box::pin(async move {
            let mut list = self.list_page(scope, page).await?;
            each(std::mem::take(&mut list.items));
            Ok(list)
        })
    }
    /// Watches from `resource_version`. The stream ends when the server ends it (the caller
    /// resumes from the last version it saw); an `Err(Gone)` item means list again.
    fn watch(
        &self,
        scope: &Scope,
        resource_version: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>>;
    /// The faster forms of some calls this client offers (see [`fast_path`]); `None`: only
    /// the calls above, which [`fast_path`]'s functions then fall back to.
    fn fast_path(&self) -> Option<&dyn FastPath> {
        None
    }
}
