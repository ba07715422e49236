//! The echo protocol: a write's answer goes into the cache as it comes, and the watch's event
//! of that same version, its echo, is then dropped (unread, where the client can: see
//! [`cubepod_kube::EchoFilter`]). The reconcile that wrote went on from the answer, so the echo
//! changes nothing and reconciles nothing of it; it wakes only what did not see the write (a
//! member's pool, its claim).
//!
//! The whole rule is here: the record of own writes awaiting their echoes ([`OwnWrite`]), the
//! record made as an own write's answer is applied (`Inner::apply_own`), the rule that takes
//! an event as an echo or forgets the record (`Inner::take_echo`, asked by every applied event
//! and by the watch before it decodes one), and the filter the watch asks ([`Echoes`]). The
//! callers are the writer and a policy call's lookup (through `update.rs`'s `apply_own*`) and
//! the reflector (which hands [`Echoes`] to the watch).

use std::sync::Arc;

use serde_json::Value;

use super::{CacheWriter, Inner, child_owner, is_older};
use crate::controller::queue::{WorkKey, WorkQueue};
use cubepod_kube::{EchoFilter, Resource};
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::model::meta::MetaView;
use cubepod_policy_host::model::sandbox::SandboxObject;

/// An own write awaiting its echo.
pub(super) struct OwnWrite {
    version: String,
    /// What its echo wakes: a sandbox's pool and claimer, which did not see the write.
    wakes: Vec<WorkKey>,
    /// A child's sandbox, where the cache keeps what it holds of the child.
    owner: Option<ObjectRef>,
}

impl Inner {
    /// When an event of `version` (not a deletion) is the echo of an own write: forgets the
    /// write and returns the keys the echo wakes. Any other event of the object forgets an
    /// older write: its echo, if it comes, is no longer what the cache holds.
    pub(super) fn take_echo(
        &mut self,
        object: &(Resource, ObjectRef),
        version: &str,
        deleted: bool,
    ) -> Option<Vec<WorkKey>> {
        let written = self.own_writes.get(object)?;
        if !deleted && written.version == version {
            let written = self.own_writes.remove(object)?;
            // Only while the cache still holds what the write answered: a relist whose list
            // predates the write may have dropped it since, and then the echo brings it back.
            let (resource, key) = object;
            let held = self.held(*resource, key, written.owner.as_ref()) == Some(version);
            return held.then_some(written.wakes);
        }
        if deleted || !is_older(version, &written.version) {
            self.own_writes.remove(object);
        }
        None
    }

    /// Applies the answer of an own write, whose metadata is `meta`, and records its version
    /// for the echo to be taken. `known`: the Sandbox's record, already made from the answer;
    /// `went_on`: a key besides the object's own that already has what was written.
    pub(super) fn apply_own(
        &mut self,
        resource: Resource,
        meta: &MetaView<'_>,
        object: &Value,
        known: Option<SandboxObject>,
        went_on: Option<&WorkKey>,
    ) {
        let key = ObjectRef::new(meta.namespace, meta.name);
        // Where the cache keeps it (a child under its sandbox), and whether its echo wakes
        // anything: a Sandbox's pool and claimer (a member's status) did not see the write;
        // the pass that wrote a pool or a child (its sandbox's) went on from the answer.
        let (owner, wakes_on_echo) = match resource {
            Resource::Sandbox => (None, true),
            Resource::PodWarmPool => (None, false),
            Resource::Pod
            | Resource::PersistentVolumeClaim
            | Resource::Secret
            | Resource::NetworkPolicy
            | Resource::Service => (child_owner(meta), false),
            // Not held by the cache (`Inner::apply` keeps nothing of them): none is a child.
            Resource::Event | Resource::Lease | Resource::PolicyRollout | Resource::ConfigMap => {
                (None, false)
            }
        };
        // The watch may have shown this version first: then there is no echo to wait for,
        // and an entry would stay until the object next changed (for most children, never).
        let shown = !meta.resource_version.is_empty()
            && self.held(resource, &key, owner.as_ref()) == Some(meta.resource_version);
        let mut wakes = self.apply(resource, false, key.clone(), meta, object, known);
        if meta.resource_version.is_empty() || shown {
            return;
        }
        if wakes_on_echo {
            wakes.retain(|k| *k != WorkKey::Sandbox(key.clone()) && Some(k) != went_on);
        } else {
            wakes.clear();
        }
        let written = OwnWrite {
            version: meta.resource_version.to_string(),
            wakes,
            owner,
        };
        self.own_writes.insert((resource, key), written);
    }
}

/// The cache's own writes, for a watch to drop their echoes unread: an echo still wakes the
/// keys it would have woken applied.
pub(crate) struct Echoes {
    pub(crate) resource: Resource,
    pub(crate) cache: CacheWriter,
    pub(crate) queue: Arc<WorkQueue>,
}

impl EchoFilter for Echoes {
    fn take_echo(&self, namespace: &str, name: &str, resource_version: &str) -> bool {
        let key = ObjectRef::new(namespace, name);
        let Some(wakes) = self.cache.take_echo(self.resource, key, resource_version) else {
            return false;
        };
        for key in wakes {
            self.queue.add_woken(key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::pod;
    use super::*;
    use cubepod_kube::WatchEventType;
    use cubepod_policy_host::model::sandbox;

    #[test]
    fn the_echo_of_an_own_write_reconciles_nothing_but_its_pool_and_later_changes_do() {
        let cache = CacheWriter::default();
        let owner = WorkKey::Sandbox(ObjectRef::new("ns", "a"));
        // The policy's Pod, as the create answered it; then the watch's echo of it.
        cache.apply_own(Resource::Pod, &pod("4", false));
        assert_eq!(
            cache.apply(Resource::Pod, WatchEventType::Added, &pod("4", false)),
            []
        );
        // The kubelet's change is not an echo.
        assert_eq!(
            cache.apply(Resource::Pod, WatchEventType::Modified, &pod("5", true)),
            [owner]
        );
        // A pool member's own status: its pool still hears of the echo.
        let member = json!({"metadata": {"name": "m", "namespace": "ns", "resourceVersion": "7",
                                         "labels": {sandbox::POOL_LABEL: "p"}},
                            "spec": {"image": "i"}});
        cache.apply_own(Resource::Sandbox, &member);
        assert_eq!(
            cache.apply(Resource::Sandbox, WatchEventType::Modified, &member),
            [WorkKey::Pool(ObjectRef::new("ns", "p"))]
        );
        // An echo seen once is not dropped twice; a write not the sandbox's own (apply) is
        // not dropped at all.
        let mut again = cache.apply(Resource::Sandbox, WatchEventType::Modified, &member);
        again.sort();
        assert_eq!(again.len(), 2);
    }

    #[test]
    fn an_echo_taken_before_it_is_read_wakes_what_it_would_have_woken() {
        let cache = CacheWriter::default();
        let key = |name: &str| ObjectRef::new("ns", name);
        cache.apply_own(Resource::Pod, &pod("4", false));
        // Another version is no echo; the echo is taken once.
        assert_eq!(cache.take_echo(Resource::Pod, key("a"), "3"), None);
        assert_eq!(cache.take_echo(Resource::Pod, key("a"), "4"), Some(vec![]));
        assert_eq!(cache.take_echo(Resource::Pod, key("a"), "4"), None);
        let member = json!({"metadata": {"name": "m", "namespace": "ns", "resourceVersion": "7",
                                         "labels": {sandbox::POOL_LABEL: "p"}},
                            "spec": {"image": "i"}});
        cache.apply_own(Resource::Sandbox, &member);
        assert_eq!(
            cache.take_echo(Resource::Sandbox, key("m"), "7"),
            Some(vec![WorkKey::Pool(key("p"))])
        );
    }

    #[test]
    fn an_echo_of_a_write_a_relist_dropped_brings_it_back() {
        let cache = CacheWriter::default();
        let owner = ObjectRef::new("ns", "a");
        cache.apply_own(Resource::Pod, &pod("4", false));
        // A relist whose list predates the create: the Pod is dropped.
        let keys = cache.replace(Resource::Pod, "ns", &[]);
        assert_eq!(keys, [WorkKey::Sandbox(owner.clone())]);
        assert!(cache.observed(&owner).pod.is_none());
        // The watch from the list's version then shows the create: not an echo any more.
        assert_eq!(
            cache.take_echo(Resource::Pod, ObjectRef::new("ns", "a"), "4"),
            None
        );
        assert_eq!(
            cache.apply(Resource::Pod, WatchEventType::Added, &pod("4", false)),
            [WorkKey::Sandbox(owner.clone())]
        );
        assert!(cache.observed(&owner).pod.is_some());
    }

    #[test]
    fn an_own_write_the_watch_showed_first_waits_for_no_echo() {
        let cache = CacheWriter::default();
        let owner = WorkKey::Sandbox(ObjectRef::new("ns", "a"));
        // The watch was faster than the create's answer.
        assert_eq!(
            cache.apply(Resource::Pod, WatchEventType::Added, &pod("4", false)),
            [owner]
        );
        cache.apply_own(Resource::Pod, &pod("4", false));
        // Nothing is left waiting for an echo that has come: a watch that resumes and
        // shows this version again is heard.
        assert_eq!(
            cache.take_echo(Resource::Pod, ObjectRef::new("ns", "a"), "4"),
            None
        );
        assert!(cache.read().own_writes.is_empty());
    }
}
