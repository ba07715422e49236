//! Watches: a bounded history of changes for resuming, and the open watch streams.
//!
//! Publishing never waits on a receiver: a stream whose buffer is full is closed instead, and
//! its owner resumes from the last resourceVersion it saw, as after a server timeout.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::errors;
use super::meta;
use super::selector::Selector;
use cubepod_kube::{ApiResult, Resource, WatchEvent, WatchEventType};

/// One committed write, as the history keeps it.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) resource_version: u64,
    pub(crate) resource: Resource,
    pub(crate) namespace: String,
    /// Added, Modified or Deleted, before any selector is applied.
    pub(crate) kind: WatchEventType,
    pub(crate) object: Arc<Value>,
    /// The object before a Modified, to see it leave or enter a selector.
    pub(crate) previous: Option<Arc<Value>>,
}

/// What a watch is on.
#[derive(Clone, Debug)]
pub(crate) struct Filter {
    pub(crate) resource: Resource,
    /// `""`: all namespaces.
    pub(crate) namespace: String,
    pub(crate) selector: Selector,
}

impl Filter {
    /// The event this watch sees for `change`, if any. As the API server does, an object that
    /// starts matching the selector is Added and one that stops matching is Deleted.
    fn event_for(&self, change: &Change) -> Option<WatchEvent> {
        if change.resource != self.resource
            || (!self.namespace.is_empty() && change.namespace != self.namespace)
        {
            return None;
        }
        let event = |kind, object: &Arc<Value>| {
            Some(WatchEvent {
                kind,
                object: Arc::clone(object),
            })
        };
        if self.selector.is_everything() {
            return event(change.kind, &change.object);
        }
        let now = self.selector.matches(&change.object);
        if change.kind != WatchEventType::Modified {
            return if now {
                event(change.kind, &change.object)
            } else {
                None
            };
        }
        let before = change
            .previous
            .as_deref()
            .is_some_and(|p| self.selector.matches(p));
        match (before, now) {
            (true, true) => event(WatchEventType::Modified, &change.object),
            (false, true) => event(WatchEventType::Added, &change.object),
            (true, false) => {
                // The API sends the last state that matched, at the new resourceVersion.
                let mut last = change.previous.as_deref().cloned().unwrap_or(Value::Null);
                meta::set(
                    &mut last,
                    "resourceVersion",
                    change.resource_version.to_string(),
                );
                event(WatchEventType::Deleted, &Arc::new(last))
            }
            (false, false) => None,
        }
    }
}

struct Watcher {
    filter: Filter,
    /// Only changes after this resourceVersion are sent.
    after: u64,
    sender: mpsc::Sender<ApiResult<WatchEvent>>,
}

pub(crate) struct WatchHub {
    history: VecDeque<Change>,
    history_limit: usize,
    /// The newest resourceVersion no longer in the history: a watch from an older one is Gone.
    floor: u64,
    /// The newest resourceVersion published.
    latest: u64,
    watchers: Vec<Watcher>,
    /// Room for events a receiver has not taken yet, beyond the replayed backlog.
    buffer: usize,
}

impl WatchHub {
    pub(crate) fn new(history_limit: usize, buffer: usize) -> Self {
        Self {
            history: VecDeque::new(),
            history_limit,
            floor: 0,
            latest: 0,
            watchers: Vec::new(),
            buffer: buffer.max(1),
        }
    }

    pub(crate) fn publish(&mut self, change: Change) {
        self.latest = change.resource_version;
        self.watchers.retain(|watcher| {
            if watcher.sender.is_closed() {
                return false;
            }
            if change.resource_version <= watcher.after {
                return true;
            }
            let Some(event) = watcher.filter.event_for(&change) else {
                return true;
            };
            let sent = watcher.sender.try_send(Ok(event)).is_ok();
            if !sent {
                tracing::debug!(
                    resource = %watcher.filter.resource,
                    "memory cluster: closing a watch whose receiver fell behind"
                );
            }
            sent
        });
        self.history.push_back(change);
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.floor = dropped.resource_version;
            }
        }
    }

    /// A stream of the changes after `after` that `filter` selects: first the ones still in the
    /// history, then the live ones. One `Err(Gone)` item if the history no longer reaches back.
    pub(crate) fn subscribe(
        &mut self,
        filter: Filter,
        after: u64,
    ) -> mpsc::Receiver<ApiResult<WatchEvent>> {
        if after < self.floor {
            let (sender, receiver) = mpsc::channel(1);
            // The receiver is still here, so the one slot is free.
            let _ = sender.try_send(Err(errors::gone(after, self.floor)));
            return receiver;
        }
        let backlog: Vec<WatchEvent> = self
            .history
            .iter()
            .filter(|change| change.resource_version > after)
            .filter_map(|change| filter.event_for(change))
            .collect();
        let (sender, receiver) = mpsc::channel(backlog.len() + self.buffer);
        for event in backlog {
            // Sized for the backlog above: this cannot be full.
            let _ = sender.try_send(Ok(event));
        }
        self.watchers.push(Watcher {
            filter,
            after,
            sender,
        });
        receiver
    }

    /// Ends every open stream, as a server-side watch timeout does.
    pub(crate) fn end_all(&mut self) {
        self.watchers.clear();
    }

    /// Forgets the history: resuming from any resourceVersion before now is Gone.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.floor = self.latest;
    }

    pub(crate) fn open_watches(&self) -> usize {
        self.watchers
            .iter()
            .filter(|w| !w.sender.is_closed())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_kube::ApiErrorKind;
    use serde_json::json;

    fn change(rv: u64, kind: WatchEventType, labels: Value, previous: Option<Value>) -> Change {
        Change {
            resource_version: rv,
            resource: Resource::Pod,
            namespace: "ns".into(),
            kind,
            object: Arc::new(json!({"metadata": {"name": "p", "labels": labels}})),
            previous: previous.map(|l| Arc::new(json!({"metadata": {"name": "p", "labels": l}}))),
        }
    }

    fn filter(selector: &str) -> Filter {
        Filter {
            resource: Resource::Pod,
            namespace: "ns".into(),
            selector: Selector::parse(selector).unwrap(),
        }
    }

    fn drain(receiver: &mut mpsc::Receiver<ApiResult<WatchEvent>>) -> Vec<WatchEventType> {
        let mut kinds = Vec::new();
        while let Ok(item) = receiver.try_recv() {
            kinds.push(item.unwrap().kind);
        }
        kinds
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        use WatchEventType::*;
        let mut hub = WatchHub::new(100, 10);
        let mut watch = hub.subscribe(filter("app=x"), 0);
        hub.publish(change(1, Added, json!({}), None));
        hub.publish(change(2, Modified, json!({"app": "x"}), Some(json!({}))));
        hub.publish(change(
            3,
            Modified,
            json!({"app": "x", "b": "1"}),
            Some(json!({"app": "x"})),
        ));
        hub.publish(change(4, Modified, json!({}), Some(json!({"app": "x"}))));
        hub.publish(change(5, Deleted, json!({}), Some(json!({}))));
        assert_eq!(drain(&mut watch), [Added, Modified, Deleted]);
    }

    #[test]
    fn left_selector_event_carries_previous_labels_at_new_version() {
        let mut hub = WatchHub::new(100, 10);
        let mut watch = hub.subscribe(filter("app=x"), 0);
        hub.publish(change(
            7,
            WatchEventType::Modified,
            json!({}),
            Some(json!({"app": "x"})),
        ));
        let event = watch.try_recv().unwrap().unwrap();
        assert_eq!(event.kind, WatchEventType::Deleted);
        assert_eq!(event.object["metadata"]["labels"]["app"], "x");
        assert_eq!(event.object["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn resume_replays_history_and_gone_past_it() {
        let mut hub = WatchHub::new(2, 10);
        for rv in 1..=4 {
            hub.publish(change(rv, WatchEventType::Added, json!({}), None));
        }
        // History holds 3 and 4: resuming after 2 works, after 1 is too old.
        let mut resumed = hub.subscribe(filter(""), 2);
        assert_eq!(drain(&mut resumed).len(), 2);
        let mut gone = hub.subscribe(filter(""), 1);
        let first = gone.try_recv().unwrap();
        assert_eq!(first.unwrap_err().kind, ApiErrorKind::Gone);
        assert!(matches!(
            gone.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }

    #[test]
    fn compaction_makes_old_versions_gone_but_not_the_latest() {
        let mut hub = WatchHub::new(100, 10);
        for rv in 1..=3 {
            hub.publish(change(rv, WatchEventType::Added, json!({}), None));
        }
        hub.compact();
        assert!(hub.subscribe(filter(""), 2).try_recv().unwrap().is_err());
        let mut current = hub.subscribe(filter(""), 3);
        assert!(
            current
                .try_recv()
                .is_err_and(|e| e == mpsc::error::TryRecvError::Empty)
        );
    }

    #[test]
    fn a_full_receiver_is_closed_not_waited_on() {
        let mut hub = WatchHub::new(100, 2);
        let mut slow = hub.subscribe(filter(""), 0);
        for rv in 1..=5 {
            hub.publish(change(rv, WatchEventType::Added, json!({}), None));
        }
        assert_eq!(hub.open_watches(), 0);
        assert_eq!(drain(&mut slow).len(), 2);
        assert!(matches!(
            slow.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }

    #[test]
    fn end_all_closes_streams() {
        let mut hub = WatchHub::new(100, 2);
        let mut watch = hub.subscribe(filter(""), 0);
        hub.end_all();
        assert!(matches!(
            watch.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }
}
