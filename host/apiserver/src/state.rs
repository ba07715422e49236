//! The cluster's state behind one lock, and the three ways a write commits: add, update,
//! remove. Each takes the next resourceVersion and publishes exactly one change, so a watch
//! resumed from any version misses nothing.

use std::sync::Arc;

use serde_json::Value;

use super::kubelet::Kubelet;
use super::meta;
use super::namespaces::Namespaces;
use super::store::{ObjectKey, Store};
use super::watch::{Change, WatchHub};
use cubepod_kube::WatchEventType;

pub(crate) struct State {
    pub(crate) store: Store,
    pub(crate) hub: WatchHub,
    pub(crate) kubelet: Kubelet,
    pub(crate) namespaces: Namespaces,
}

impl State {
    pub(crate) fn new(hub: WatchHub, kubelet: Kubelet, namespaces: Namespaces) -> Self {
        Self {
            store: Store::default(),
            hub,
            kubelet,
            namespaces,
        }
    }

    pub(crate) fn add(&mut self, key: ObjectKey, object: Value) -> Arc<Value> {
        self.commit(key, object, None, WatchEventType::Added)
    }

    pub(crate) fn update(
        &mut self,
        key: ObjectKey,
        object: Value,
        previous: Arc<Value>,
    ) -> Arc<Value> {
        self.commit(key, object, Some(previous), WatchEventType::Modified)
    }

    /// Removes the object for good, `last` being its final state; then collects the objects
    /// it owned.
    pub(crate) fn remove(&mut self, key: &ObjectKey, mut last: Value) -> Arc<Value> {
        let version = self.store.next_resource_version();
        meta::set(&mut last, "resourceVersion", version.to_string());
        let last = Arc::new(last);
        let previous = self.store.remove(key);
        self.hub.publish(Change {
            resource_version: version,
            resource: key.resource,
            namespace: key.namespace.clone(),
            kind: WatchEventType::Deleted,
            object: Arc::clone(&last),
            previous,
        });
        self.kubelet.forget(key.resource, &last);
        if let Some(uid) = meta::uid(&last) {
            self.collect_dependents(uid);
        }
        last
    }

    fn commit(
        &mut self,
        key: ObjectKey,
        mut object: Value,
        previous: Option<Arc<Value>>,
        kind: WatchEventType,
    ) -> Arc<Value> {
        let version = self.store.next_resource_version();
        meta::set(&mut object, "resourceVersion", version.to_string());
        let object = Arc::new(object);
        let change = Change {
            resource_version: version,
            resource: key.resource,
            namespace: key.namespace.clone(),
            kind,
            object: Arc::clone(&object),
            previous,
        };
        self.store.put(key, Arc::clone(&object));
        self.hub.publish(change);
        object
    }
}
