//! The cache answers the boundary's delete rule: is the object a delete names held as the
//! call's Sandbox's managed child, another's, or not at all. No API read. And it takes each
//! of a policy's writes as the API answers it.

use super::cache::Cache;
use cubepod_kube::Resource;
use cubepod_policy_host::runtime::{ChildHeld, ChildLookup};

impl ChildLookup for Cache {
    fn child(&self, resource: Resource, namespace: &str, name: &str, sandbox: &str) -> ChildHeld {
        // One lookup for the common case, the policy deleting a child it observed; the scan
        // of every entry only for a name the sandbox does not hold.
        if self.holds(resource, namespace, name, sandbox) {
            return ChildHeld::Own;
        }
        let owners = self.child_owners(resource, namespace, name);
        if owners.is_empty() {
            ChildHeld::NotHeld
        } else {
            // Held for another sandbox: deleting it would take that sandbox's child.
            ChildHeld::Other
        }
    }

    fn holds(&self, resource: Resource, namespace: &str, name: &str, sandbox: &str) -> bool {
        self.holds_child(resource, namespace, name, sandbox)
    }

    fn owned_pvcs(&self, namespace: &str, sandbox: &str, uid: &str) -> Vec<String> {
        Cache::owned_pvcs(self, namespace, sandbox, uid)
    }

    fn written(&self, resource: Resource, object: &serde_json::Value) {
        self.apply_own(resource, object);
    }
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
            },
        })
    }

    #[test]
    fn the_cache_tells_own_children_from_others_and_from_nothing() {
        let cache = Cache::default();
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
        let held = |name: &str| cache.child(Resource::Secret, "ns", name, "a");
        assert_eq!(held("a-credentials"), ChildHeld::Own);
        assert_eq!(held("b-credentials"), ChildHeld::Other);
        assert_eq!(held("c-credentials"), ChildHeld::NotHeld);
        // The same name in another namespace or of another kind is not this child.
        assert_eq!(
            cache.child(Resource::Secret, "other", "a-credentials", "a"),
            ChildHeld::NotHeld
        );
        assert_eq!(
            cache.child(Resource::Pod, "ns", "a-credentials", "a"),
            ChildHeld::NotHeld
        );
        cache.apply(
            Resource::Secret,
            WatchEventType::Deleted,
            &secret("a-credentials", "a"),
        );
        assert_eq!(held("a-credentials"), ChildHeld::NotHeld);
    }
}
