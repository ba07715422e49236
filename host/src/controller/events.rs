//! Kubernetes Events on our objects: what `kubectl describe` shows a user.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::model::time;
use crate::runtime::bindings::{Event, EventType};

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A core/v1 Event about `kind` `namespace/name` (uid `uid`).
pub fn event_object(
    kind: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    event: &Event,
    now: i64,
) -> Value {
    let stamp = time::format(now);
    // Unique per process and time, as client-go names them: <object>.<hex>.
    let suffix = format!(
        "{:x}{:04x}",
        now,
        SEQUENCE.fetch_add(1, Ordering::Relaxed) & 0xffff
    );
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{suffix}"), "namespace": namespace},
        "involvedObject": {
            "apiVersion": "cubepod.io/v1alpha1", "kind": kind,
            "namespace": namespace, "name": name, "uid": uid,
        },
        "reason": event.reason,
        "message": event.message,
        "type": match event.kind { EventType::Normal => "Normal", EventType::Warning => "Warning" },
        "source": {"component": "cubepod-controller"},
        "reportingComponent": "cubepod-controller",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    })
}
