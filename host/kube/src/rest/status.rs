//! A failed response, or a watch's ERROR event, as an [`ApiError`]: the kind from the HTTP code
//! (and, for 409, the Status `reason`), the message from the Status `message`, an Invalid's
//! causes from its `details.causes`.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::Value;

use crate::{ApiError, ApiErrorKind, StatusCause};

/// The longest piece of a non-Status body quoted in a message.
const MAX_QUOTED_BODY: usize = 512;

/// The error of a non-2xx response.
pub(crate) fn from_response(
    status: StatusCode,
    body: &[u8],
    retry_after: Option<Duration>,
) -> ApiError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let reason = parsed
        .as_ref()
        .and_then(|v| text(v, "reason"))
        .unwrap_or("");
    let message = parsed
        .as_ref()
        .and_then(|v| text(v, "message"))
        .map(str::to_owned)
        .unwrap_or_else(|| fallback_message(status, body));
    let kind = kind_for(status.as_u16(), reason);
    // The kind says the reason of every mapped status; for the rest, the message must.
    let message = if kind == ApiErrorKind::Other && !reason.is_empty() && !message.contains(reason)
    {
        format!("{reason}: {message}")
    } else {
        message
    };
    ApiError {
        kind,
        message,
        retry_after: retry_after.filter(|_| kind == ApiErrorKind::Unavailable),
        causes: parsed.as_ref().map(causes).unwrap_or_default(),
    }
}

/// A Status's `details.causes`: each field an Invalid answer refused.
fn causes(status: &Value) -> Vec<StatusCause> {
    let Some(causes) = status.pointer("/details/causes").and_then(Value::as_array) else {
        return Vec::new();
    };
    causes
        .iter()
        .map(|cause| StatusCause {
            reason: text(cause, "reason").unwrap_or_default().to_owned(),
            message: text(cause, "message").unwrap_or_default().to_owned(),
            field: text(cause, "field").unwrap_or_default().to_owned(),
        })
        .collect()
}

/// The error of a watch ERROR event, whose object is a Status (`code` 410: Gone).
pub(crate) fn from_status_object(object: &Value) -> ApiError {
    let code = object
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(0);
    let reason = text(object, "reason").unwrap_or("");
    // Older servers sent Expired without a code.
    let code = if code == 0 && matches!(reason, "Expired" | "Gone") {
        410
    } else {
        code
    };
    let message = text(object, "message")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("watch error: {object}"));
    ApiError::new(kind_for(code, reason), message)
}

fn kind_for(code: u16, reason: &str) -> ApiErrorKind {
    match code {
        404 => ApiErrorKind::NotFound,
        409 if reason == "AlreadyExists" => ApiErrorKind::AlreadyExists,
        409 => ApiErrorKind::Conflict,
        400 | 422 => ApiErrorKind::Invalid,
        401 => ApiErrorKind::Unauthorized,
        403 => ApiErrorKind::Forbidden,
        410 => ApiErrorKind::Gone,
        429 => ApiErrorKind::Unavailable,
        501 => ApiErrorKind::Other,
        500..=599 => ApiErrorKind::Unavailable,
        _ => ApiErrorKind::Other,
    }
}

fn text<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A body that is no Status (a proxy's HTML, plain text): its start, else the HTTP reason.
fn fallback_message(status: StatusCode, body: &[u8]) -> String {
    let body = String::from_utf8_lossy(body);
    let body = body.trim();
    let reason = status.canonical_reason().unwrap_or("error");
    if body.is_empty() {
        return format!("{} {reason}", status.as_u16());
    }
    let cut = body
        .char_indices()
        .nth(MAX_QUOTED_BODY)
        .map_or(body.len(), |(index, _)| index);
    let ellipsis = if cut < body.len() { "…" } else { "" };
    format!("{} {reason}: {}{ellipsis}", status.as_u16(), &body[..cut])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "code": code, "reason": reason, "message": message})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn conflict_and_already_exists_share_409() {
        let exists = from_response(
            StatusCode::CONFLICT,
            &status(409, "AlreadyExists", "pods \"a\" already exists"),
            None,
        );
        assert_eq!(exists.kind, ApiErrorKind::AlreadyExists);
        assert_eq!(exists.message, "pods \"a\" already exists");
        let conflict = from_response(StatusCode::CONFLICT, &status(409, "Conflict", "m"), None);
        assert_eq!(conflict.kind, ApiErrorKind::Conflict);
    }

    #[test]
    fn an_invalid_answer_keeps_its_causes() {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
            "reason": "Invalid", "message": "Sandbox.cubepod.io \"a\" is invalid: spec: Required value",
            "details": {"name": "a", "group": "cubepod.io", "kind": "Sandbox", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec"}]}})
        .to_string();
        let error = from_response(StatusCode::UNPROCESSABLE_ENTITY, body.as_bytes(), None);
        assert_eq!(error.kind, ApiErrorKind::Invalid);
        assert_eq!(
            error.causes,
            [StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec".into(),
            }]
        );
    }

    #[test]
    fn a_body_that_is_no_status_is_quoted() {
        let error = from_response(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>", None);
        assert_eq!(error.kind, ApiErrorKind::Unavailable);
        assert_eq!(error.message, "502 Bad Gateway: <html>bad gateway</html>");
        let empty = from_response(StatusCode::FORBIDDEN, b"", None);
        assert_eq!(empty.message, "403 Forbidden");
        let long = from_response(StatusCode::BAD_REQUEST, "x".repeat(2000).as_bytes(), None);
        assert!(long.message.len() < 600);
    }

    #[test]
    fn retry_after_only_on_transient_errors() {
        let wait = Some(Duration::from_secs(3));
        assert_eq!(
            from_response(StatusCode::TOO_MANY_REQUESTS, b"", wait).retry_after,
            wait
        );
        assert_eq!(
            from_response(StatusCode::NOT_FOUND, b"", wait).retry_after,
            None
        );
    }

    #[test]
    fn an_unmapped_status_keeps_its_reason() {
        let error = from_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method",
            ),
            None,
        );
        assert_eq!(error.kind, ApiErrorKind::Other);
        assert_eq!(
            error.message,
            "MethodNotAllowed: the server does not allow this method"
        );
    }

    #[test]
    fn watch_errors() {
        let gone = from_status_object(&json!({"kind": "Status", "code": 410,
            "reason": "Expired", "message": "too old resource version: 1 (5)"}));
        assert_eq!(gone.kind, ApiErrorKind::Gone);
        assert_eq!(gone.message, "too old resource version: 1 (5)");
        let expired = from_status_object(&json!({"reason": "Expired"}));
        assert_eq!(expired.kind, ApiErrorKind::Gone);
        let other = from_status_object(&json!({"code": 500, "message": "boom"}));
        assert_eq!(other.kind, ApiErrorKind::Unavailable);
    }
}
