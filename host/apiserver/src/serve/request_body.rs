//! A request's body, read as the API server reads it: at most 3 MiB, JSON.

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper::body::Incoming;
use serde_json::Value;

use super::status::Failure;

/// The API server's own limit on a request body (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

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

async fn read_body(body: Incoming) -> Result<Bytes, Failure> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than {MAX_BODY} bytes"),
        )),
        Err(error) => Err(Failure::bad_request(format!(
            "reading the request body: {error}"
        ))),
    }
}
