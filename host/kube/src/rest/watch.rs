//! A watch response, streamed: newline-delimited JSON events
//! (`{"type":"ADDED","object":{...}}`) read as they come and sent on a channel. The channel
//! closes when the server ends the stream (its `timeoutSeconds`), when the connection fails
//! (the caller resumes from the last resourceVersion it saw), or after an ERROR event, which
//! is sent as `Err` (410 Gone: list again). The echo of a write the watcher already holds
//! (see [`EchoFilter`]) is recognised from its metadata alone and sent as a bookmark of its
//! version, the rest of it never decoded.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt as _;
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::projection::{Key, Projection, read_seeded};
use super::status;
use crate::{ApiError, ApiErrorKind, ApiResult, EchoFilter, WatchEvent, WatchEventType};

/// Events decoded ahead of the consumer; beyond it the stream waits (TCP pushes back).
const CHANNEL_CAPACITY: usize = 256;
/// Turns of the run queue a watch lets pass before it looks at the frames it read. Over HTTP/2
/// a write's answer comes over the watch's own connection, read at once, and one turn lets the
/// writer's task (woken with this one) run. Over HTTP/1.1 it comes over another connection,
/// whose task must read it first and then wake the writer: two turns. With one, 0.15 to 0.3
/// more reconciles per new sandbox were woken by echoes seen before their answers.
const ANSWER_TURNS: usize = 2;
/// No event is this large; a line without end is a broken stream.
const MAX_LINE_BYTES: usize = 64 << 20;

/// Reads `body` on a task; `idle_limit` ends a stream that went silent (a dead peer).
pub(crate) fn spawn(
    body: Incoming,
    idle_limit: Duration,
    what: String,
    projection: Projection,
    echoes: Option<Arc<dyn EchoFilter>>,
) -> mpsc::Receiver<ApiResult<WatchEvent>> {
    let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
    let reading = Reading { projection, echoes };
    tokio::spawn(pump(body, sender, idle_limit, what, reading));
    receiver
}

/// How a stream's lines are read.
struct Reading {
    projection: Projection,
    echoes: Option<Arc<dyn EchoFilter>>,
}

async fn pump(
    mut body: Incoming,
    sender: mpsc::Sender<ApiResult<WatchEvent>>,
    idle_limit: Duration,
    what: String,
    reading: Reading,
) {
    let mut lines = Lines::default();
    loop {
        let frame = tokio::select! {
            frame = tokio::time::timeout(idle_limit, body.frame()) => frame,
            // The consumer is gone: dropping the body closes the stream.
            () = sender.closed() => return,
        };
        let mut end = match frame {
            Err(_) => {
                tracing::debug!(watch = %what, ?idle_limit, "watch silent too long; ending it");
                return;
            }
            Ok(frame) => take(frame, &mut lines),
        };
        // The frames already read behind this one go with it, under one wait below: a turn of
        // the run queue can be long (a policy that spins runs a tick in each), and a watch
        // that waited turns for every frame would fall behind the cluster.
        while end.is_none() && lines.pending() <= MAX_LINE_BYTES {
            match body.frame().now_or_never() {
                None => break,
                Some(frame) => end = take(frame, &mut lines),
            }
        }
        if reading.echoes.is_some() {
            // A write's answer often comes with the watch's echo of it: turns of the run queue
            // let the writer's task tell the cache of its write before the echo is looked at.
            for _ in 0..ANSWER_TURNS {
                tokio::task::yield_now().await;
            }
        }
        while let Some(line) = lines.next_line() {
            if !forward(&sender, &line, &reading).await {
                return;
            }
        }
        match end {
            None => {}
            Some(End::Finished) => break,
            Some(End::Broke(error)) => {
                tracing::debug!(watch = %what, %error, "watch stream broke; ending it");
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
    forward(&sender, &rest, &reading).await;
}

/// How a watch's stream ended.
enum End {
    /// The server closed it (its `timeoutSeconds`).
    Finished,
    Broke(hyper::Error),
}

/// Adds a frame's data to `lines` (trailers carry none); the stream's end, when it is that.
fn take(frame: Option<Result<Frame<Bytes>, hyper::Error>>, lines: &mut Lines) -> Option<End> {
    match frame {
        None => Some(End::Finished),
        Some(Err(error)) => Some(End::Broke(error)),
        Some(Ok(frame)) => {
            if let Ok(data) = frame.into_data() {
                lines.push(&data);
            }
            None
        }
    }
}

/// Sends the event of one line; false when the stream must end (an error, or no consumer).
async fn forward(
    sender: &mpsc::Sender<ApiResult<WatchEvent>>,
    line: &[u8],
    reading: &Reading,
) -> bool {
    if let Some(echoes) = &reading.echoes
        && let Some(version) = echo_version(line, echoes.as_ref())
    {
        let bookmark = WatchEvent {
            kind: WatchEventType::Bookmark,
            object: Arc::new(json!({ "metadata": { "resourceVersion": version } })),
        };
        return sender.send(Ok(bookmark)).await.is_ok();
    }
    match decode(line, reading.projection) {
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
        while let Some(key) = map.next_key_seed(Key)? {
            match &*key {
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
pub(crate) fn decode(line: &[u8], projection: Projection) -> ApiResult<Option<WatchEvent>> {
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

/// The version of the event on `line` when `echoes` takes it as an echo: an ADDED or
/// MODIFIED event whose identity and version are read, in the API server's order (`type`
/// before `object`, `metadata` first in the object), before anything else of it is.
fn echo_version(line: &[u8], echoes: &dyn EchoFilter) -> Option<String> {
    let mut peeked = Peeked::default();
    // The peek stops reading at the end of the metadata, so the parse ends in an error
    // whenever it found what it looked for: what it gathered is the answer, not the result.
    // Read from the bytes, not checked whole first: only the strings it keeps are checked.
    let _ = EventPeek(&mut peeked).deserialize(&mut serde_json::Deserializer::from_slice(line));
    let Peeked {
        kind: Some(kind),
        metadata: Some(meta),
    } = peeked
    else {
        return None;
    };
    let (Some(name), Some(version)) = (meta.name, meta.resource_version) else {
        return None;
    };
    if !matches!(kind, "ADDED" | "MODIFIED") || version.is_empty() {
        return None;
    }
    echoes
        .take_echo(meta.namespace, name, version)
        .then(|| version.to_owned())
}

/// What a peek read of an event: its type and its object's identity.
#[derive(Default)]
struct Peeked<'de> {
    kind: Option<&'de str>,
    metadata: Option<PeekedMeta<'de>>,
}

#[derive(Default)]
struct PeekedMeta<'de> {
    name: Option<&'de str>,
    namespace: &'de str,
    resource_version: Option<&'de str>,
}

/// The error that ends a peek once the identity and version are read: the rest is not looked
/// at (the API server writes `name`, `namespace`, `uid` and `resourceVersion` first in the
/// metadata; labels, annotations and managed fields after them).
const PEEK_DONE: &str = "peek done";

struct EventPeek<'p, 'de>(&'p mut Peeked<'de>);

impl<'de> Visitor<'de> for EventPeek<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a watch event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Keys and the type are borrowed: one with an escape in it ends the peek (the event is
        // then decoded whole).
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "type" => self.0.kind = Some(map.next_value()?),
                // Only once the type is known: an object first is read whole, not peeked.
                "object" if self.0.kind.is_some() => {
                    return map.next_value_seed(ObjectPeek(&mut self.0.metadata));
                }
                _ => return Err(serde::de::Error::custom(PEEK_DONE)),
            }
        }
        Ok(())
    }
}

struct ObjectPeek<'p, 'de>(&'p mut Option<PeekedMeta<'de>>);

impl<'de> Visitor<'de> for ObjectPeek<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<&'de str>()? {
            if key == "metadata" {
                let meta = self.0.insert(PeekedMeta::default());
                return map.next_value_seed(MetaPeek(meta));
            }
            // `kind` and `apiVersion` come before it.
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

struct MetaPeek<'p, 'de>(&'p mut PeekedMeta<'de>);

impl<'de> Visitor<'de> for MetaPeek<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object's metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "name" => self.0.name = Some(map.next_value()?),
                "namespace" => self.0.namespace = map.next_value()?,
                "resourceVersion" => self.0.resource_version = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            // A namespace comes before the version in the API server's order (and in sorted
            // order); one that came after would only make the echo unknown, never wrong.
            if self.0.name.is_some() && self.0.resource_version.is_some() {
                break;
            }
        }
        Err(serde::de::Error::custom(PEEK_DONE))
    }
}

// Each peek reads a map: its seed only hands the deserializer to its visitor.
macro_rules! map_seed {
    ($($peek:ident),*) => {$(
        impl<'de> DeserializeSeed<'de> for $peek<'_, 'de> {
            type Value = ();

            fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
                deserializer.deserialize_map(self)
            }
        }
    )*};
}

map_seed!(EventPeek, ObjectPeek, MetaPeek);

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
        match memchr::memchr(b'\n', &self.buffer[self.scanned..]) {
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

    /// Takes as echoes the versions it holds, and records what it was asked.
    #[derive(Default)]
    struct Held {
        versions: Vec<&'static str>,
        asked: std::sync::Mutex<Vec<(String, String, String)>>,
    }

    impl EchoFilter for Held {
        fn take_echo(&self, namespace: &str, name: &str, resource_version: &str) -> bool {
            let mut asked = self.asked.lock().expect("lock");
            asked.push((namespace.into(), name.into(), resource_version.into()));
            self.versions.contains(&resource_version)
        }
    }

    fn read(line: &[u8], held: &Arc<Held>) -> WatchEvent {
        let reading = Reading {
            projection: Projection::Whole,
            echoes: Some(held.clone()),
        };
        let (sender, mut receiver) = mpsc::channel(1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert!(runtime.block_on(forward(&sender, line, &reading)));
        receiver
            .try_recv()
            .expect("an event")
            .expect("not an error")
    }

    const POD: &[u8] = br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"7","labels":{"a":"b"}},"spec":{"containers":[]},"status":{"phase":"Running"}}}"#;

    #[test]
    fn the_echo_of_a_held_write_becomes_a_bookmark_of_its_version() {
        let held = Arc::new(Held {
            versions: vec!["7"],
            ..Held::default()
        });
        let event = read(POD, &held);
        assert_eq!(event.kind, WatchEventType::Bookmark);
        assert_eq!(
            *event.object,
            serde_json::json!({"metadata": {"resourceVersion": "7"}})
        );
        assert_eq!(
            *held.asked.lock().expect("lock"),
            vec![("ns".into(), "p".into(), "7".into())]
        );
    }

    #[test]
    fn any_other_event_is_decoded_whole() {
        let held = Arc::new(Held {
            versions: vec!["6"],
            ..Held::default()
        });
        // Another version of the object: asked, not taken.
        let event = read(POD, &held);
        assert_eq!(event.kind, WatchEventType::Modified);
        assert_eq!(event.object["status"]["phase"], "Running");
        assert_eq!(held.asked.lock().expect("lock").len(), 1);
        // A deletion, an object before its type, a bookmark: never asked.
        let deleted = br#"{"type":"DELETED","object":{"metadata":{"name":"p","namespace":"ns","resourceVersion":"6"}}}"#;
        assert_eq!(read(deleted, &held).kind, WatchEventType::Deleted);
        let reordered = br#"{"object":{"metadata":{"name":"p","namespace":"ns","resourceVersion":"6"}},"type":"ADDED"}"#;
        let event = read(reordered, &held);
        assert_eq!(event.kind, WatchEventType::Added);
        assert_eq!(event.object["metadata"]["name"], "p");
        let bookmark = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"6"}}}"#;
        assert_eq!(read(bookmark, &held).kind, WatchEventType::Bookmark);
        assert_eq!(held.asked.lock().expect("lock").len(), 1);
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
