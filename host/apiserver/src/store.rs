//! The object store: objects by key, the cluster-wide resourceVersion counter, and the indexes
//! the garbage collector needs (uid -> object, owner uid -> dependents).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::meta;
use cubepod_kube::Resource;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectKey {
    pub(crate) resource: Resource,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ObjectKey {
    pub(crate) fn new(resource: Resource, namespace: &str, name: &str) -> Self {
        Self {
            resource,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.resource, self.namespace, self.name)
    }
}

/// namespace -> name -> object: lookups by `&str` without allocating.
type Objects = BTreeMap<String, BTreeMap<String, Arc<Value>>>;

pub(crate) struct Store {
    objects: BTreeMap<Resource, Objects>,
    by_uid: HashMap<String, ObjectKey>,
    dependents: HashMap<String, BTreeSet<ObjectKey>>,
    resource_version: u64,
}

impl Default for Store {
    /// An empty store is already at version 1, as etcd is: a list of nothing must still name
    /// a version to watch from, and "0" means "from any point" to a watch, which could miss
    /// a write made between the list and the watch.
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            resource_version: 1,
        }
    }
}

impl Store {
    /// The resourceVersion of the last write.
    pub(crate) fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// Takes the resourceVersion for a new write.
    pub(crate) fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    pub(crate) fn get(&self, key: &ObjectKey) -> Option<&Arc<Value>> {
        self.objects
            .get(&key.resource)?
            .get(&key.namespace)?
            .get(&key.name)
    }

    pub(crate) fn contains_uid(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// The objects whose ownerReferences name `owner_uid`.
    pub(crate) fn dependents_of(&self, owner_uid: &str) -> Vec<ObjectKey> {
        self.dependents
            .get(owner_uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The objects of a resource in a namespace (`""`: all namespaces), by namespace and name.
    pub(crate) fn scan<'a>(
        &'a self,
        resource: Resource,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        self.objects
            .get(&resource)
            .into_iter()
            .flat_map(|namespaces| namespaces.iter())
            .filter(move |(ns, _)| namespace.is_empty() || ns.as_str() == namespace)
            .flat_map(|(_, objects)| objects.values())
    }

    /// [`Self::scan`] from after `(namespace, name)` on, in the same order: where a page that
    /// ended there continues.
    pub(crate) fn scan_after<'a>(
        &'a self,
        resource: Resource,
        namespace: &'a str,
        after: (&'a str, &'a str),
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        use std::ops::Bound;
        let (after_ns, after_name) = after;
        self.objects
            .get(&resource)
            .into_iter()
            .flat_map(move |namespaces| {
                namespaces.range::<str, _>((Bound::Included(after_ns), Bound::Unbounded))
            })
            .filter(move |(ns, _)| namespace.is_empty() || ns.as_str() == namespace)
            .flat_map(move |(ns, objects)| {
                let from = if ns.as_str() == after_ns {
                    Bound::Excluded(after_name)
                } else {
                    Bound::Unbounded
                };
                objects
                    .range::<str, _>((from, Bound::Unbounded))
                    .map(|(_, object)| object)
            })
    }

    /// The namespaces that hold an object of any kind.
    pub(crate) fn namespaces(&self) -> BTreeSet<String> {
        self.objects
            .values()
            .flat_map(|namespaces| namespaces.keys().cloned())
            .collect()
    }

    pub(crate) fn count(&self, resource: Resource) -> usize {
        self.objects
            .get(&resource)
            .map_or(0, |namespaces| namespaces.values().map(BTreeMap::len).sum())
    }

    /// Stores `object` under `key`, returning what it replaced.
    pub(crate) fn put(&mut self, key: ObjectKey, object: Arc<Value>) -> Option<Arc<Value>> {
        self.index(&key, &object);
        let previous = self
            .objects
            .entry(key.resource)
            .or_default()
            .entry(key.namespace.clone())
            .or_default()
            .insert(key.name.clone(), object);
        if let Some(previous) = &previous {
            self.unindex(&key, previous, false);
        }
        previous
    }

    pub(crate) fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Value>> {
        let namespaces = self.objects.get_mut(&key.resource)?;
        let objects = namespaces.get_mut(&key.namespace)?;
        let removed = objects.remove(&key.name)?;
        if objects.is_empty() {
            namespaces.remove(&key.namespace);
        }
        self.unindex(key, &removed, true);
        Some(removed)
    }

    fn index(&mut self, key: &ObjectKey, object: &Value) {
        if let Some(uid) = meta::uid(object) {
            self.by_uid.insert(uid.to_owned(), key.clone());
        }
        for owner in meta::owner_uids(object) {
            self.dependents
                .entry(owner.to_owned())
                .or_default()
                .insert(key.clone());
        }
    }

    /// Drops the index entries of `old`; on a replace, those `current` still has are kept.
    fn unindex(&mut self, key: &ObjectKey, old: &Value, removed: bool) {
        let current = if removed {
            None
        } else {
            self.get(key).cloned()
        };
        let kept_owners: Vec<&str> = current.as_deref().map(meta::owner_uids).unwrap_or_default();
        if let Some(uid) = meta::uid(old) {
            let still_ours = current.as_deref().and_then(meta::uid) == Some(uid);
            if !still_ours && self.by_uid.get(uid) == Some(key) {
                self.by_uid.remove(uid);
            }
        }
        for owner in meta::owner_uids(old) {
            if kept_owners.contains(&owner) {
                continue;
            }
            if let Some(keys) = self.dependents.get_mut(owner) {
                keys.remove(key);
                if keys.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, owners: &[&str]) -> Arc<Value> {
        let refs: Vec<Value> = owners.iter().map(|o| json!({"uid": o})).collect();
        Arc::new(json!({"metadata": {"uid": uid, "ownerReferences": refs}}))
    }

    #[test]
    fn indexes_follow_puts_and_removes() {
        let mut store = Store::default();
        let key = ObjectKey::new(Resource::Pod, "ns", "a");
        store.put(key.clone(), object("u1", &["owner1"]));
        assert!(store.contains_uid("u1"));
        assert_eq!(store.dependents_of("owner1"), std::slice::from_ref(&key));

        // A patch that swaps owners moves the dependent index.
        store.put(key.clone(), object("u1", &["owner2"]));
        assert!(store.dependents_of("owner1").is_empty());
        assert_eq!(store.dependents_of("owner2"), std::slice::from_ref(&key));
        assert!(store.contains_uid("u1"));

        store.remove(&key);
        assert!(!store.contains_uid("u1"));
        assert!(store.dependents_of("owner2").is_empty());
        assert_eq!(store.count(Resource::Pod), 0);
    }

    #[test]
    fn scan_filters_by_namespace() {
        let mut store = Store::default();
        for (ns, name) in [("a", "x"), ("b", "y"), ("a", "z")] {
            store.put(
                ObjectKey::new(Resource::Secret, ns, name),
                Arc::new(json!({"metadata": {"name": name}})),
            );
        }
        let names = |ns| {
            store
                .scan(Resource::Secret, ns)
                .filter_map(|o| meta::name(o).map(str::to_owned))
                .collect::<Vec<_>>()
        };
        assert_eq!(names("a"), ["x", "z"]);
        assert_eq!(names(""), ["x", "z", "y"]);
        assert_eq!(store.scan(Resource::Pod, "").count(), 0);
    }

    #[test]
    fn resource_version_counts_up() {
        let mut store = Store::default();
        assert_eq!(store.resource_version(), 1);
        assert_eq!(store.next_resource_version(), 2);
        assert_eq!(store.next_resource_version(), 3);
        assert_eq!(store.resource_version(), 3);
    }
}
