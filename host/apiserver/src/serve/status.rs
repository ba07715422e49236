//! `metav1.Status` bodies: how the API server says why a request failed (and, for a delete,
//! that it succeeded).

use std::borrow::Cow;

use cubepod_kube::{ApiError, ApiErrorKind, Resource, StatusCause};
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use super::body::{self, Body};

/// A failed request, rendered as a Status with the matching HTTP code.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub(crate) code: StatusCode,
    pub(crate) reason: Cow<'static, str>,
    pub(crate) message: String,
    /// The object the request was about, for `details` (name, group, kind).
    pub(crate) target: Option<(Resource, String)>,
    /// Seconds, sent as `Retry-After` and `details.retryAfterSeconds`.
    pub(crate) retry_after: Option<u64>,
    /// An Invalid's fields (`details.causes`); its `details.kind` is then the kind, not the
    /// resource, as `errors.NewInvalid` fills it.
    pub(crate) causes: Box<[StatusCause]>,
}

impl Failure {
    pub(crate) fn new(
        code: StatusCode,
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
            target: None,
            retry_after: None,
            causes: Box::default(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// A path the server does not serve, worded as the API server words it.
    pub(crate) fn no_route() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub(crate) fn method_not_allowed(method: &hyper::Method) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {method}"),
        )
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
    }

    /// An error from the cluster, about `resource` (and `name`, when there is one).
    pub(crate) fn from_api(error: &ApiError, resource: Resource, name: Option<&str>) -> Self {
        let (code, reason) = code_and_reason(error.kind);
        let mut failure = Self::new(code, reason, error.message.clone());
        failure.target = Some((resource, name.unwrap_or_default().to_owned()));
        failure.retry_after = error.retry_after.map(|d| d.as_secs());
        failure.causes = error.causes.clone().into_boxed_slice();
        failure
    }

    /// The Status object.
    pub(crate) fn to_status(&self) -> Value {
        let mut details = self
            .target
            .as_ref()
            .map(|(resource, name)| target_details(*resource, name))
            .unwrap_or_default();
        if !self.causes.is_empty() {
            if let Some((resource, _)) = &self.target {
                details.insert("kind".into(), resource.kind().into());
            }
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|cause| {
                    json!({"reason": cause.reason, "message": cause.message, "field": cause.field})
                })
                .collect();
            details.insert("causes".into(), causes.into());
        }
        if let Some(seconds) = self.retry_after {
            details.insert("retryAfterSeconds".into(), seconds.into());
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }

    pub(crate) fn into_response(self) -> Response<Body> {
        let mut response = body::json(self.code, &self.to_status());
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The Status a successful delete answers with once the object is gone.
pub(crate) fn success(resource: Resource, name: &str, uid: Option<&str>) -> Value {
    let mut details = target_details(resource, name);
    if let Some(uid) = uid {
        details.insert("uid".into(), uid.into());
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// The HTTP code and Status reason the API server uses for each kind of error.
pub(crate) fn code_and_reason(kind: ApiErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ApiErrorKind::NotFound => (StatusCode::NOT_FOUND, "NotFound"),
        ApiErrorKind::AlreadyExists => (StatusCode::CONFLICT, "AlreadyExists"),
        ApiErrorKind::Conflict => (StatusCode::CONFLICT, "Conflict"),
        ApiErrorKind::Invalid => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
        ApiErrorKind::Forbidden => (StatusCode::FORBIDDEN, "Forbidden"),
        ApiErrorKind::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
        // A watch or list from a compacted resourceVersion: the server says Expired.
        ApiErrorKind::Gone => (StatusCode::GONE, "Expired"),
        ApiErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        ApiErrorKind::Other => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    }
}

/// `details` naming an object: `{"name", "group", "kind": plural}`, as the API server fills it.
fn target_details(resource: Resource, name: &str) -> Map<String, Value> {
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), name.into());
    }
    if let Some((group, _)) = resource.api_version().split_once('/') {
        details.insert("group".into(), group.into());
    }
    details.insert("kind".into(), resource.plural().into());
    details
}
