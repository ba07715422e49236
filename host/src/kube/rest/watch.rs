//! A watch response, streamed: newline-delimited JSON events
//! (`{"type":"ADDED","object":{...}}`) read as they come and sent on a channel. The channel
//! closes when the server ends the stream (its `timeoutSeconds`), when the connection fails
//! (the caller resumes from the last resourceVersion it saw), or after an ERROR event, which
//! is sent as `Err` (410 Gone: list again).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use tokio::sync::mpsc;

use super::projection::{Projection, read_seeded};
use super::status;
use crate::kube::{ApiError, ApiErrorKind, ApiResult, WatchEvent, WatchEventType};

/// Events decoded ahead of the consumer; beyond it the stream waits (TCP pushes back).
const CHANNEL_CAPACITY: usize = 256;
/// No event is this large; a line without end is a broken stream.
const MAX_LINE_BYTES: usize = 64 << 20;

/// Reads `body` on a task; `idle_limit` ends a stream that went silent (a dead peer).
pub fn spawn(
    body: Incoming,
    idle_limit: Duration,
    what: String,
    projection: Projection,
) -> mpsc::Receiver<ApiResult<WatchEvent>> {
    let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
    tokio::spawn(pump(body, sender, idle_limit, what, projection));
    receiver
}

async fn pump(
    mut body: Incoming,
    sender: mpsc::Sender<ApiResult<WatchEvent>>,
    idle_limit: Duration,
    what: String,
    projection: Projection,
) {
    let mut lines = Lines::default();
    loop {
        let frame = tokio::select! {
            frame = tokio::time::timeout(idle_limit, body.frame()) => frame,
            // The consumer is gone: dropping the body closes the stream.
            () = sender.closed() => return,
        };
        let data = match frame {
            Err(_) => {
                tracing::debug!(watch = %what, ?idle_limit, "watch silent too long; ending it");
                return;
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                tracing::debug!(watch = %what, %error, "watch stream broke; ending it");
                return;
            }
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(_trailers) => continue,
            },
        };
        lines.push(&data);
        while let Some(line) = lines.next_line() {
            if !forward(&sender, &line, projection).await {
                return;
            }
        }
        if lines.pending() > MAX_LINE_BYTES {
            let error = ApiError::new(
                ApiErrorKind::Other,
                format!("{what}: a watch event exceeds {MAX_LINE_BYTES} bytes"),
            );
            let _ = sender.send(Err(error)).await;
            return;
        }
    }
    // The last event may lack its newline.
    let rest = lines.rest();
    forward(&sender, &rest, projection).await;
}

/// Sends the event of one line; false when the stream must end (an error, or no consumer).
async fn forward(
    sender: &mpsc::Sender<ApiResult<WatchEvent>>,
    line: &[u8],
    projection: Projection,
) -> bool {
    match decode(line, projection) {
        Ok(None) => true,
        Ok(Some(event)) => sender.send(Ok(event)).await.is_ok(),
        Err(error) => {
            let _ = sender.send(Err(error)).await;
            false
        }
    }
}

struct RawEvent {
    kind: String,
    object: Value,
}

/// A watch event, its object read through the projection.
struct EventSeed(Projection);

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = RawEvent;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawEvent, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed {
    type Value = RawEvent;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a watch event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEvent, A::Error> {
        let mut kind = None;
        let mut object = Value::Null;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "type" => kind = Some(map.next_value::<String>()?),
                "object" => object = map.next_value_seed(self.0)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kind = kind.ok_or_else(|| serde::de::Error::missing_field("type"))?;
        Ok(RawEvent { kind, object })
    }
}

/// One line of a watch stream: an event, nothing (a blank line), or the error that ends it.
pub fn decode(line: &[u8], projection: Projection) -> ApiResult<Option<WatchEvent>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let raw = read_seeded(line, EventSeed(projection))
        .map_err(|e| ApiError::new(ApiErrorKind::Other, format!("malformed watch event: {e}")))?;
    let kind = match raw.kind.as_str() {
        "ADDED" => WatchEventType::Added,
        "MODIFIED" => WatchEventType::Modified,
        "DELETED" => WatchEventType::Deleted,
        "BOOKMARK" => WatchEventType::Bookmark,
        "ERROR" => return Err(status::from_status_object(&raw.object)),
        other => {
            return Err(ApiError::new(
                ApiErrorKind::Other,
                format!("unknown watch event type {other:?}"),
            ));
        }
    };
    Ok(Some(WatchEvent {
        kind,
        object: Arc::new(raw.object),
    }))
}

/// Splits a byte stream into lines, whatever the frames' boundaries.
#[derive(Default)]
struct Lines {
    buffer: BytesMut,
    /// Bytes already searched for a newline, so a long line is scanned once.
    scanned: usize,
}

impl Lines {
    fn push(&mut self, data: &[u8]) {
        self.buffer.extend_from_slice(data);
    }

    fn next_line(&mut self) -> Option<Bytes> {
        match self.buffer[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(at) => {
                let line = self.buffer.split_to(self.scanned + at + 1);
                self.scanned = 0;
                Some(line.freeze())
            }
            None => {
                self.scanned = self.buffer.len();
                None
            }
        }
    }

    fn pending(&self) -> usize {
        self.buffer.len()
    }

    fn rest(&mut self) -> Bytes {
        self.scanned = 0;
        self.buffer.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_across_frames() {
        let mut lines = Lines::default();
        lines.push(b"{\"a\":");
        assert!(lines.next_line().is_none());
        lines.push(b"1}\n{\"b\"");
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"a\":1}\n"[..]));
        assert!(lines.next_line().is_none());
        lines.push(b":2}");
        assert!(lines.next_line().is_none());
        assert_eq!(&lines.rest()[..], b"{\"b\":2}");
    }

    fn decode_whole(line: &[u8]) -> ApiResult<Option<WatchEvent>> {
        decode(line, Projection::Whole)
    }

    #[test]
    fn decodes_events_and_errors() {
        let event = decode_whole(br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#)
            .expect("event")
            .expect("some");
        assert_eq!(event.kind, WatchEventType::Added);
        assert_eq!(event.object["metadata"]["name"], "a");
        assert!(decode_whole(b"  \n").expect("blank").is_none());
        let gone = decode_whole(
            br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}"#,
        )
        .expect_err("error");
        assert_eq!(gone.kind, ApiErrorKind::Gone);
        assert_eq!(
            decode_whole(b"{not json").expect_err("bad").kind,
            ApiErrorKind::Other
        );
        assert!(decode_whole(br#"{"type":"SURPRISE","object":{}}"#).is_err());
        assert!(decode_whole(br#"{"object":{}}"#).is_err());
    }

    #[test]
    fn a_projected_event_keeps_metadata_and_status_and_errors_whole() {
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"name":"p"},"spec":{"a":1},"status":{"phase":"Running"}}}"#;
        let event = decode(line, Projection::MetadataAndStatus)
            .expect("event")
            .expect("some");
        assert_eq!(
            *event.object,
            serde_json::json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}})
        );
        let gone = decode(
            br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}"#,
            Projection::MetadataAndStatus,
        )
        .expect_err("error");
        assert_eq!(gone.kind, ApiErrorKind::Gone);
    }
}
