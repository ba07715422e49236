//! Which Sandboxes are a warm pool's members: the ones the controller created for it, as the
//! pool's own record (`status.memberUIDs`, name to uid) holds them, never what a label says.
//! Anyone who may create a Sandbox may label it `cubepod.io/pool: <pool>`; only the
//! controller writes a pool's status. A member is counted, offered to claims and deleted by its
//! pool only while the record names it with its uid.
//!
//! The record is written with the pool's status, after the creates: what this process created
//! and the record does not hold yet is kept here until it does. A pool whose status an earlier
//! controller wrote, with no record in it, takes, once, the Sandboxes whose controller
//! reference names it and that the API server created before this process first saw the pool
//! so (what an earlier controller may have created; a reference anyone may write, a creation
//! time only the API server), and records them with its next status.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;

use cubepod_policy_host::model::ObjectRef;

/// What the pool records, and what this process created for it since.
#[derive(Debug, Default)]
struct PoolEntry {
    uid: String,
    /// `None`: the pool's status predates the record (see the module's docs).
    recorded: Option<BTreeMap<String, String>>,
    /// When this process first saw the pool without a record (Unix seconds): only Sandboxes
    /// created before it may be taken as its members by their controller reference.
    unrecorded_since: Option<i64>,
    /// Created by this process, not yet in `recorded`.
    created: BTreeMap<String, String>,
    /// The Sandboxes confirmed as members now.
    confirmed: BTreeSet<ObjectRef>,
    /// The confirmed members a claim may be offered ([`Standing::Free`]), in name order: what
    /// a claim's offer visits, rather than every member.
    free: BTreeSet<ObjectRef>,
    /// The confirmed members a claim holds ([`Standing::HeldBy`]), by the claim's name, then
    /// the member's.
    held: BTreeSet<(String, String)>,
    /// The claim of each member in `held`, by the member's name.
    holder: HashMap<String, String>,
    /// Names the pool's policy chose for a new member that a Sandbox other than a member holds
    /// (a member a claim took, whose record is the claim's now; anyone's Sandbox): listed to
    /// the policy as taken until that Sandbox is gone.
    occupied: BTreeSet<String>,
}

impl PoolEntry {
    /// `member` is no longer indexed as a member, nor as free or held.
    fn unindex(&mut self, member: &ObjectRef) {
        self.confirmed.remove(member);
        self.free.remove(member);
        if let Some(claim) = self.holder.remove(&member.name) {
            self.held.remove(&(claim, member.name.clone()));
        }
    }
}

/// The wall clock in Unix seconds, as a creation timestamp counts.
fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The pools' records, and the members they confirm.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    pools: HashMap<ObjectRef, PoolEntry>,
}

/// What a Sandbox shows of itself that membership is decided on.
pub(crate) struct Claimant<'a> {
    pub(crate) name: &'a str,
    pub(crate) uid: &'a str,
    /// Its `cubepod.io/pool` label.
    pub(crate) label: Option<&'a str>,
    /// The uid its controller reference names.
    pub(crate) controller_uid: Option<&'a str>,
    /// Its `metadata.creationTimestamp` (Unix seconds), the API server's.
    pub(crate) created_at: Option<i64>,
}

/// What a confirmed member is to the claims of its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing<'a> {
    /// Ready, unclaimed and not being deleted: it may be offered to a claim.
    Free,
    /// Held by the claim of this name (and neither being deleted nor failed).
    HeldBy(&'a str),
    /// Neither: starting, failed, or being deleted.
    Neither,
}

/// The change a pool's status makes to its record: a uid to record, or `None` to drop.
pub(crate) type RecordDelta = BTreeMap<String, Option<String>>;

impl Membership {
    /// Whether the pool `pool` (in the Sandbox's namespace) takes `s` as its member.
    pub(crate) fn confirms(&self, pool: &ObjectRef, s: &Claimant<'_>) -> bool {
        if s.label != Some(pool.name.as_str()) {
            return false;
        }
        let Some(entry) = self.pools.get(pool) else {
            return false;
        };
        if entry.created.get(s.name).map(String::as_str) == Some(s.uid) {
            return true;
        }
        match &entry.recorded {
            Some(recorded) => recorded.get(s.name).map(String::as_str) == Some(s.uid),
            None => {
                !entry.uid.is_empty()
                    && s.controller_uid == Some(entry.uid.as_str())
                    && s.created_at
                        .zip(entry.unrecorded_since)
                        .is_some_and(|(created, since)| created < since)
            }
        }
    }

    /// The pool `pool` as its status now records its members (`None`: the pool is gone).
    /// Returns the names whose membership may have changed.
    pub(crate) fn set_pool(
        &mut self,
        pool: &ObjectRef,
        now: Option<(String, Option<BTreeMap<String, String>>)>,
    ) -> BTreeSet<String> {
        let mut touched: BTreeSet<String> = BTreeSet::new();
        let before = self.pools.remove(pool);
        if let Some(before) = &before {
            touched.extend(before.confirmed.iter().map(|r| r.name.clone()));
            touched.extend(before.created.keys().cloned());
        }
        let Some((uid, recorded)) = now else {
            return touched;
        };
        let unrecorded_since = recorded.is_none().then(|| {
            before
                .as_ref()
                .and_then(|b| b.unrecorded_since)
                .unwrap_or_else(now_seconds)
        });
        let (mut created, occupied) = before.map(|b| (b.created, b.occupied)).unwrap_or_default();
        if let Some(recorded) = &recorded {
            touched.extend(recorded.keys().cloned());
            // Recorded now: no longer only this process's to remember.
            created.retain(|name, uid| recorded.get(name) != Some(uid));
        }
        self.pools.insert(
            pool.clone(),
            PoolEntry {
                uid,
                recorded,
                unrecorded_since,
                created,
                occupied,
                ..PoolEntry::default()
            },
        );
        touched
    }

    /// Whether the pool's status predates the record: its members are then every Sandbox
    /// labelled so, which only a scan finds.
    pub(crate) fn unrecorded(&self, pool: &ObjectRef) -> bool {
        self.pools.get(pool).is_some_and(|e| e.recorded.is_none())
    }

    /// This process created the member `name` (uid `uid`) of `pool`.
    pub(crate) fn created(&mut self, pool: &ObjectRef, name: &str, uid: &str) {
        if let Some(entry) = self.pools.get_mut(pool) {
            entry.created.insert(name.to_string(), uid.to_string());
        }
    }

    /// Marks `name` a confirmed member of `pool` standing so to claims, or (`None`) not a
    /// member.
    pub(crate) fn index(&mut self, pool: &ObjectRef, name: &str, standing: Option<Standing<'_>>) {
        let Some(entry) = self.pools.get_mut(pool) else {
            return;
        };
        let member = ObjectRef::new(&pool.namespace, name);
        entry.unindex(&member);
        let Some(standing) = standing else {
            return;
        };
        match standing {
            Standing::Free => {
                entry.free.insert(member.clone());
            }
            Standing::HeldBy(claim) => {
                entry.held.insert((claim.to_string(), name.to_string()));
                entry.holder.insert(name.to_string(), claim.to_string());
            }
            Standing::Neither => {}
        }
        entry.confirmed.insert(member);
    }

    /// Whether `name` is one this process created for `pool`, or its record holds.
    pub(crate) fn owns_name(&self, pool: &ObjectRef, name: &str) -> bool {
        self.pools.get(pool).is_some_and(|e| {
            e.created.contains_key(name)
                || e.recorded.as_ref().is_some_and(|r| r.contains_key(name))
        })
    }

    /// `name`, chosen by `pool`'s policy for a new member, is held by another Sandbox.
    pub(crate) fn occupy(&mut self, pool: &ObjectRef, name: &str) {
        if let Some(entry) = self.pools.get_mut(pool) {
            entry.occupied.insert(name.to_string());
        }
    }

    /// The names of `pool`'s namespace held by a Sandbox other than its member.
    pub(crate) fn occupied(&self, pool: &ObjectRef) -> impl Iterator<Item = &String> {
        self.pools
            .get(pool)
            .into_iter()
            .flat_map(|e| e.occupied.iter())
    }

    /// The Sandbox `key` is gone: its name is free again for every pool of its namespace.
    pub(crate) fn vacate(&mut self, key: &ObjectRef) {
        for (pool, entry) in &mut self.pools {
            if pool.namespace == key.namespace {
                entry.occupied.remove(&key.name);
            }
        }
    }

    /// The Sandbox `name` of `pool`'s namespace is gone: what this process created of that
    /// name is forgotten.
    pub(crate) fn gone(&mut self, pool: &ObjectRef, name: &str) {
        if let Some(entry) = self.pools.get_mut(pool) {
            entry.unindex(&ObjectRef::new(&pool.namespace, name));
            entry.created.remove(name);
        }
    }

    /// `pool`'s confirmed members, in name order.
    pub(crate) fn members(&self, pool: &ObjectRef) -> impl Iterator<Item = &ObjectRef> {
        self.pools
            .get(pool)
            .into_iter()
            .flat_map(|e| e.confirmed.iter())
    }

    /// `pool`'s members a claim may be offered, in name order.
    pub(crate) fn free(&self, pool: &ObjectRef) -> impl Iterator<Item = &ObjectRef> {
        self.pools.get(pool).into_iter().flat_map(|e| e.free.iter())
    }

    /// The names of `pool`'s members the claim `claim` holds, in name order.
    pub(crate) fn held_by<'a>(
        &'a self,
        pool: &ObjectRef,
        claim: &'a str,
    ) -> impl Iterator<Item = &'a str> {
        let from = (claim.to_string(), String::new());
        self.pools.get(pool).into_iter().flat_map(move |e| {
            e.held
                .range(from.clone()..)
                .take_while(move |(holder, _)| holder == claim)
                .map(|(_, member)| member.as_str())
        })
    }

    /// What the pool's next status should change in its record: the members this process
    /// created, and the entries to drop (`keep` says, of a recorded name and uid, whether the
    /// record still needs it). `None` when nothing changes; a pool whose status predates the
    /// record gets one, of its confirmed members.
    pub(crate) fn delta(
        &self,
        pool: &ObjectRef,
        uid_of: impl Fn(&str) -> Option<String>,
        keep: impl Fn(&str, &str) -> bool,
    ) -> Option<RecordDelta> {
        let entry = self.pools.get(pool)?;
        let mut delta = RecordDelta::new();
        for (name, uid) in &entry.created {
            delta.insert(name.clone(), Some(uid.clone()));
        }
        match &entry.recorded {
            Some(recorded) => {
                for (name, uid) in recorded {
                    if !keep(name, uid) {
                        delta.insert(name.clone(), None);
                    }
                }
                (!delta.is_empty()).then_some(delta)
            }
            None => {
                for member in &entry.confirmed {
                    if let Some(uid) = uid_of(&member.name) {
                        delta.insert(member.name.clone(), Some(uid));
                    }
                }
                Some(delta)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> ObjectRef {
        ObjectRef::new("ns", "p")
    }

    fn claimant<'a>(name: &'a str, uid: &'a str, owner: Option<&'a str>) -> Claimant<'a> {
        Claimant {
            name,
            uid,
            label: Some("p"),
            controller_uid: owner,
            // Created long before any pool was seen.
            created_at: Some(1),
        }
    }

    fn recorded(entries: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            entries
                .iter()
                .map(|(n, u)| (n.to_string(), u.to_string()))
                .collect(),
        )
    }

    #[test]
    fn only_the_recorded_uid_is_a_member_whatever_the_labels_and_owner_say() {
        let mut m = Membership::default();
        m.set_pool(
            &pool(),
            Some(("pool-uid".into(), recorded(&[("m1", "u1")]))),
        );
        assert!(m.confirms(&pool(), &claimant("m1", "u1", Some("pool-uid"))));
        // The same name, made again by someone else: another uid.
        assert!(!m.confirms(&pool(), &claimant("m1", "u9", Some("pool-uid"))));
        // Labelled and owned as a member would be, never recorded.
        assert!(!m.confirms(&pool(), &claimant("m2", "u2", Some("pool-uid"))));
        // Recorded, but labelled for another pool.
        let other = Claimant {
            label: Some("q"),
            ..claimant("m1", "u1", None)
        };
        assert!(!m.confirms(&pool(), &other));
    }

    #[test]
    fn a_member_this_process_created_counts_until_the_record_holds_it() {
        let mut m = Membership::default();
        m.set_pool(&pool(), Some(("pool-uid".into(), recorded(&[]))));
        m.created(&pool(), "m1", "u1");
        assert!(m.confirms(&pool(), &claimant("m1", "u1", None)));
        let delta = m.delta(&pool(), |_| None, |_, _| true);
        assert_eq!(
            delta,
            Some(RecordDelta::from([("m1".into(), Some("u1".into()))]))
        );
        m.set_pool(
            &pool(),
            Some(("pool-uid".into(), recorded(&[("m1", "u1")]))),
        );
        assert_eq!(m.delta(&pool(), |_| None, |_, _| true), None);
        assert!(m.confirms(&pool(), &claimant("m1", "u1", None)));
    }

    #[test]
    fn entries_the_record_no_longer_needs_are_dropped() {
        let mut m = Membership::default();
        m.set_pool(
            &pool(),
            Some(("pool-uid".into(), recorded(&[("m1", "u1"), ("m2", "u2")]))),
        );
        let delta = m.delta(&pool(), |_| None, |name, _| name != "m2");
        assert_eq!(delta, Some(RecordDelta::from([("m2".into(), None)])));
    }

    #[test]
    fn a_pool_without_a_record_takes_its_owned_members_once_and_records_them() {
        let mut m = Membership::default();
        m.set_pool(&pool(), Some(("pool-uid".into(), None)));
        assert!(m.unrecorded(&pool()));
        assert!(m.confirms(&pool(), &claimant("m1", "u1", Some("pool-uid"))));
        assert!(!m.confirms(&pool(), &claimant("m2", "u2", Some("other"))));
        // A Sandbox created since (a tenant's, with the pool's labels and its reference, which
        // anyone may write) is not taken, nor one whose creation time is unknown.
        let later = Claimant {
            created_at: Some(now_seconds() + 1),
            ..claimant("m3", "u3", Some("pool-uid"))
        };
        assert!(!m.confirms(&pool(), &later));
        let unknown = Claimant {
            created_at: None,
            ..claimant("m4", "u4", Some("pool-uid"))
        };
        assert!(!m.confirms(&pool(), &unknown));
        // Seen again without a record: the moment stays the first.
        m.set_pool(&pool(), Some(("pool-uid".into(), None)));
        assert!(!m.confirms(&pool(), &later));
        m.index(&pool(), "m1", Some(Standing::Neither));
        let delta = m.delta(&pool(), |_| Some("u1".into()), |_, _| true);
        assert_eq!(
            delta,
            Some(RecordDelta::from([("m1".into(), Some("u1".into()))]))
        );
    }

    #[test]
    fn a_gone_pool_confirms_nothing() {
        let mut m = Membership::default();
        m.set_pool(
            &pool(),
            Some(("pool-uid".into(), recorded(&[("m1", "u1")]))),
        );
        m.index(&pool(), "m1", Some(Standing::Neither));
        let touched = m.set_pool(&pool(), None);
        assert!(touched.contains("m1"));
        assert!(!m.confirms(&pool(), &claimant("m1", "u1", None)));
        assert_eq!(m.members(&pool()).count(), 0);
    }

    #[test]
    fn the_index_follows_each_member_from_free_to_held_to_gone() {
        let mut m = Membership::default();
        m.set_pool(
            &pool(),
            Some(("pool-uid".into(), recorded(&[("m1", "u1"), ("m2", "u2")]))),
        );
        let free = |m: &Membership| m.free(&pool()).map(|r| r.name.clone()).collect::<Vec<_>>();
        let held = |m: &Membership, claim| {
            m.held_by(&pool(), claim)
                .map(String::from)
                .collect::<Vec<_>>()
        };
        m.index(&pool(), "m2", Some(Standing::Free));
        m.index(&pool(), "m1", Some(Standing::Free));
        assert_eq!(free(&m), ["m1", "m2"]);
        m.index(&pool(), "m1", Some(Standing::HeldBy("c")));
        assert_eq!(free(&m), ["m2"]);
        assert_eq!(held(&m, "c"), ["m1"]);
        // A claim whose name begins another's holds nothing of it.
        assert!(held(&m, "").is_empty() && held(&m, "c2").is_empty());
        m.index(&pool(), "m1", Some(Standing::Neither));
        assert!(held(&m, "c").is_empty());
        assert_eq!(m.members(&pool()).count(), 2);
        m.index(&pool(), "m2", Some(Standing::HeldBy("c")));
        m.gone(&pool(), "m2");
        assert!(free(&m).is_empty() && held(&m, "c").is_empty());
        m.index(&pool(), "m1", None);
        assert_eq!(m.members(&pool()).count(), 0);
    }
}
