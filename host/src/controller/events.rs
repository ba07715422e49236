//! Kubernetes Events on our objects: what `kubectl describe` shows a user.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::RngCore;

use serde_json::{Value, json};

use crate::model::time;
use crate::runtime::bindings::{Event, EventType};

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// This process's share of every Event name: random, so that two replicas, or a restart within
/// the same second, never pick the same names (the counter alone restarts at zero).
fn process_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| rand::rng().next_u64())
}

/// The longest object name an Event is named after: its name must stay a valid DNS subdomain
/// (253 characters) with the suffix.
const NAME_PREFIX: usize = 253 - 1 - 16 - 16 - 16;

/// A name no other Event gets: `<object>.<time><process><sequence>`, all hex. The sequence is
/// 64 bits and never wraps in a process's life; the process part tells processes apart.
pub fn event_name(object: &str, now: i64) -> String {
    let mut end = object.len().min(NAME_PREFIX);
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = object[..end].trim_end_matches(['.', '-']);
    format!(
        "{prefix}.{:x}{:016x}{:x}",
        now.max(0),
        process_id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

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
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(name, now), "namespace": namespace},
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_never_collide_however_many_events_an_object_gets_in_one_second() {
        // The earlier scheme kept 16 bits of the sequence: the 65,537th Event of a second
        // took the first one's name.
        let names: HashSet<String> = (0..70_000).map(|_| event_name("a", 1_000)).collect();
        assert_eq!(names.len(), 70_000);
    }

    #[test]
    fn a_long_object_name_still_gives_a_valid_event_name() {
        let long = "a".repeat(253);
        let name = event_name(&long, 1_000);
        assert!(name.len() <= 253, "{} characters", name.len());
        assert!(name.starts_with("aaa"));
    }
}
