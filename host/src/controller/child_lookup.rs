//! The cache answers the boundary's delete rule: is the object a delete names held as the
//! call's Sandbox's managed child, another's, or not at all. No API read. And, through its
//! writer, it takes each of a policy's writes as the API answers it.

use super::cache::{Cache, CacheWriter};
use cubepod_kube::Resource;
use cubepod_policy_host::containment::{self, NAME_CONFLICT};
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::model::names::SPEC_HASH_ANNOTATION;
use cubepod_policy_host::runtime::bindings::{Condition, ConditionStatus};
use cubepod_policy_host::runtime::{ChildHeld, ChildLookup};

/// A condition's message at most this long: the conflicts listed, then cut.
const CONDITION_MESSAGE_BYTES: usize = 1024;

/// The Sandbox's `NameConflict` condition as this pass found its children's names: `True`
/// naming each object that bears one and is not its own (never adopted, mounted, reported or
/// deleted), gone once none is; whatever the policy wrote of that type is replaced.
pub(crate) fn name_conflict_condition(
    conditions: &mut Vec<Condition>,
    conflicts: &[String],
    now: i64,
) {
    let before = conditions.iter().find(|c| c.kind == NAME_CONFLICT).cloned();
    conditions.retain(|c| c.kind != NAME_CONFLICT);
    if conflicts.is_empty() {
        return;
    }
    let message = containment::clip(&conflicts.join("; "), CONDITION_MESSAGE_BYTES);
    let since = before
        .filter(|c| c.status == ConditionStatus::True)
        .map_or(now, |c| c.last_transition_time);
    conditions.push(Condition {
        kind: NAME_CONFLICT.to_string(),
        status: ConditionStatus::True,
        reason: "NotOwned".to_string(),
        message,
        last_transition_time: since,
    });
}

impl Cache {
    /// What the object `name` of `resource` in `namespace` is to the Sandbox `sandbox` of
    /// `uid`, as the cache holds it ([`ChildLookup::child`]).
    pub(crate) fn child_held(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> ChildHeld {
        // One lookup for the common case, the policy deleting a child it observed; the scan
        // of every entry only for a name the sandbox does not hold.
        if self.holds_child(resource, namespace, name, sandbox, uid) {
            return ChildHeld::Own;
        }
        let owners = self.child_owners(resource, namespace, name);
        if owners.iter().any(|owner| owner == sandbox) {
            // Labelled as this sandbox's, but its controller reference is not to its uid.
            ChildHeld::Stranger
        } else if owners.is_empty() {
            ChildHeld::NotHeld
        } else {
            // Held for another sandbox: deleting it would take that sandbox's child.
            ChildHeld::Other
        }
    }
}

impl ChildLookup for CacheWriter {
    fn child(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> ChildHeld {
        self.child_held(resource, namespace, name, sandbox, uid)
    }

    fn holds(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> bool {
        self.holds_child(resource, namespace, name, sandbox, uid)
    }

    fn owned_pvcs(&self, namespace: &str, sandbox: &str, uid: &str) -> Vec<String> {
        Cache::owned_pvcs(self, namespace, sandbox, uid)
    }

    fn written(&self, resource: Resource, object: &serde_json::Value) {
        self.apply_own(resource, object);
    }

    fn room(
        &self,
        resource: Resource,
        namespace: &str,
        sandbox: &str,
        name: &str,
        manifest: &str,
    ) -> Result<(), String> {
        // An applied child's spec digest is held with it (a NetworkPolicy's, a Service's).
        let spec_hash = if resource.child().is_some_and(|child| child.applied) {
            spec_hash_bytes(manifest)
        } else {
            0
        };
        let sandbox = ObjectRef::new(namespace, sandbox);
        self.room_for_child(&sandbox, resource, name, spec_hash)
            .map_err(|past| past.words())
    }
}

/// The length of a manifest's `cubepod.io/spec-hash` annotation (what the cache keeps of a
/// NetworkPolicy or Service besides its name), read past everything else.
fn spec_hash_bytes(manifest: &str) -> u64 {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        metadata: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        annotations: Option<std::collections::BTreeMap<&'a str, std::borrow::Cow<'a, str>>>,
    }
    serde_json::from_str::<Head<'_>>(manifest)
        .ok()
        .and_then(|h| h.metadata?.annotations)
        .and_then(|a| a.get(SPEC_HASH_ANNOTATION).map(|v| v.len() as u64))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use cubepod_kube::WatchEventType;

    fn secret(name: &str, sandbox: &str) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "resourceVersion": "1",
                "labels": {
                    "app.kubernetes.io/managed-by": "cubepod-controller",
                    "cubepod.io/sandbox": sandbox,
                },
                "ownerReferences": [{
                    "apiVersion": "cubepod.io/v1alpha1",
                    "kind": "Sandbox",
                    "name": sandbox,
                    "uid": format!("uid-{sandbox}"),
                    "controller": true,
                }],
            },
        })
    }

    #[test]
    fn the_cache_tells_own_children_from_others_and_from_nothing() {
        let cache = CacheWriter::default();
        cache.apply(
            Resource::Secret,
            WatchEventType::Added,
            &secret("a-credentials", "a"),
        );
        cache.apply(
            Resource::Secret,
            WatchEventType::Added,
            &secret("b-credentials", "b"),
        );
        let held = |name: &str| cache.child(Resource::Secret, "ns", name, "a", "uid-a");
        assert_eq!(held("a-credentials"), ChildHeld::Own);
        assert_eq!(held("b-credentials"), ChildHeld::Other);
        assert_eq!(held("c-credentials"), ChildHeld::NotHeld);
        // The same name in another namespace or of another kind is not this child.
        assert_eq!(
            cache.child(Resource::Secret, "other", "a-credentials", "a", "uid-a"),
            ChildHeld::NotHeld
        );
        assert_eq!(
            cache.child(Resource::Pod, "ns", "a-credentials", "a", "uid-a"),
            ChildHeld::NotHeld
        );
        // Another Sandbox `a` (another uid), which a recreated Sandbox is: not its child.
        assert_eq!(
            cache.child(Resource::Secret, "ns", "a-credentials", "a", "uid-a2"),
            ChildHeld::Stranger
        );
        // Labelled as `a`'s without the controller reference: a stranger's, never `a`'s.
        let mut planted = secret("a-token", "a");
        planted["metadata"]
            .as_object_mut()
            .map(|m| m.remove("ownerReferences"));
        cache.apply(Resource::Secret, WatchEventType::Added, &planted);
        assert_eq!(held("a-token"), ChildHeld::Stranger);
        assert!(!cache.holds(Resource::Secret, "ns", "a-token", "a", "uid-a"));
        cache.apply(
            Resource::Secret,
            WatchEventType::Deleted,
            &secret("a-credentials", "a"),
        );
        assert_eq!(held("a-credentials"), ChildHeld::NotHeld);
    }
}
