//! The watch cache: what the reflectors last saw of our resources, kept compact (the contract's
//! records, not whole objects), plus what the controller itself just wrote, so that it does not
//! write twice before the watch catches up.

use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashSet, HashSetExt};
use serde_json::Value;

use super::membership::{Claimant, Membership, RecordDelta};
use super::queue::WorkKey;
use super::small_map::SmallMap;
use cubepod_kube::{Resource, WatchEventType};
use cubepod_policy_host::model::meta::MetaView;
use cubepod_policy_host::model::sandbox::SandboxObject;
use cubepod_policy_host::model::{ObjectRef, Unreadable, children, pool, sandbox};
use cubepod_policy_host::runtime::bindings::{
    ConditionStatus, ObservedChildren, ObservedObject, ObservedPod, PoolMember, ReapCandidate,
    Sandbox, SandboxPhase, WarmPool,
};

/// A WarmPool as the cache keeps it.
#[derive(Debug, Clone)]
pub struct PoolObject {
    /// The pool, parsed.
    pub pool: WarmPool,
    /// Its `metadata.resourceVersion`.
    pub resource_version: String,
}

/// A PVC as the cache keeps it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct HeldPvc {
    deleting: bool,
    /// The uid of its Sandbox's controller reference, when it is managed and the reference
    /// names the Sandbox of its label ([`children::controller_uid`]): what a fork may clone.
    owner_uid: Option<Box<str>>,
}

#[derive(Debug, Default, Clone)]
struct Children {
    pvcs: SmallMap<HeldPvc>,
    pod: Option<ObservedPod>,
    secret: bool,
    network_policy: Option<ObservedObject>,
    service: Option<ObservedObject>,
    /// The resourceVersion last applied per child (`pods/a`), so that a create's response
    /// applied after the watch already showed a newer state (a Pod turned Ready) cannot undo it.
    versions: SmallMap<String>,
}

impl Children {
    fn is_empty(&self) -> bool {
        self.pvcs.is_empty()
            && self.pod.is_none()
            && !self.secret
            && self.network_policy.is_none()
            && self.service.is_none()
    }

    /// The NetworkPolicy or Service slot (`None` for other kinds).
    fn object_slot(&mut self, resource: Resource) -> Option<&mut Option<ObservedObject>> {
        match resource {
            Resource::NetworkPolicy => Some(&mut self.network_policy),
            Resource::Service => Some(&mut self.service),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Inner {
    /// Boxed: the table then holds a pointer per slot, not a whole record per slot.
    sandboxes: HashMap<ObjectRef, Box<SandboxObject>>,
    /// Sandboxes that could not be read, with why: reported in their status, not reconciled.
    unreadable: HashMap<ObjectRef, Unreadable>,
    pools: HashMap<ObjectRef, PoolObject>,
    unreadable_pools: HashMap<ObjectRef, Unreadable>,
    children: HashMap<ObjectRef, Children>,
    /// The version each object was deleted at, so that a late answer to an earlier write (a
    /// create's response, a finalizer patch) cannot bring a deleted object back. Pruned after
    /// `TOMBSTONE_TTL`, far longer than any request may take.
    tombstones: HashMap<(Resource, ObjectRef), (String, Instant)>,
    /// The version of each object the controller's own reconcile of its sandbox last wrote
    /// (finalizer, status, the policy's children). That reconcile went on from the write's
    /// answer, so the watch's echo of the same version changes nothing and reconciles nothing;
    /// an entry goes with its echo or with any newer version.
    own_writes: HashMap<(Resource, ObjectRef), OwnWrite>,
    /// The pools' records of their members: which Sandboxes are members (`sandbox.pool` is set
    /// only on those).
    membership: Membership,
}

/// An own write awaiting its echo.
struct OwnWrite {
    version: String,
    /// What its echo wakes: a sandbox's pool and claimer, which did not see the write.
    wakes: Vec<WorkKey>,
    /// A child's sandbox, where the cache keeps what it holds of the child.
    owner: Option<ObjectRef>,
}

/// How long a deletion is remembered: well past the client's request timeout, after which no
/// answer to a write made before the deletion can still arrive.
pub(crate) const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// A relist in progress (see [`Cache::begin_relist`]): which objects its pages showed, as
/// (owning sandbox, name) for children and ("", name) for our own resources.
pub(crate) struct Relist {
    resource: Resource,
    namespace: String,
    seen: HashSet<(String, String)>,
}

/// Counts for the gauges.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Sandboxes that are not paused.
    pub active: usize,
    pub(crate) paused: usize,
    pub(crate) pools_ready: Vec<(ObjectRef, u32)>,
}

/// What the reflectors have seen of the cluster: the objects each reconcile reads.
#[derive(Default)]
pub struct Cache {
    inner: RwLock<Inner>,
}

/// resourceVersions are opaque to clients, but in practice numbers: compare them when they
/// are, so that a late watch event does not undo a newer write the controller already applied.
fn is_older(incoming: &str, cached: &str) -> bool {
    match (incoming.parse::<u64>(), cached.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

/// True unless both are numbers and `incoming` is not past `deleted_at`: an object re-created
/// under the same name comes back, an older answer about the deleted one does not.
/// An answer without a version (a child read back from AlreadyExists) is not newer: the watch
/// shows the object again if it really exists.
fn is_newer(incoming: &str, deleted_at: &str) -> bool {
    match (incoming.parse::<u64>(), deleted_at.parse::<u64>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => !incoming.is_empty(),
    }
}

/// The Sandbox a child belongs to, by its label: the entry the cache keeps it under.
fn child_owner(meta: &MetaView<'_>) -> Option<ObjectRef> {
    let owner = meta.label(children::SANDBOX_LABEL)?;
    Some(ObjectRef::new(meta.namespace, owner))
}

/// Where a sandbox's entry keeps a child's version: `pods/a`, in parts, so that a lookup
/// does not allocate it (the map joins them when it inserts a new key).
fn version_key_parts(resource: Resource, name: &str) -> [&str; 3] {
    [resource.plural(), "/", name]
}

impl Inner {
    /// The Sandboxes `pool`'s record confirms as its members, in name order.
    fn members<'a>(&'a self, pool: &'a ObjectRef) -> impl Iterator<Item = &'a SandboxObject> {
        self.membership
            .members(pool)
            .filter_map(|member| self.sandboxes.get(member).map(|s| &**s))
    }

    /// When an event of `version` (not a deletion) is the echo of an own write: forgets the
    /// write and returns the keys the echo wakes. Any other event of the object forgets an
    /// older write: its echo, if it comes, is no longer what the cache holds.
    fn take_echo(
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

    /// The version the cache holds of an object (a child's under its sandbox `owner`).
    fn held(&self, resource: Resource, key: &ObjectRef, owner: Option<&ObjectRef>) -> Option<&str> {
        match resource {
            Resource::Sandbox => self.sandboxes.get(key).map(|s| s.resource_version.as_str()),
            Resource::PodWarmPool => self.pools.get(key).map(|p| p.resource_version.as_str()),
            Resource::Event | Resource::Lease => None,
            _ => self
                .children
                .get(owner?)?
                .versions
                .get_joined(&version_key_parts(resource, &key.name))
                .map(String::as_str),
        }
    }

    /// One watch event (or a write's answer) of the object `key`, whose metadata is `meta`:
    /// see [`Cache::apply`].
    fn apply(
        &mut self,
        resource: Resource,
        deleted: bool,
        key: ObjectRef,
        meta: &MetaView<'_>,
        object: &Value,
        known: Option<SandboxObject>,
    ) -> Vec<WorkKey> {
        let tombstone = (resource, key);
        // The echo of a write this object's own reconcile made and went on from: the record
        // already holds it.
        if let Some(keys) = self.take_echo(&tombstone, meta.resource_version, deleted) {
            return keys;
        }
        if deleted {
            self.tombstones.insert(
                tombstone.clone(),
                (meta.resource_version.to_string(), Instant::now()),
            );
        } else if let Some((gone_at, _)) = self.tombstones.get(&tombstone) {
            if !is_newer(meta.resource_version, gone_at) {
                return Vec::new();
            }
            self.tombstones.remove(&tombstone);
        }
        let (_, key) = tombstone;
        self.apply_kind(resource, key, meta, deleted, object, known)
    }

    fn apply_kind(
        &mut self,
        resource: Resource,
        key: ObjectRef,
        meta: &MetaView<'_>,
        deleted: bool,
        object: &Value,
        known: Option<SandboxObject>,
    ) -> Vec<WorkKey> {
        match resource {
            Resource::Sandbox => self.apply_sandbox(key, meta, deleted, object, known),
            Resource::PodWarmPool => self.apply_pool(key, meta, deleted, object),
            Resource::Pod
            | Resource::PersistentVolumeClaim
            | Resource::Secret
            | Resource::NetworkPolicy
            | Resource::Service => self.apply_child(resource, meta, deleted, object),
            Resource::Event | Resource::Lease | Resource::PolicyRollout | Resource::ConfigMap => {
                Vec::new()
            }
        }
    }

    /// A Sandbox: its record (or why it cannot be read), and the keys it touches: itself, its
    /// pool, the sandbox that claimed it. `known`: the record, already made (an own write's,
    /// whose answer is its metadata alone), so `object` is not read for it.
    fn apply_sandbox(
        &mut self,
        key: ObjectRef,
        meta: &MetaView<'_>,
        deleted: bool,
        object: &Value,
        known: Option<SandboxObject>,
    ) -> Vec<WorkKey> {
        let mut keys = vec![WorkKey::Sandbox(key.clone())];
        if let Some(pool) = meta.label(sandbox::POOL_LABEL) {
            keys.push(WorkKey::Pool(ObjectRef::new(meta.namespace, pool)));
        }
        if let Some(claim) = meta.label(sandbox::CLAIMED_BY_LABEL) {
            keys.push(WorkKey::Sandbox(ObjectRef::new(meta.namespace, claim)));
        }
        if deleted {
            self.drop_sandbox(&key);
            self.unreadable.remove(&key);
            return keys;
        }
        if self
            .sandboxes
            .get(&key)
            .is_some_and(|c| is_older(meta.resource_version, &c.resource_version))
        {
            return Vec::new();
        }
        match known.map_or_else(|| sandbox::from_json(object), Ok) {
            Ok(read) => {
                self.unreadable.remove(&key);
                self.put_sandbox(key, read);
            }
            Err(error) => {
                self.drop_sandbox(&key);
                self.unreadable.insert(key, Unreadable::new(error, object));
            }
        }
        keys
    }

    /// Holds `read` as the Sandbox `key`, a member of the pool its label names only when that
    /// pool's record confirms it.
    fn put_sandbox(&mut self, key: ObjectRef, mut read: SandboxObject) {
        if let Some(pool) = self
            .sandboxes
            .get(&key)
            .and_then(|s| s.sandbox.pool.clone())
        {
            let pool = ObjectRef::new(&key.namespace, &pool);
            self.membership.index(&pool, &key.name, false);
        }
        read.sandbox.pool = self.confirmed_pool(&read);
        if let Some(pool) = &read.sandbox.pool {
            let pool = ObjectRef::new(&key.namespace, pool);
            self.membership.index(&pool, &key.name, true);
        }
        self.sandboxes.insert(key, Box::new(read));
    }

    fn drop_sandbox(&mut self, key: &ObjectRef) {
        if let Some(label) = self
            .sandboxes
            .remove(key)
            .and_then(|old| old.pool_label.clone())
        {
            self.membership
                .gone(&ObjectRef::new(&key.namespace, &label), &key.name);
        }
    }

    /// The pool whose record confirms `s` as its member, if one does.
    fn confirmed_pool(&self, s: &SandboxObject) -> Option<String> {
        let label = s.pool_label.as_deref()?;
        let claimant = Claimant {
            name: &s.sandbox.name,
            uid: &s.sandbox.uid,
            label: Some(label),
            controller_uid: s.controller_uid.as_deref(),
        };
        let pool = ObjectRef::new(&s.sandbox.namespace, label);
        self.membership
            .confirms(&pool, &claimant)
            .then(|| label.to_string())
    }

    /// Decides again whether the Sandbox `key` is its pool's member.
    fn resettle(&mut self, key: &ObjectRef) {
        let Some(s) = self.sandboxes.get(key) else {
            return;
        };
        let confirmed = self.confirmed_pool(s);
        if let Some(label) = &s.pool_label {
            let pool = ObjectRef::new(&key.namespace, label);
            self.membership.index(&pool, &key.name, confirmed.is_some());
        }
        if let Some(s) = self.sandboxes.get_mut(key) {
            s.sandbox.pool = confirmed;
        }
    }

    /// The pool `key` as it now is (`None`: gone), and what its record makes of the
    /// Sandboxes it names (all those labelled for it, for a pool whose status has no record).
    fn settle_pool(
        &mut self,
        key: &ObjectRef,
        now: Option<(String, Option<BTreeMap<String, String>>)>,
    ) {
        let mut names = self.membership.set_pool(key, now);
        if self.membership.unrecorded(key) {
            names.extend(
                self.sandboxes
                    .values()
                    .filter(|s| {
                        s.sandbox.namespace == key.namespace
                            && s.pool_label.as_deref() == Some(key.name.as_str())
                    })
                    .map(|s| s.sandbox.name.clone()),
            );
        }
        for name in names {
            self.resettle(&ObjectRef::new(&key.namespace, &name));
        }
    }

    /// A PodWarmPool: its record, or why it cannot be read.
    fn apply_pool(
        &mut self,
        key: ObjectRef,
        meta: &MetaView<'_>,
        deleted: bool,
        object: &Value,
    ) -> Vec<WorkKey> {
        if deleted {
            self.pools.remove(&key);
            self.unreadable_pools.remove(&key);
            self.settle_pool(&key, None);
        } else if !self
            .pools
            .get(&key)
            .is_some_and(|c| is_older(meta.resource_version, &c.resource_version))
        {
            match pool::from_json(object) {
                Ok(read) => {
                    self.unreadable_pools.remove(&key);
                    self.settle_pool(&key, Some((read.uid.clone(), pool::member_uids(object))));
                    self.pools.insert(
                        key.clone(),
                        PoolObject {
                            pool: read,
                            resource_version: meta.resource_version.to_string(),
                        },
                    );
                }
                Err(error) => {
                    self.pools.remove(&key);
                    self.settle_pool(&key, None);
                    self.unreadable_pools
                        .insert(key.clone(), Unreadable::new(error, object));
                }
            }
        }
        vec![WorkKey::Pool(key)]
    }

    /// A Pod, PVC, Secret, NetworkPolicy or Service: what its Sandbox observes of it. Only a child labelled with its
    /// Sandbox counts; the key is that Sandbox's.
    fn apply_child(
        &mut self,
        resource: Resource,
        meta: &MetaView<'_>,
        deleted: bool,
        object: &Value,
    ) -> Vec<WorkKey> {
        let Some(owner) = child_owner(meta) else {
            return Vec::new();
        };
        let entry = self.children.entry(owner.clone()).or_default();
        let child = version_key_parts(resource, meta.name);
        if !deleted
            && entry.versions.get_joined(&child).is_some_and(|seen| {
                is_older(meta.resource_version, seen)
                    // A child without a version (the manifest of a create that met
                    // AlreadyExists) only says that it exists: it must not replace what the
                    // watch showed of it (a Pod turned Ready).
                    || meta.resource_version.is_empty()
            })
        {
            return Vec::new();
        }
        if deleted {
            entry.versions.remove_joined(&child);
        } else {
            entry
                .versions
                .insert_joined(&child, meta.resource_version.to_string());
        }
        match resource {
            Resource::Pod if deleted => entry.pod = None,
            Resource::Pod => entry.pod = Some(children::pod(object)),
            Resource::PersistentVolumeClaim if deleted => {
                entry.pvcs.remove(meta.name);
            }
            Resource::PersistentVolumeClaim => {
                let held = HeldPvc {
                    deleting: meta.deleting,
                    owner_uid: children::controller_uid(object).map(Box::from),
                };
                entry.pvcs.insert(meta.name.to_string(), held);
            }
            Resource::NetworkPolicy | Resource::Service => {
                if let Some(slot) = entry.object_slot(resource) {
                    *slot = (!deleted).then(|| children::object(object));
                }
            }
            _ => entry.secret = !deleted,
        }
        if entry.is_empty() {
            self.children.remove(&owner);
        }
        vec![WorkKey::Sandbox(owner)]
    }
}

impl Cache {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one watch event (or a write's result) and returns the keys to reconcile. A
    /// deletion is remembered (a tombstone), so that a late answer about the deleted object
    /// cannot bring it back.
    pub fn apply(&self, resource: Resource, kind: WatchEventType, object: &Value) -> Vec<WorkKey> {
        let meta = MetaView::of(object);
        let key = ObjectRef::new(meta.namespace, meta.name);
        self.write().apply(
            resource,
            kind == WatchEventType::Deleted,
            key,
            &meta,
            object,
            None,
        )
    }

    /// [`Self::apply`]'s check for an echo, on an event not yet decoded (see
    /// [`cubepod_kube::EchoFilter`]): when it is the echo of an own write, the keys it wakes.
    pub(crate) fn take_echo(
        &self,
        resource: Resource,
        key: ObjectRef,
        version: &str,
    ) -> Option<Vec<WorkKey>> {
        self.write().take_echo(&(resource, key), version, false)
    }

    /// Applies what the reconcile of `object`'s sandbox (or pool) itself wrote, and remembers
    /// its version: the watch's echo of it then queues no reconcile of that sandbox, which
    /// already went on from this answer. (A new sandbox's finalizer, children and status
    /// echoed back had cost it two more reconciles that found nothing to do.)
    pub(crate) fn apply_own(&self, resource: Resource, object: &Value) {
        self.apply_own_read(resource, object, None, None);
    }

    /// Applies the answer of a claim's adoption of a pool member: the claim goes on from it
    /// (it is reconciled again at once), so the echo wakes only the member's pool, which
    /// refills.
    pub(crate) fn apply_adoption(&self, answer: &Value, claim: &ObjectRef) {
        let claim = WorkKey::Sandbox(claim.clone());
        self.apply_own_read(Resource::Sandbox, answer, None, Some(&claim));
    }

    /// [`Self::apply_own`] of a Sandbox whose write was answered with its metadata alone:
    /// `read` is the record the write left (`sandbox::after_own_write`).
    pub(crate) fn apply_own_sandbox(&self, answer: &Value, read: SandboxObject) {
        self.apply_own_read(Resource::Sandbox, answer, Some(read), None);
    }

    /// `went_on`: a key besides the object's own that already has what was written.
    fn apply_own_read(
        &self,
        resource: Resource,
        object: &Value,
        known: Option<SandboxObject>,
        went_on: Option<&WorkKey>,
    ) {
        let meta = MetaView::of(object);
        let key = ObjectRef::new(meta.namespace, meta.name);
        let owner = match resource {
            Resource::Sandbox | Resource::PodWarmPool => None,
            _ => child_owner(&meta),
        };
        // One write lock for the check, the apply and the entry: the cache cannot change
        // between them.
        let mut inner = self.write();
        // The watch may have shown this version first: then there is no echo to wait for,
        // and an entry would stay until the object next changed (for most children, never).
        let shown = !meta.resource_version.is_empty()
            && inner.held(resource, &key, owner.as_ref()) == Some(meta.resource_version);
        let mut wakes = inner.apply(resource, false, key.clone(), &meta, object, known);
        if meta.resource_version.is_empty() || shown {
            return;
        }
        // Its pool and claimer (a member's status) hear of it with the echo; the reconcile
        // that wrote it, and a child's sandbox, already have it.
        match resource {
            Resource::Sandbox => {
                wakes.retain(|k| *k != WorkKey::Sandbox(key.clone()) && Some(k) != went_on);
            }
            _ => wakes.clear(),
        }
        let written = OwnWrite {
            version: meta.resource_version.to_string(),
            wakes,
            owner,
        };
        inner.own_writes.insert((resource, key), written);
    }

    /// Replaces everything of `resource` in `namespace` with a fresh list, and returns every
    /// key that may have changed. `Self::begin_relist` does the same page by page.
    pub fn replace(&self, resource: Resource, namespace: &str, items: &[Value]) -> Vec<WorkKey> {
        let mut relist = Self::begin_relist(resource, namespace);
        let mut keys = self.relist_page(&mut relist, items);
        keys.extend(self.finish_relist(relist));
        keys.sort();
        keys.dedup();
        keys
    }

    /// Starts a relist of `resource` in `namespace`: its pages are applied as they come, and
    /// [`Self::finish_relist`] then drops what no page showed. Until then the cache holds the
    /// old state and the new side by side, which is no staler than it was before the relist.
    pub(crate) fn begin_relist(resource: Resource, namespace: &str) -> Relist {
        Relist {
            resource,
            namespace: namespace.to_string(),
            seen: HashSet::new(),
        }
    }

    /// Applies one page of a relist; returns the keys to reconcile.
    pub(crate) fn relist_page(&self, relist: &mut Relist, items: &[Value]) -> Vec<WorkKey> {
        let mut keys = Vec::new();
        for item in items {
            let meta = MetaView::of(item);
            let scope = match relist.resource {
                Resource::Pod
                | Resource::PersistentVolumeClaim
                | Resource::Secret
                | Resource::NetworkPolicy
                | Resource::Service => match meta.label(children::SANDBOX_LABEL) {
                    Some(owner) => owner.to_string(),
                    None => continue,
                },
                _ => String::new(),
            };
            relist.seen.insert((scope, meta.name.to_string()));
            keys.extend(self.apply(relist.resource, WatchEventType::Added, item));
        }
        keys
    }

    /// Ends a relist: what of `resource` in its namespace no page showed is gone. Returns the
    /// keys that changed.
    pub(crate) fn finish_relist(&self, relist: Relist) -> Vec<WorkKey> {
        let Relist {
            resource,
            namespace,
            seen,
        } = relist;
        let listed =
            |scope: &str, name: &str| seen.contains(&(scope.to_string(), name.to_string()));
        let mut keys = Vec::new();
        let mut inner = self.write();
        let in_ns = |r: &ObjectRef| r.namespace == namespace;
        match resource {
            Resource::Sandbox => {
                let gone: Vec<ObjectRef> = inner
                    .sandboxes
                    .keys()
                    .chain(inner.unreadable.keys())
                    .filter(|r| in_ns(r) && !listed("", &r.name))
                    .cloned()
                    .collect();
                for key in gone {
                    inner.drop_sandbox(&key);
                    inner.unreadable.remove(&key);
                    keys.push(WorkKey::Sandbox(key));
                }
            }
            Resource::PodWarmPool => {
                let gone: Vec<ObjectRef> = inner
                    .pools
                    .keys()
                    .chain(inner.unreadable_pools.keys())
                    .filter(|r| in_ns(r) && !listed("", &r.name))
                    .cloned()
                    .collect();
                for key in gone {
                    inner.pools.remove(&key);
                    inner.unreadable_pools.remove(&key);
                    inner.settle_pool(&key, None);
                    keys.push(WorkKey::Pool(key));
                }
            }
            Resource::Pod
            | Resource::PersistentVolumeClaim
            | Resource::Secret
            | Resource::NetworkPolicy
            | Resource::Service => {
                let secrets_seen: HashSet<&str> = seen.iter().map(|(o, _)| o.as_str()).collect();
                for (owner, entry) in inner.children.iter_mut().filter(|(r, _)| in_ns(r)) {
                    let mut gone = Vec::new();
                    match resource {
                        Resource::Pod => {
                            if let Some(pod) = entry.pod.take_if(|p| !listed(&owner.name, &p.name))
                            {
                                gone.push(pod.name);
                            }
                        }
                        Resource::PersistentVolumeClaim => {
                            entry.pvcs.retain(|name, _| {
                                let keep = listed(&owner.name, name);
                                if !keep {
                                    gone.push(name.to_string());
                                }
                                keep
                            });
                        }
                        Resource::NetworkPolicy | Resource::Service => {
                            if let Some(slot) = entry.object_slot(resource)
                                && let Some(object) =
                                    slot.take_if(|o| !listed(&owner.name, &o.name))
                            {
                                gone.push(object.name);
                            }
                        }
                        _ => {
                            if entry.secret && !secrets_seen.contains(owner.name.as_str()) {
                                entry.secret = false;
                                let prefix = format!("{resource}/");
                                entry
                                    .versions
                                    .retain(|child, _| !child.starts_with(&prefix));
                                keys.push(WorkKey::Sandbox(owner.clone()));
                            }
                        }
                    }
                    for name in &gone {
                        entry
                            .versions
                            .remove_joined(&version_key_parts(resource, name));
                    }
                    if !gone.is_empty() {
                        keys.push(WorkKey::Sandbox(owner.clone()));
                    }
                }
                inner.children.retain(|_, e| !e.is_empty());
            }
            Resource::Event | Resource::Lease | Resource::PolicyRollout | Resource::ConfigMap => {}
        }
        keys
    }

    /// Forgets deletions older than `ttl`.
    pub(crate) fn prune_tombstones(&self, ttl: Duration) {
        let mut inner = self.write();
        inner.tombstones.retain(|_, (_, at)| at.elapsed() < ttl);
    }

    /// The Sandbox of this key, if it is cached and parses.
    pub fn sandbox(&self, key: &ObjectRef) -> Option<SandboxObject> {
        self.read().sandboxes.get(key).map(|s| (**s).clone())
    }

    /// Why the Sandbox of this key does not parse, if it does not.
    pub fn unreadable_sandbox(&self, key: &ObjectRef) -> Option<Unreadable> {
        self.read().unreadable.get(key).cloned()
    }

    /// The WarmPool of this key, if it is cached and parses.
    pub fn pool(&self, key: &ObjectRef) -> Option<PoolObject> {
        self.read().pools.get(key).cloned()
    }

    /// Why the WarmPool of this key does not parse, if it does not.
    pub fn unreadable_pool(&self, key: &ObjectRef) -> Option<Unreadable> {
        self.read().unreadable_pools.get(key).cloned()
    }

    /// Every Sandbox cached that parses.
    pub fn sandboxes(&self) -> Vec<SandboxObject> {
        self.read()
            .sandboxes
            .values()
            .map(|s| (**s).clone())
            .collect()
    }

    /// What the reaper is handed in `namespace` (see [`sandbox::reap_candidate`]), each with
    /// the resourceVersion it was read at; built under the lock, without copying whole
    /// sandboxes.
    pub(crate) fn reap_candidates(&self, namespace: &str) -> Vec<(ReapCandidate, String)> {
        self.read()
            .sandboxes
            .values()
            .filter(|s| s.sandbox.namespace == namespace)
            .filter_map(|s| {
                sandbox::reap_candidate(&s.sandbox).map(|c| (c, s.resource_version.clone()))
            })
            .collect()
    }

    /// The keys of every Sandbox cached, readable or not.
    pub fn sandbox_keys(&self) -> Vec<ObjectRef> {
        let inner = self.read();
        inner
            .sandboxes
            .keys()
            .chain(inner.unreadable.keys())
            .cloned()
            .collect()
    }

    /// The keys of every WarmPool cached, readable or not.
    pub fn pool_keys(&self) -> Vec<ObjectRef> {
        let inner = self.read();
        inner
            .pools
            .keys()
            .chain(inner.unreadable_pools.keys())
            .cloned()
            .collect()
    }

    /// The children of this Sandbox, as its reconcile is handed them.
    pub fn observed(&self, sandbox: &ObjectRef) -> ObservedChildren {
        let inner = self.read();
        let Some(entry) = inner.children.get(sandbox) else {
            return children::empty();
        };
        ObservedChildren {
            pvcs: entry
                .pvcs
                .iter()
                .map(
                    |(name, held)| cubepod_policy_host::runtime::bindings::ObservedPvc {
                        name: name.to_string(),
                        deleting: held.deleting,
                    },
                )
                .collect(),
            pod: entry.pod.clone(),
            secret: entry.secret,
            network_policy: entry.network_policy.clone(),
            service: entry.service.clone(),
        }
    }

    /// The member Sandboxes of a pool, as the policy sees them, in name order.
    pub fn pool_members(&self, pool: &ObjectRef) -> Vec<PoolMember> {
        let inner = self.read();
        inner
            .members(pool)
            .map(|s| PoolMember {
                name: s.sandbox.name.clone(),
                ready: is_ready(&s.sandbox),
                claimed: s.sandbox.claimed_by.is_some(),
                deleting: s.sandbox.deleting,
                template_hash: s
                    .sandbox
                    .labels
                    .iter()
                    .find(|(key, _)| key == cubepod_policy_host::model::names::TEMPLATE_HASH_LABEL)
                    .map(|(_, value)| value.clone()),
            })
            .collect()
    }

    /// Visits the members of `pool` under one read lock, in name order, so that a claim's
    /// offer copies only the member it picks. A pool's members are found through its record,
    /// not by a scan of every Sandbox.
    pub fn visit_pool_members<R>(
        &self,
        pool: &ObjectRef,
        visit: impl FnOnce(&mut dyn Iterator<Item = &SandboxObject>) -> R,
    ) -> R {
        let inner = self.read();
        let mut members = inner.members(pool);
        visit(&mut members)
    }

    /// This process created the member `name` of `pool`, of uid `uid`: a member until the
    /// pool's record holds it, and then as the record says.
    pub(crate) fn record_created(&self, pool: &ObjectRef, name: &str, uid: &str) {
        let mut inner = self.write();
        inner.membership.created(pool, name, uid);
        inner.resettle(&ObjectRef::new(&pool.namespace, name));
    }

    /// What the next status of `pool` should change in its record of members (see
    /// [`Membership::delta`]): the members this process created, and the entries whose
    /// Sandbox is gone, was made again (another uid), or is a claim's that records it itself.
    pub(crate) fn record_delta(&self, pool: &ObjectRef) -> Option<RecordDelta> {
        let inner = self.read();
        let sandbox = |name: &str| inner.sandboxes.get(&ObjectRef::new(&pool.namespace, name));
        inner.membership.delta(
            pool,
            |name| sandbox(name).map(|s| s.sandbox.uid.clone()),
            |name, uid| {
                let Some(member) = sandbox(name).filter(|s| s.sandbox.uid == uid) else {
                    return false;
                };
                let recorded_by_claim = member
                    .sandbox
                    .claimed_by
                    .as_deref()
                    .and_then(sandbox)
                    .is_some_and(|claim| claim.claimed_member_uid.as_deref() == Some(uid));
                !recorded_by_claim
            },
        )
    }

    /// Whether a claim of `pool` waits to be served while the pool has a ready, unclaimed
    /// member to serve it from.
    pub(crate) fn claims_waiting_on(&self, pool: &ObjectRef) -> bool {
        let inner = self.read();
        let in_pool = |s: &Sandbox| s.namespace == pool.namespace;
        let waiting = inner.sandboxes.values().any(|s| {
            let s = &s.sandbox;
            in_pool(s) && s.spec.warm_pool.as_deref() == Some(pool.name.as_str()) && awaits_claim(s)
        });
        waiting
            && inner.members(pool).any(|m| {
                m.sandbox.claimed_by.is_none() && !m.sandbox.deleting && is_ready(&m.sandbox)
            })
    }

    /// Whether `key` is a claim not yet served: it names a pool, and neither a member in its
    /// status nor a volume of its own. The work queue serves these first.
    pub(crate) fn awaits_claim(&self, key: &ObjectRef) -> bool {
        self.read()
            .sandboxes
            .get(key)
            .is_some_and(|s| awaits_claim(&s.sandbox))
    }

    /// The counts for the gauges.
    pub fn counts(&self) -> Counts {
        let inner = self.read();
        let mut counts = Counts::default();
        for s in inner.sandboxes.values() {
            match s.sandbox.status.phase {
                SandboxPhase::Running => counts.active += 1,
                SandboxPhase::Paused => counts.paused += 1,
                _ => {}
            }
        }
        counts.pools_ready = inner
            .pools
            .iter()
            .map(|(key, p)| (key.clone(), p.pool.status.ready_replicas))
            .collect();
        counts.pools_ready.sort();
        counts
    }

    /// Whether `sandbox`'s entry holds this child: one table lookup, the common case of a
    /// policy deleting its own child.
    pub(crate) fn holds_child(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
    ) -> bool {
        let child = version_key_parts(resource, name);
        self.read()
            .children
            .get(&ObjectRef::new(namespace, sandbox))
            .is_some_and(|entry| entry.versions.get_joined(&child).is_some())
    }

    /// The PVCs held under `sandbox` that it owns by the controller's record (managed, with
    /// the controller reference to `uid`) and that are not being deleted: what a fork of it
    /// may clone. One lookup.
    pub(crate) fn owned_pvcs(&self, namespace: &str, sandbox: &str, uid: &str) -> Vec<String> {
        if uid.is_empty() {
            return Vec::new();
        }
        self.read()
            .children
            .get(&ObjectRef::new(namespace, sandbox))
            .map(|entry| {
                entry
                    .pvcs
                    .iter()
                    .filter(|(_, held)| !held.deleting && held.owner_uid.as_deref() == Some(uid))
                    .map(|(name, _)| name.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The sandboxes whose managed child `resource` `name` in `namespace` the cache holds
    /// (one, unless someone relabelled it), for the boundary's delete and takeover rules. A
    /// scan of every sandbox's children: only for a name the calling sandbox does not hold.
    pub(crate) fn child_owners(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Vec<String> {
        let child = version_key_parts(resource, name);
        self.read()
            .children
            .iter()
            .filter(|(owner, entry)| {
                owner.namespace == namespace && entry.versions.get_joined(&child).is_some()
            })
            .map(|(owner, _)| owner.name.clone())
            .collect()
    }
}

/// A pool member is ready when its sandbox runs and its Pod is Ready.
/// A claim not yet served: it names a pool, and neither a member in its status nor a volume of
/// its own.
fn awaits_claim(s: &Sandbox) -> bool {
    s.spec.warm_pool.is_some()
        && s.status.claimed_member.is_none()
        && s.status.rootfs_pvc.is_none()
        && !s.deleting
}

/// A pool member a claim may be handed: Running and Ready.
pub(crate) fn is_ready(s: &Sandbox) -> bool {
    s.status.phase == SandboxPhase::Running
        && s.status
            .conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == ConditionStatus::True)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(version: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": version,
                         "labels": {"cubepod.io/sandbox": "a"}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn a_late_create_response_does_not_undo_a_newer_watch_event() {
        let cache = Cache::default();
        let owner = ObjectRef::new("ns", "a");
        // The watch showed the Pod Ready (version 5) before the create's answer (version 4,
        // Pending) was applied.
        cache.apply(Resource::Pod, WatchEventType::Modified, &pod("5", true));
        cache.apply(Resource::Pod, WatchEventType::Added, &pod("4", false));
        assert!(cache.observed(&owner).pod.is_some_and(|p| p.ready));
        cache.apply(Resource::Pod, WatchEventType::Modified, &pod("6", false));
        assert!(cache.observed(&owner).pod.is_some_and(|p| !p.ready));
        cache.apply(Resource::Pod, WatchEventType::Deleted, &pod("7", false));
        assert!(cache.observed(&owner).pod.is_none());
        // A create's answer from before the deletion does not bring it back...
        cache.apply(Resource::Pod, WatchEventType::Added, &pod("6", true));
        assert!(cache.observed(&owner).pod.is_none());
        // ... a Pod created again under the name does.
        cache.apply(Resource::Pod, WatchEventType::Added, &pod("8", false));
        assert!(cache.observed(&owner).pod.is_some());
    }

    #[test]
    fn a_child_known_only_to_exist_does_not_undo_what_the_watch_showed() {
        let cache = Cache::default();
        let owner = ObjectRef::new("ns", "a");
        // The manifest of a create that met AlreadyExists: no version, no status.
        let mut manifest = pod("1", false);
        if let Some(meta) = manifest["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        cache.apply(Resource::Pod, WatchEventType::Added, &manifest);
        assert!(cache.observed(&owner).pod.is_some_and(|p| !p.ready));
        cache.apply(Resource::Pod, WatchEventType::Modified, &pod("6", true));
        cache.apply(Resource::Pod, WatchEventType::Added, &manifest);
        assert!(cache.observed(&owner).pod.is_some_and(|p| p.ready));
        // After a deletion it does not bring the Pod back either: the watch will if it exists.
        cache.apply(Resource::Pod, WatchEventType::Deleted, &pod("7", false));
        cache.apply(Resource::Pod, WatchEventType::Added, &manifest);
        assert!(cache.observed(&owner).pod.is_none());
    }

    #[test]
    fn the_echo_of_an_own_write_reconciles_nothing_but_its_pool_and_later_changes_do() {
        let cache = Cache::default();
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
        let cache = Cache::default();
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
        let cache = Cache::default();
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
        let cache = Cache::default();
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

    #[test]
    fn a_relist_in_pages_drops_only_what_no_page_showed() {
        let cache = Cache::default();
        let owner = ObjectRef::new("ns", "a");
        let pvc = |name: &str| {
            json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": "3",
                                "labels": {"cubepod.io/sandbox": "a"}}})
        };
        cache.apply(
            Resource::PersistentVolumeClaim,
            WatchEventType::Added,
            &pvc("x"),
        );
        cache.apply(
            Resource::PersistentVolumeClaim,
            WatchEventType::Added,
            &pvc("y"),
        );
        let mut relist = Cache::begin_relist(Resource::PersistentVolumeClaim, "ns");
        cache.relist_page(&mut relist, &[pvc("y")]);
        cache.relist_page(&mut relist, &[pvc("z")]);
        // Until the relist ends, nothing is dropped.
        assert_eq!(cache.observed(&owner).pvcs.len(), 3);
        let keys = cache.finish_relist(relist);
        let names: Vec<String> = cache
            .observed(&owner)
            .pvcs
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["y", "z"]);
        assert_eq!(keys, [WorkKey::Sandbox(owner)]);
    }

    #[test]
    fn a_sandbox_owns_the_pvcs_of_its_label_name_and_controller_reference() {
        let cache = Cache::default();
        let pvc = |name: &str, sandbox: &str, uid: &str, edit: &dyn Fn(&mut Value)| {
            let mut object = json!({"metadata": {
                "name": name, "namespace": "ns", "resourceVersion": "3",
                "labels": {"app.kubernetes.io/managed-by": "cubepod-controller",
                           "cubepod.io/sandbox": sandbox},
                "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                                     "name": sandbox, "uid": uid, "controller": true}],
            }});
            edit(&mut object);
            object
        };
        let objects = [
            pvc("src-workspace", "src", "uid-src", &|_| {}),
            pvc("src-rootfs-g1", "src", "uid-src", &|_| {}),
            // Being deleted (a reset's old rootfs): not a source any more.
            pvc("src-rootfs-g0", "src", "uid-src", &|o| {
                o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
            }),
            // Labelled as src's, but owned by the victim: a relabelled volume.
            pvc("src-rootfs-g2", "src", "uid-victim", &|_| {}),
            // Its controller reference names another Sandbox than its label.
            pvc("src-rootfs-g3", "src", "uid-src", &|o| {
                o["metadata"]["ownerReferences"][0]["name"] = json!("victim")
            }),
            // A reference that is not the controller's.
            pvc("src-rootfs-g4", "src", "uid-src", &|o| {
                o["metadata"]["ownerReferences"][0]["controller"] = json!(false)
            }),
            // Not managed.
            pvc("src-rootfs-g5", "src", "uid-src", &|o| {
                o["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("someone")
            }),
            pvc("victim-workspace", "victim", "uid-victim", &|_| {}),
        ];
        for object in &objects {
            cache.apply(
                Resource::PersistentVolumeClaim,
                WatchEventType::Added,
                object,
            );
        }
        assert_eq!(
            cache.owned_pvcs("ns", "src", "uid-src"),
            ["src-rootfs-g1", "src-workspace"]
        );
        // Another Sandbox of the same name (another uid), or another namespace: nothing.
        assert!(cache.owned_pvcs("ns", "src", "uid-other").is_empty());
        assert!(cache.owned_pvcs("other", "src", "uid-src").is_empty());
        assert!(cache.owned_pvcs("ns", "src", "").is_empty());
        // The policy still observes every PVC labelled as the sandbox's.
        assert_eq!(cache.observed(&ObjectRef::new("ns", "src")).pvcs.len(), 7);
        cache.apply(
            Resource::PersistentVolumeClaim,
            WatchEventType::Deleted,
            &objects[0],
        );
        assert_eq!(cache.owned_pvcs("ns", "src", "uid-src"), ["src-rootfs-g1"]);
    }

    #[test]
    fn a_deleted_sandbox_stays_deleted_until_created_again() {
        let cache = Cache::default();
        let key = ObjectRef::new("ns", "s");
        let sandbox = |version: &str| {
            json!({"metadata": {"name": "s", "namespace": "ns", "resourceVersion": version},
                   "spec": {"image": "i"}})
        };
        cache.apply(Resource::Sandbox, WatchEventType::Deleted, &sandbox("9"));
        cache.apply(Resource::Sandbox, WatchEventType::Modified, &sandbox("8"));
        assert!(cache.sandbox(&key).is_none());
        cache.apply(Resource::Sandbox, WatchEventType::Added, &sandbox("10"));
        assert!(cache.sandbox(&key).is_some());
        cache.apply(Resource::Sandbox, WatchEventType::Deleted, &sandbox("11"));
        cache.prune_tombstones(Duration::ZERO);
        cache.apply(Resource::Sandbox, WatchEventType::Modified, &sandbox("10"));
        assert!(cache.sandbox(&key).is_some(), "forgotten after the TTL");
    }
}
