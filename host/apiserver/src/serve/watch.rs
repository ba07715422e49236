//! A watch response: newline-delimited JSON events streamed from a MemoryCluster watch, ended
//! by the timeout, a layer's event limit, the cluster closing the stream, or an error event.
//! Each object goes out as it is or, for a client that asked for Tables (`kubectl get -w`), as
//! a one-row Table; a field selector filters them.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::MemoryCluster;
use bytes::Bytes;
use cubepod_kube::{ApiError, ApiResult, Resource, WatchEvent, WatchEventType};
use hyper::body::{Body, Frame};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};

use super::fields::FieldSelector;
use super::render::Render;
use super::status::Failure;

/// How a watch stream is shaped.
pub(crate) struct WatchPlan {
    pub(crate) resource: Resource,
    pub(crate) timeout: Duration,
    /// Send BOOKMARKs (at this interval, if any, and just before the timeout ends it).
    pub(crate) bookmarks: bool,
    pub(crate) bookmark_interval: Option<Duration>,
    /// End after this many object events (a layer's fault).
    pub(crate) end_after: Option<u32>,
    /// Objects as one-row Tables, as their metadata alone, or whole.
    pub(crate) render: Render,
    pub(crate) fields: FieldSelector,
}

pub(crate) struct WatchBody {
    cluster: Arc<MemoryCluster>,
    plan: WatchPlan,
    /// The synthetic ADDED events of a watch without a resourceVersion, sent first.
    initial: VecDeque<Value>,
    events: mpsc::Receiver<ApiResult<WatchEvent>>,
    deadline: Pin<Box<Sleep>>,
    ticks: Option<Interval>,
    /// A bookmark to send once the events up to its resourceVersion are out.
    bookmark_due: Option<String>,
    /// The timeout passed: drain, bookmark, end.
    closing: bool,
    finished: bool,
    sent: u32,
}

impl WatchBody {
    pub(crate) fn new(
        cluster: Arc<MemoryCluster>,
        plan: WatchPlan,
        initial: Vec<Value>,
        events: mpsc::Receiver<ApiResult<WatchEvent>>,
    ) -> Self {
        let deadline = Box::pin(tokio::time::sleep(plan.timeout));
        let ticks = plan
            .bookmark_interval
            .filter(|period| plan.bookmarks && !period.is_zero())
            .map(|period| {
                let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
                ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
                ticks
            });
        let finished = plan.end_after == Some(0);
        Self {
            cluster,
            plan,
            initial: initial.into(),
            events,
            deadline,
            ticks,
            bookmark_due: None,
            closing: false,
            finished,
            sent: 0,
        }
    }

    /// An object event; the last one when a fault's limit is reached.
    fn object_frame(&mut self, kind: &str, object: &Value) -> Frame<Bytes> {
        self.sent += 1;
        if self.plan.end_after.is_some_and(|limit| self.sent >= limit) {
            self.finished = true;
        }
        Frame::data(line(
            kind,
            &self.plan.render.object(self.plan.resource, object),
        ))
    }

    /// Takes the cluster's resourceVersion now: every change up to it is already queued in
    /// `events` (both happen under the cluster's lock), so once they are drained a bookmark
    /// at it is exact.
    fn schedule_bookmark(&mut self) {
        if self.plan.bookmarks {
            self.bookmark_due = Some(self.cluster.resource_version());
        }
    }
}

impl Body for WatchBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        while let Some(object) = this.initial.pop_front() {
            if this.plan.fields.matches(&object) {
                return Poll::Ready(Some(Ok(this.object_frame("ADDED", &object))));
            }
        }
        if !this.closing && this.deadline.as_mut().poll(cx).is_ready() {
            this.closing = true;
            this.schedule_bookmark();
        }
        if !this.closing
            && let Some(ticks) = &mut this.ticks
            && ticks.poll_tick(cx).is_ready()
        {
            this.schedule_bookmark();
        }
        match this.events.poll_recv(cx) {
            Poll::Ready(Some(Ok(event))) if !this.plan.fields.matches(&event.object) => {
                // Not this watch's: look at the next one at once.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(Some(Ok(event))) => {
                let frame = this.object_frame(event_type(event.kind), &event.object);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                this.finished = true;
                Poll::Ready(Some(Ok(Frame::data(error_line(
                    &error,
                    this.plan.resource,
                )))))
            }
            // The cluster ended the stream (end_watches, or a receiver that fell behind).
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(version) = this.bookmark_due.take() {
                    let frame = Frame::data(bookmark(this.plan.resource, &version));
                    return Poll::Ready(Some(Ok(frame)));
                }
                if this.closing {
                    this.finished = true;
                    return Poll::Ready(None);
                }
                Poll::Pending
            }
        }
    }
}

fn event_type(kind: WatchEventType) -> &'static str {
    match kind {
        WatchEventType::Added => "ADDED",
        WatchEventType::Modified => "MODIFIED",
        WatchEventType::Deleted => "DELETED",
        WatchEventType::Bookmark => "BOOKMARK",
    }
}

/// `{"type":kind,"object":object}` and a newline.
fn line(kind: &str, object: &Value) -> Bytes {
    let mut bytes = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    // Writing a `Value` to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut bytes, &super::order::InApiOrder(object));
    bytes.extend_from_slice(b"}\n");
    Bytes::from(bytes)
}

/// The ERROR event the API server sends in-stream, e.g. 410 Expired for a compacted version.
fn error_line(error: &ApiError, resource: Resource) -> Bytes {
    let mut failure = Failure::from_api(error, resource, None);
    failure.target = None;
    line("ERROR", &failure.to_status())
}

fn bookmark(resource: Resource, version: &str) -> Bytes {
    let object = json!({
        "kind": resource.kind(),
        "apiVersion": resource.api_version(),
        "metadata": { "resourceVersion": version },
    });
    line("BOOKMARK", &object)
}
