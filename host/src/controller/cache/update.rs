//! Every change to the cache's records, in one place: the methods of [`CacheWriter`], the one
//! handle that writes the [`Cache`] (the room its bounds leave is `mod.rs`'s, beside them).
//! Reading is `mod.rs`'s; the rule of own writes and their echoes is `echo.rs`'s.
//!
//! What the cache learns, and who tells it:
//!
//! - **the cluster's watches and lists**: the reflector applies each watch event
//!   ([`CacheWriter::apply`]) and each relist, page by page
//!   ([`CacheWriter::begin_relist`], [`CacheWriter::relist_page`],
//!   [`CacheWriter::finish_relist`]; [`CacheWriter::replace`] for a whole list, as
//!   `policy test`'s scratch cluster refills it), and the watch's echo filter takes the echoes
//!   of own writes unread ([`CacheWriter::take_echo`], through `echo::Echoes`);
//! - **the answers of the controller's own writes**: the writer (`writer.rs`) applies each
//!   answer as it comes, an own write's so that its echo reconciles nothing
//!   ([`CacheWriter::apply_own`], [`CacheWriter::apply_own_sandbox`],
//!   [`CacheWriter::apply_adoption`]), another's as any change ([`CacheWriter::apply`]), and a
//!   pool member it created ([`CacheWriter::record_created`]);
//! - **what a policy call's writes got back**: the runtime, in the middle of a guest call,
//!   hands each answer to [`ChildLookup::written`](cubepod_policy_host::runtime::ChildLookup),
//!   which is [`CacheWriter::apply_own`] (`child_lookup.rs`);
//! - **time**: the manager forgets old deletions ([`CacheWriter::prune_tombstones`]).
//!
//! Each takes the cache's one write lock for the whole of its change, so that the version
//! checks, the tombstones and the record of own writes see one state.

use std::collections::BTreeMap;
use std::sync::RwLockWriteGuard;
use std::time::{Duration, Instant};

use foldhash::{HashSet, HashSetExt};
use serde_json::Value;

use super::{
    Cache, CacheWriter, ChildVersion, HeldPvc, Inner, PoolObject, child_owner, is_older, standing,
    version_key_parts,
};
use crate::controller::queue::WorkKey;
use cubepod_kube::{Resource, WatchEventType};
use cubepod_policy_host::model::meta::MetaView;
use cubepod_policy_host::model::sandbox::SandboxObject;
use cubepod_policy_host::model::{ObjectRef, Unreadable, children, pool, sandbox};

/// How long a deletion is remembered: well past the client's request timeout, after which no
/// answer to a write made before the deletion can still arrive.
pub(crate) const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// A relist in progress (see [`CacheWriter::begin_relist`]): which objects its pages showed, as
/// (owning sandbox, name) for children and ("", name) for our own resources.
pub(crate) struct Relist {
    resource: Resource,
    namespace: String,
    seen: HashSet<(String, String)>,
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

impl Cache {
    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl CacheWriter {
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
        // One write lock for the check, the apply and the record: the cache cannot change
        // between them.
        self.write()
            .apply_own(resource, &meta, object, known, went_on);
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
                Resource::Sandbox
                | Resource::PodWarmPool
                | Resource::Event
                | Resource::Lease
                | Resource::PolicyRollout
                | Resource::ConfigMap => String::new(),
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
        // What of a kind of our own no page showed.
        let unlisted = |r: &&ObjectRef| in_ns(r) && !listed("", &r.name);
        match resource {
            Resource::Sandbox => {
                let gone: Vec<ObjectRef> = inner.sandbox_keys().filter(unlisted).cloned().collect();
                for key in gone {
                    inner.drop_sandbox(&key);
                    inner.unreadable.remove(&key);
                    keys.push(WorkKey::Sandbox(key));
                }
            }
            Resource::PodWarmPool => {
                let gone: Vec<ObjectRef> = inner.pool_keys().filter(unlisted).cloned().collect();
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
                        // Not children: the arm above is only of children.
                        Resource::Sandbox
                        | Resource::PodWarmPool
                        | Resource::Event
                        | Resource::Lease
                        | Resource::PolicyRollout
                        | Resource::ConfigMap => {}
                        Resource::Secret => {
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
                for key in &keys {
                    if let WorkKey::Sandbox(owner) = key {
                        inner.recharge(owner);
                    }
                }
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

    /// `name`, chosen by `pool`'s policy for a new member, is another Sandbox's (see
    /// [`Cache::name_held_by_other`], or the API answered AlreadyExists): listed to the policy as
    /// taken until that Sandbox is gone.
    pub(crate) fn occupy_member_name(&self, pool: &ObjectRef, name: &str) {
        self.write().membership.occupy(pool, name);
    }

    /// This process created the member `name` of `pool`, of uid `uid`: a member until the
    /// pool's record holds it, and then as the record says.
    pub(crate) fn record_created(&self, pool: &ObjectRef, name: &str, uid: &str) {
        let mut inner = self.write();
        inner.membership.created(pool, name, uid);
        inner.resettle(&ObjectRef::new(&pool.namespace, name));
    }
}

impl Inner {
    /// One watch event (or a write's answer) of the object `key`, whose metadata is `meta`:
    /// see [`CacheWriter::apply`].
    pub(super) fn apply(
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
        // The deletion of an earlier object of the same name, seen after the answer that put
        // its successor here (a pool member replaced under its name): the successor stays.
        if deleted
            && self
                .held(resource, &tombstone.1, child_owner(meta).as_ref())
                .is_some_and(|held| is_older(meta.resource_version, held))
        {
            return Vec::new();
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
            self.membership.index(&pool, &key.name, None);
        }
        read.sandbox.pool = self.confirmed_pool(&read);
        if let Some(pool) = &read.sandbox.pool {
            let pool = ObjectRef::new(&key.namespace, pool);
            let standing = standing(&read.sandbox);
            self.membership.index(&pool, &key.name, Some(standing));
        }
        self.sandboxes.insert(key.clone(), Box::new(read));
        self.recharge(&key);
    }

    fn drop_sandbox(&mut self, key: &ObjectRef) {
        let removed = self.sandboxes.remove(key);
        if removed.is_some() {
            self.membership.vacate(key);
        }
        if let Some(label) = removed.and_then(|old| old.pool_label.clone()) {
            self.membership
                .gone(&ObjectRef::new(&key.namespace, &label), &key.name);
        }
        self.recharge(key);
    }

    /// Decides again whether the Sandbox `key` is its pool's member.
    fn resettle(&mut self, key: &ObjectRef) {
        let Some(s) = self.sandboxes.get(key) else {
            return;
        };
        let confirmed = self.confirmed_pool(s);
        if let Some(label) = &s.pool_label {
            let pool = ObjectRef::new(&key.namespace, label);
            let standing = confirmed.is_some().then(|| standing(&s.sandbox));
            self.membership.index(&pool, &key.name, standing);
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
        let controller = children::controller_uid(object).map(|uid| entry.uid(uid));
        let child = version_key_parts(resource, meta.name);
        if !deleted
            && entry.versions.get_joined(&child).is_some_and(|seen| {
                is_older(meta.resource_version, &seen.version)
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
            let held = ChildVersion {
                version: meta.resource_version.to_string(),
                owner: controller.clone(),
            };
            entry.versions.insert_joined(&child, held);
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
                    owner_uid: controller,
                };
                entry.pvcs.insert(meta.name.to_string(), held);
            }
            Resource::NetworkPolicy | Resource::Service => {
                if let Some(slot) = entry.object_slot(resource) {
                    *slot = (!deleted).then(|| children::object(object));
                }
            }
            Resource::Secret => entry.secret = !deleted,
            // Not children: a child's owner is a Sandbox only for the kinds above.
            Resource::Sandbox
            | Resource::PodWarmPool
            | Resource::Event
            | Resource::Lease
            | Resource::PolicyRollout
            | Resource::ConfigMap => {}
        }
        if entry.is_empty() {
            self.children.remove(&owner);
        }
        self.recharge(&owner);
        vec![WorkKey::Sandbox(owner)]
    }
}
