//! A request's body, read as the API server reads it: at most 3 MiB, JSON (YAML for a
//! server-side apply).

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::StatusCode;
use hyper::body::Incoming;
use serde_json::Value;

use super::status::Failure;

/// The API server's own limit on a request body (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// How much of a body over [`MAX_BODY`] is read and dropped before the refusal.
const MAX_DRAINED: usize = 4 * MAX_BODY;

/// The body as a JSON object; anything else is a 400.
pub(super) async fn read_object(body: Incoming) -> Result<Value, Failure> {
    match read_json(body).await? {
        Some(value @ Value::Object(_)) => Ok(value),
        Some(_) => Err(Failure::bad_request(
            "the request body must be a JSON object",
        )),
        None => Err(Failure::bad_request("the request body is empty")),
    }
}

/// The body as JSON, `None` when empty.
pub(super) async fn read_json(body: Incoming) -> Result<Option<Value>, Failure> {
    let bytes = read_body(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| Failure::bad_request(format!("the request body is not JSON: {error}")))
}

/// The body of a server-side apply: YAML (JSON being YAML), one object.
pub(super) async fn read_yaml_object(body: Incoming) -> Result<Value, Failure> {
    let bytes = read_body(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Failure::bad_request("the request body is empty"));
    }
    let value: Value = serde_yaml_ng::from_slice(&bytes)
        .map_err(|error| Failure::bad_request(format!("error decoding YAML: {error}")))?;
    match value {
        Value::Object(_) => Ok(value),
        _ => Err(Failure::bad_request(
            "the applied configuration must be an object",
        )),
    }
}

/// Reads at most [`MAX_BODY`] bytes. A larger body is refused, but read on (up to
/// [`MAX_DRAINED`]) first, so that the client, still sending, reads the refusal rather than a
/// reset connection.
async fn read_body(mut body: Incoming) -> Result<Bytes, Failure> {
    let mut collected = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|error| Failure::bad_request(format!("reading the request body: {error}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= MAX_BODY {
            collected.extend_from_slice(&data);
        } else if seen > MAX_DRAINED {
            break;
        }
    }
    if seen > MAX_BODY {
        // As the API server words it.
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {MAX_BODY}"),
        ));
    }
    Ok(Bytes::from(collected))
}
