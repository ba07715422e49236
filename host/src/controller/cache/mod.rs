//! The watch cache: what the reflectors last saw of our resources, kept compact (the contract's
//! records, not whole objects), plus what the controller itself just wrote, so that it does not
//! write twice before the watch catches up.
//!
//! This file holds the state and every read of it, shared as `Arc<Cache>`: the reconciler, the
//! inputs and the claims read it and cannot change it. Every change goes through the one
//! [`CacheWriter`], made with the cache and handed only to who tells it what (the reflectors,
//! the writer, a policy call's lookup, the watch's echo filter: `update.rs`'s doc names each);
//! the rule of own writes and their watch echoes is `echo.rs`'s.

mod charge;
mod echo;
mod update;

pub(crate) use charge::Past;
pub use charge::{
    DEFAULT_MAX_POLICY_OBJECT_BYTES, DEFAULT_MAX_POLICY_OBJECT_BYTES_PER_SANDBOX, ObjectBounds,
};
pub(crate) use echo::Echoes;
use echo::OwnWrite;
pub(crate) use update::TOMBSTONE_TTL;

use std::ops::Deref;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Instant;

use foldhash::HashMap;

use super::membership::{Claimant, Membership, RecordDelta, Standing};
use super::small_map::SmallMap;
use cubepod_kube::Resource;
use cubepod_policy_host::model::meta::MetaView;
use cubepod_policy_host::model::sandbox::SandboxObject;
use cubepod_policy_host::model::{ObjectRef, Unreadable, children, sandbox};
use cubepod_policy_host::runtime::bindings::{
    ConditionStatus, ObservedChildren, ObservedObject, ObservedPod, PoolMember, ReapCandidate,
    Sandbox, SandboxPhase, SandboxStatus, WarmPool,
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
    /// Shared with the entry's other records of the same uid ([`Children::uid`]).
    owner_uid: Option<Arc<str>>,
}

#[derive(Debug, Default, Clone)]
struct Children {
    pvcs: SmallMap<HeldPvc>,
    pod: Option<ObservedPod>,
    secret: bool,
    network_policy: Option<ObservedObject>,
    service: Option<ObservedObject>,
    /// The resourceVersion last applied per child (`pods/a`), so that a create's response
    /// applied after the watch already showed a newer state (a Pod turned Ready) cannot undo it,
    /// with the uid its controller reference names.
    versions: SmallMap<ChildVersion>,
}

/// What the cache keeps of each child besides what its Sandbox observes of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ChildVersion {
    pub(super) version: String,
    /// The uid of its Sandbox's controller reference ([`children::controller_uid`]): a child
    /// is its Sandbox's only when this is the Sandbox's uid. A label anyone who may create the
    /// object can write; an object of the same name that is not the Sandbox's is never
    /// reported to it, adopted, patched or deleted for it. Shared with the entry's other
    /// records of the same uid ([`Children::uid`]).
    pub(super) owner: Option<Arc<str>>,
}

impl ChildVersion {
    fn owned_by(&self, uid: &str) -> bool {
        self.owner.as_deref() == Some(uid)
    }

    /// Whether it is the child of the Sandbox of `uid` by its controller reference; of any
    /// owner while the Sandbox is not cached (`None`).
    fn of(&self, uid: Option<&str>) -> bool {
        match uid {
            Some(uid) => self.owned_by(uid),
            None => self.owner.is_some(),
        }
    }
}

impl Children {
    /// `uid` as the entry holds it already, or newly: a sandbox's children name its uid in
    /// each of their controller references, and the entry keeps one copy of it, not one per
    /// child (36 bytes and an allocation each, five to seven times per sandbox).
    fn uid(&self, uid: &str) -> Arc<str> {
        self.versions
            .iter()
            .filter_map(|(_, held)| held.owner.as_ref())
            .find(|held| &***held == uid)
            .cloned()
            .unwrap_or_else(|| Arc::from(uid))
    }

    /// Whether its child `name` of `resource` is the Sandbox's of `uid` by its controller
    /// reference (any owner, while the Sandbox is not cached).
    fn ours(&self, uid: Option<&str>, resource: Resource, name: &str) -> bool {
        self.versions
            .get_joined(&version_key_parts(resource, name))
            .is_some_and(|held| held.of(uid))
    }

    fn is_empty(&self) -> bool {
        self.pvcs.is_empty()
            && self.pod.is_none()
            && !self.secret
            && self.network_policy.is_none()
            && self.service.is_none()
    }

    /// The NetworkPolicy or Service held (`None` for other kinds).
    fn object(&self, resource: Resource) -> Option<&ObservedObject> {
        applied_slot(resource, &self.network_policy, &self.service)?.as_ref()
    }

    /// The NetworkPolicy or Service slot (`None` for other kinds).
    fn object_slot(&mut self, resource: Resource) -> Option<&mut Option<ObservedObject>> {
        applied_slot(resource, &mut self.network_policy, &mut self.service)
    }
}

/// Of an applied kind's slots of a sandbox's children (shared or mutable), the one of
/// `resource`; `None` for a kind held without its object.
fn applied_slot<T>(resource: Resource, network_policy: T, service: T) -> Option<T> {
    match resource {
        Resource::NetworkPolicy => Some(network_policy),
        Resource::Service => Some(service),
        Resource::Sandbox
        | Resource::PodWarmPool
        | Resource::Pod
        | Resource::PersistentVolumeClaim
        | Resource::Secret
        | Resource::Event
        | Resource::Lease
        | Resource::PolicyRollout
        | Resource::ConfigMap => None,
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
    /// Boxed too: a record is some 230 bytes, and the table keeps a quarter of its slots
    /// empty, and twice its slots while it grows (at a relist, the restart's peak).
    children: HashMap<ObjectRef, Box<Children>>,
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
    /// What each sandbox's records hold of what its policy wrote (`charge.rs`).
    charges: charge::Charges,
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
    /// How much it may hold of what policies wrote.
    bounds: ObjectBounds,
    /// The sandboxes a write or status was held back for by [`Self::bounds`] since their
    /// reconcile last looked, with the bound.
    bounded: Mutex<HashMap<ObjectRef, Past>>,
}

/// The one handle that changes the [`Cache`], as kube-runtime's reflector `Writer` beside its
/// `Store`: made with the cache ([`Self::with_bounds`]), handed to the reflectors, the
/// controller's writer, a policy call's lookup and the watch's echo filter, and never to what
/// only reads ([`Self::reader`]). It reads what it writes, through [`Deref`].
#[derive(Clone, Default)]
pub struct CacheWriter {
    cache: Arc<Cache>,
}

impl CacheWriter {
    /// An empty cache that holds at most `bounds` of what policies wrote, and its writer.
    pub fn with_bounds(bounds: ObjectBounds) -> Self {
        Self {
            cache: Arc::new(Cache::with_bounds(bounds)),
        }
    }

    /// The cache to read, shared with everything that does not write it.
    pub fn reader(&self) -> Arc<Cache> {
        self.cache.clone()
    }
}

impl Deref for CacheWriter {
    type Target = Cache;

    fn deref(&self) -> &Cache {
        &self.cache
    }
}

/// resourceVersions are opaque to clients, but in practice numbers: compare them when they
/// are, so that a late watch event does not undo a newer write the controller already applied.
fn is_older(incoming: &str, cached: &str) -> bool {
    match (incoming.parse::<u64>(), cached.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
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
    /// The keys of every Sandbox held, readable or not.
    fn sandbox_keys(&self) -> impl Iterator<Item = &ObjectRef> {
        self.sandboxes.keys().chain(self.unreadable.keys())
    }

    /// The keys of every WarmPool held, readable or not.
    fn pool_keys(&self) -> impl Iterator<Item = &ObjectRef> {
        self.pools.keys().chain(self.unreadable_pools.keys())
    }

    /// The Sandboxes `pool`'s record confirms as its members, in name order.
    fn members<'a>(&'a self, pool: &'a ObjectRef) -> impl Iterator<Item = &'a SandboxObject> {
        self.membership
            .members(pool)
            .filter_map(|member| self.sandboxes.get(member).map(|s| &**s))
    }

    /// The version the cache holds of an object (a child's under its sandbox `owner`).
    fn held(&self, resource: Resource, key: &ObjectRef, owner: Option<&ObjectRef>) -> Option<&str> {
        match resource {
            Resource::Sandbox => self.sandboxes.get(key).map(|s| s.resource_version.as_str()),
            Resource::PodWarmPool => self.pools.get(key).map(|p| p.resource_version.as_str()),
            Resource::Event | Resource::Lease | Resource::PolicyRollout | Resource::ConfigMap => {
                None
            }
            Resource::Pod
            | Resource::PersistentVolumeClaim
            | Resource::Secret
            | Resource::NetworkPolicy
            | Resource::Service => self
                .children
                .get(owner?)?
                .versions
                .get_joined(&version_key_parts(resource, &key.name))
                .map(|held| held.version.as_str()),
        }
    }

    /// Charges `key` what its records hold now.
    fn recharge(&mut self, key: &ObjectRef) {
        let status = self
            .sandboxes
            .get(key)
            .map_or(0, |s| charge::status_bytes(&s.sandbox.status));
        let children = self
            .children
            .get(key)
            .map_or(0, |entry| charge::children_bytes(entry));
        self.charges.set_records(key, status + children);
    }

    /// The pool whose record confirms `s` as its member, if one does.
    fn confirmed_pool(&self, s: &SandboxObject) -> Option<String> {
        let label = s.pool_label.as_deref()?;
        let claimant = Claimant {
            name: &s.sandbox.name,
            uid: &s.sandbox.uid,
            label: Some(label),
            controller_uid: s.controller_uid.as_deref(),
            created_at: s.created_at,
        };
        let pool = ObjectRef::new(&s.sandbox.namespace, label);
        self.membership
            .confirms(&pool, &claimant)
            .then(|| label.to_string())
    }
}

impl Cache {
    /// An empty cache that holds at most `bounds` of what policies wrote; its writer makes it
    /// ([`CacheWriter::with_bounds`]).
    fn with_bounds(bounds: ObjectBounds) -> Self {
        Self {
            bounds,
            ..Self::default()
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes charged against `--max-policy-object-bytes` (each sandbox's records past its
    /// allowance), and all the bytes the records hold.
    pub(crate) fn policy_object_bytes(&self) -> (u64, u64) {
        self.read().charges.totals()
    }

    fn note_bound(&self, sandbox: &ObjectRef, past: Past) {
        self.bounded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sandbox.clone(), past);
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
        self.read().sandbox_keys().cloned().collect()
    }

    /// The keys of every WarmPool cached, readable or not.
    pub fn pool_keys(&self) -> Vec<ObjectRef> {
        self.read().pool_keys().cloned().collect()
    }

    /// The children of this Sandbox, as its reconcile is handed them: those labelled for it
    /// whose controller reference names its uid (any uid, but none, while the Sandbox is not
    /// cached). An object of a child's name that is not its own is not its child: never its
    /// Pod's IP, its volume or its Secret.
    pub fn observed(&self, sandbox: &ObjectRef) -> ObservedChildren {
        let inner = self.read();
        let Some(entry) = inner.children.get(sandbox) else {
            return children::empty();
        };
        let uid = inner.sandboxes.get(sandbox).map(|s| s.sandbox.uid.as_str());
        let ours = |resource: Resource, name: &str| entry.ours(uid, resource, name);
        let secret = entry.secret
            && entry.versions.iter().any(|(key, held)| {
                key.strip_prefix(Resource::Secret.plural())
                    .is_some_and(|rest| rest.starts_with('/'))
                    && held.of(uid)
            });
        let object = |resource: Resource, held: &Option<ObservedObject>| {
            held.clone().filter(|o| ours(resource, &o.name))
        };
        ObservedChildren {
            pvcs: entry
                .pvcs
                .iter()
                .filter(|(name, _)| ours(Resource::PersistentVolumeClaim, name))
                .map(
                    |(name, held)| cubepod_policy_host::runtime::bindings::ObservedPvc {
                        name: name.to_string(),
                        deleting: held.deleting,
                    },
                )
                .collect(),
            pod: entry
                .pod
                .clone()
                .filter(|pod| ours(Resource::Pod, &pod.name)),
            secret,
            network_policy: object(Resource::NetworkPolicy, &entry.network_policy),
            service: object(Resource::Service, &entry.service),
        }
    }

    /// The Sandbox of this key read in place, under the cache's read lock: what a caller
    /// reads of it per request (the router) without a copy of the whole record.
    pub fn read_sandbox<R>(
        &self,
        key: &ObjectRef,
        read: impl FnOnce(&SandboxObject) -> R,
    ) -> Option<R> {
        self.read().sandboxes.get(key).map(|s| read(s))
    }

    /// The IP of this Sandbox's Pod when it is Ready and not being deleted: its Pod as
    /// [`Self::observed`] hands it (its own by the controller reference), without the rest.
    pub fn ready_pod_ip(&self, sandbox: &ObjectRef) -> Option<std::net::IpAddr> {
        let inner = self.read();
        let entry = inner.children.get(sandbox)?;
        let uid = inner.sandboxes.get(sandbox).map(|s| s.sandbox.uid.as_str());
        let pod = entry.pod.as_ref()?;
        if !(pod.ready && !pod.deleting && entry.ours(uid, Resource::Pod, &pod.name)) {
            return None;
        }
        pod.ip.as_deref()?.parse().ok()
    }

    /// The member Sandboxes of a pool, as the policy sees them, in name order; after them,
    /// the names the policy chose before that another Sandbox holds (a member a claim took, whose
    /// record is the claim's now; anyone's Sandbox) are listed too, as claimed: taken, never
    /// counted, offered or deleted.
    pub fn pool_members(&self, pool: &ObjectRef) -> Vec<PoolMember> {
        let inner = self.read();
        let member = |s: &SandboxObject, claimed: bool| PoolMember {
            name: s.sandbox.name.clone(),
            ready: is_ready(&s.sandbox),
            claimed,
            deleting: s.sandbox.deleting,
            template_hash: s
                .sandbox
                .labels
                .iter()
                .find(|(key, _)| key == cubepod_policy_host::model::names::TEMPLATE_HASH_LABEL)
                .map(|(_, value)| value.clone()),
        };
        let mut members: Vec<PoolMember> = inner
            .members(pool)
            .map(|s| member(s, s.sandbox.claimed_by.is_some()))
            .collect();
        for name in inner.membership.occupied(pool) {
            let key = ObjectRef::new(&pool.namespace, name);
            match inner.sandboxes.get(&key) {
                Some(s) if s.sandbox.pool.as_deref() == Some(pool.name.as_str()) => {}
                Some(s) => members.push(member(s, true)),
                // Held, as the API answered, and not shown by the watch yet.
                None => members.push(PoolMember {
                    name: name.clone(),
                    ready: false,
                    claimed: true,
                    deleting: false,
                    template_hash: None,
                }),
            }
        }
        members
    }

    /// Whether this process created `name` for `pool`, or the pool's record holds it.
    pub(crate) fn owns_member_name(&self, pool: &ObjectRef, name: &str) -> bool {
        self.read().membership.owns_name(pool, name)
    }

    /// Whether the Sandbox `name` of `pool`'s namespace, as far as this cache knows, is held
    /// by something other than `pool`'s member: a new member cannot be made under that name.
    pub(crate) fn name_held_by_other(&self, pool: &ObjectRef, name: &str) -> bool {
        let inner = self.read();
        let key = ObjectRef::new(&pool.namespace, name);
        inner.sandboxes.contains_key(&key) && !inner.membership.owns_name(pool, name)
    }

    /// Visits, under one read lock, the first member of `pool` the claim `claim` holds (by
    /// name), then the members it may be offered in name order, so that a claim's offer copies
    /// only the member it picks. Both come from the pool's index of its members, not from a
    /// scan of them.
    pub fn visit_pool_offer<R>(
        &self,
        pool: &ObjectRef,
        claim: &str,
        visit: impl FnOnce(Option<&SandboxObject>, &mut dyn Iterator<Item = &SandboxObject>) -> R,
    ) -> R {
        let inner = self.read();
        let sandbox = |name: &str| {
            inner
                .sandboxes
                .get(&ObjectRef::new(&pool.namespace, name))
                .map(|s| &**s)
        };
        let held = inner.membership.held_by(pool, claim).find_map(sandbox);
        let mut free = inner
            .membership
            .free(pool)
            .filter_map(|member| inner.sandboxes.get(member).map(|s| &**s));
        visit(held, &mut free)
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
        waiting && inner.membership.free(pool).next().is_some()
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

    /// Whether `sandbox`'s entry holds this child with its controller reference to `uid`: one
    /// table lookup, the common case of a policy deleting its own child.
    pub(crate) fn holds_child(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> bool {
        let child = version_key_parts(resource, name);
        self.read()
            .children
            .get(&ObjectRef::new(namespace, sandbox))
            .and_then(|entry| entry.versions.get_joined(&child))
            .is_some_and(|held| !uid.is_empty() && held.owned_by(uid))
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

impl CacheWriter {
    /// Whether `sandbox`'s records may take a write of its child `name` of `resource` whose
    /// spec digest (a NetworkPolicy's or Service's) is `spec_hash_bytes` long, in place of
    /// what they hold of it. Past a bound, the sandbox is noted for its reconcile to tell.
    pub(crate) fn room_for_child(
        &self,
        sandbox: &ObjectRef,
        resource: Resource,
        name: &str,
        spec_hash_bytes: u64,
    ) -> Result<(), Past> {
        let mut inner = self.cache.inner.write().unwrap_or_else(|p| p.into_inner());
        let child = version_key_parts(resource, name);
        let entry = inner.children.get(sandbox);
        let record = |key: &str, version: &str, owner: Option<&str>| {
            (key.len() + version.len() + owner.map_or(0, str::len)) as u64 + charge::RECORD_BYTES
        };
        let held_version = entry
            .and_then(|e| e.versions.get_joined(&child))
            .map_or(0, |v| {
                record(&child.concat(), &v.version, v.owner.as_deref())
            });
        let held_object = entry
            .and_then(|e| e.object(resource))
            .filter(|o| o.name == name)
            .map_or(0, |o| charge::object_bytes(&o.name, o.spec_hash.as_deref()));
        // A version and a uid as long as the API server's.
        let after = record(&child.concat(), "0123456789", Some(&"u".repeat(36)))
            + name.len() as u64
            + spec_hash_bytes;
        let before = held_version + held_object;
        let result = inner
            .charges
            .room(&self.cache.bounds, sandbox, before, after);
        match &result {
            Ok(()) => inner.charges.reserve(sandbox, before, after),
            Err(past) => {
                drop(inner);
                self.cache.note_bound(sandbox, past.clone());
            }
        }
        result
    }

    /// Whether `sandbox`'s records may hold `new` in place of its status `old`; the room is
    /// reserved until the status written is in them.
    pub(crate) fn room_for_status(
        &self,
        sandbox: &ObjectRef,
        old: &SandboxStatus,
        new: &SandboxStatus,
    ) -> Result<(), Past> {
        let (before, after) = (charge::status_bytes(old), charge::status_bytes(new));
        let mut inner = self.cache.inner.write().unwrap_or_else(|p| p.into_inner());
        inner
            .charges
            .room(&self.cache.bounds, sandbox, before, after)?;
        inner.charges.reserve(sandbox, before, after);
        Ok(())
    }

    /// The bound a write for `sandbox` met since this was last asked, if one did.
    pub(crate) fn take_bound(&self, sandbox: &ObjectRef) -> Option<Past> {
        self.cache
            .bounded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(sandbox)
    }
}

/// What a pool's member is to claims: the one rule of the offer, the index of free and held
/// members, and the refill's wait for claims.
pub(crate) fn standing(s: &Sandbox) -> Standing<'_> {
    if s.deleting {
        return Standing::Neither;
    }
    match s.claimed_by.as_deref() {
        Some(claim) if s.status.phase != SandboxPhase::Failed => Standing::HeldBy(claim),
        Some(_) => Standing::Neither,
        None if is_ready(s) => Standing::Free,
        None => Standing::Neither,
    }
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
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::controller::queue::WorkKey;
    use cubepod_kube::WatchEventType;

    /// The metadata of `name`, sandbox `a`'s child as the controller writes it: labelled,
    /// with the controller reference to its uid.
    pub(super) fn child_meta(name: &str, version: &str) -> Value {
        json!({"name": name, "namespace": "ns", "resourceVersion": version,
               "labels": {"cubepod.io/sandbox": "a",
                          "app.kubernetes.io/managed-by": "cubepod-controller"},
               "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                                    "name": "a", "uid": "uid-a", "controller": true}]})
    }

    /// The Pod `a` of sandbox `a` at `version`.
    pub(super) fn pod(version: &str, ready: bool) -> Value {
        json!({
            "metadata": child_meta("a", version),
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn a_late_create_response_does_not_undo_a_newer_watch_event() {
        let cache = CacheWriter::default();
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
        let cache = CacheWriter::default();
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
    fn a_sandbox_observes_only_the_children_of_its_controller_reference() {
        let cache = CacheWriter::default();
        let owner = ObjectRef::new("ns", "a");
        let sandbox = json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "resourceVersion": "1"},
            "spec": {"image": "i"}});
        cache.apply(Resource::Sandbox, WatchEventType::Added, &sandbox);
        // Its own Pod is observed, with its IP.
        let mut own = pod("2", true);
        own["status"]["podIP"] = json!("10.0.0.7");
        cache.apply(Resource::Pod, WatchEventType::Added, &own);
        assert_eq!(
            cache.observed(&owner).pod.and_then(|p| p.ip).as_deref(),
            Some("10.0.0.7")
        );
        // The router's read of it: the same Pod, Ready, its IP.
        assert_eq!(cache.ready_pod_ip(&owner), Some([10, 0, 0, 7].into()));
        // The same name labelled as its, without the reference or with another uid: not its
        // Pod, nor its IP (the router routes nothing there); and a Secret or PVC of that kind
        // is not its either.
        let edits: [fn(&mut Value); 2] = [
            |m| drop(m.as_object_mut().map(|m| m.remove("ownerReferences"))),
            |m| m["ownerReferences"][0]["uid"] = json!("uid-other"),
        ];
        for (i, edit) in edits.into_iter().enumerate() {
            let v = |n: usize| (10 * (i + 1) + n).to_string();
            let mut planted = pod(&v(3), true);
            planted["status"]["podIP"] = json!("10.9.9.9");
            edit(&mut planted["metadata"]);
            cache.apply(Resource::Pod, WatchEventType::Modified, &planted);
            assert!(cache.observed(&owner).pod.is_none());
            assert_eq!(cache.ready_pod_ip(&owner), None);
            let mut secret = json!({"metadata": child_meta("a-credentials", &v(4))});
            edit(&mut secret["metadata"]);
            cache.apply(Resource::Secret, WatchEventType::Added, &secret);
            assert!(!cache.observed(&owner).secret);
            let mut pvc = json!({"metadata": child_meta("a-workspace", &v(5))});
            edit(&mut pvc["metadata"]);
            cache.apply(Resource::PersistentVolumeClaim, WatchEventType::Added, &pvc);
            assert!(cache.observed(&owner).pvcs.is_empty());
            for r in [
                Resource::Pod,
                Resource::Secret,
                Resource::PersistentVolumeClaim,
            ] {
                let name = match r {
                    Resource::Pod => "a",
                    Resource::Secret => "a-credentials",
                    _ => "a-workspace",
                };
                let gone = json!({"metadata": child_meta(name, &v(9))});
                cache.apply(r, WatchEventType::Deleted, &gone);
            }
        }
    }

    #[test]
    fn a_relist_in_pages_drops_only_what_no_page_showed() {
        let cache = CacheWriter::default();
        let owner = ObjectRef::new("ns", "a");
        let pvc = |name: &str| json!({"metadata": child_meta(name, "3")});
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
        let mut relist = CacheWriter::begin_relist(Resource::PersistentVolumeClaim, "ns");
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
        let cache = CacheWriter::default();
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
        // The policy observes only the PVCs of its controller reference, not being deleted or
        // being: the relabelled, the misnamed, the unmanaged ones are not its.
        let sandbox = json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "src", "namespace": "ns", "uid": "uid-src",
                         "resourceVersion": "1"},
            "spec": {"image": "i"}});
        cache.apply(Resource::Sandbox, WatchEventType::Added, &sandbox);
        let observed: Vec<String> = cache
            .observed(&ObjectRef::new("ns", "src"))
            .pvcs
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(
            observed,
            ["src-rootfs-g0", "src-rootfs-g1", "src-workspace"]
        );
        cache.apply(
            Resource::PersistentVolumeClaim,
            WatchEventType::Deleted,
            &objects[0],
        );
        assert_eq!(cache.owned_pvcs("ns", "src", "uid-src"), ["src-rootfs-g1"]);
    }

    #[test]
    fn a_sandboxs_children_share_one_copy_of_its_uid() {
        let cache = CacheWriter::default();
        let child = |name: &str, uid: &str| {
            let mut meta = child_meta(name, "3");
            meta["ownerReferences"][0]["uid"] = json!(uid);
            json!({ "metadata": meta })
        };
        cache.apply(Resource::Pod, WatchEventType::Added, &pod("2", true));
        cache.apply(
            Resource::Secret,
            WatchEventType::Added,
            &child("a", "uid-a"),
        );
        for (name, uid) in [("a-rootfs", "uid-a"), ("a-other", "uid-b")] {
            cache.apply(
                Resource::PersistentVolumeClaim,
                WatchEventType::Added,
                &child(name, uid),
            );
        }
        let inner = cache.read();
        let entry = &inner.children[&ObjectRef::new("ns", "a")];
        let owners: Vec<&Arc<str>> = entry
            .versions
            .iter()
            .filter_map(|(_, held)| held.owner.as_ref())
            .chain(entry.pvcs.iter().filter_map(|(_, p)| p.owner_uid.as_ref()))
            .collect();
        let of = |uid: &str| -> Vec<&Arc<str>> {
            owners.iter().copied().filter(|o| &***o == uid).collect()
        };
        let (a, b) = (of("uid-a"), of("uid-b"));
        // The Pod, the Secret and a PVC (in both its records) name uid-a: one copy.
        assert_eq!((a.len(), b.len()), (4, 2));
        assert!(a.iter().all(|&o| Arc::ptr_eq(o, a[0])));
        assert!(!Arc::ptr_eq(a[0], b[0]));
        drop(inner);
        assert_eq!(cache.owned_pvcs("ns", "a", "uid-a"), ["a-rootfs"]);
        assert_eq!(cache.owned_pvcs("ns", "a", "uid-b"), ["a-other"]);
    }

    #[test]
    fn a_deleted_sandbox_stays_deleted_until_created_again() {
        let cache = CacheWriter::default();
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

    /// A pool member deleted and created again under its name by the controller, whose answer
    /// (the new object) comes before the watch's deletion of the old one: the new one stays,
    /// and so does its Pod when the old Pod's deletion comes late.
    #[test]
    fn a_late_deletion_of_an_earlier_object_leaves_its_successor() {
        let cache = CacheWriter::default();
        let key = ObjectRef::new("ns", "s");
        let sandbox = |version: &str| {
            json!({"metadata": {"name": "s", "namespace": "ns", "resourceVersion": version},
                   "spec": {"image": "i"}})
        };
        cache.apply(Resource::Sandbox, WatchEventType::Added, &sandbox("5"));
        cache.apply_own(Resource::Sandbox, &sandbox("12"));
        cache.apply(Resource::Sandbox, WatchEventType::Deleted, &sandbox("10"));
        assert_eq!(
            cache.sandbox(&key).map(|s| s.resource_version),
            Some("12".to_string())
        );
        // Its own deletion goes.
        cache.apply(Resource::Sandbox, WatchEventType::Deleted, &sandbox("14"));
        assert!(cache.sandbox(&key).is_none());

        let owner = ObjectRef::new("ns", "a");
        cache.apply(Resource::Pod, WatchEventType::Added, &pod("12", true));
        cache.apply(Resource::Pod, WatchEventType::Deleted, &pod("10", false));
        assert!(cache.observed(&owner).pod.is_some());
    }
}
