//! The response body type: a whole JSON document, or a watch stream.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::Value;

/// Every response's body. Unsync: a watch body holds a timer, and hyper only needs `Send`.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// `value` as an `application/json` response with `code`.
pub(crate) fn json(code: StatusCode, value: &Value) -> Response<Body> {
    // Serializing a `Value` cannot fail: its map keys are strings.
    let bytes = serde_json::to_vec(&super::order::InApiOrder(value)).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed_unsync());
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
