//! What the cache holds of what policies wrote, charged per sandbox and in total, and bounded:
//! each call is bounded on its own (manifest bytes, calls, the calls' memory budget), but what
//! the host keeps of the objects a policy writes (a child's record with the spec digest the
//! policy chose, the status it wrote, the echo record of each write) stays after the call,
//! once per sandbox, however many sandboxes a policy inflates.
//!
//! A sandbox's charge is the bytes of its records: its status, and each child's record (name,
//! version, owner uid, Pod IP, spec digest), at a flat [`RECORD_BYTES`] each for the fixed
//! part and the record of its write awaiting its echo. Its first [`ALLOWANCE`] bytes are the
//! ordinary record any sandbox has (what the default policy's take is about half of it); what
//! lies past it is charged against `--max-policy-object-bytes`, in total. One sandbox holds at
//! most `--max-policy-object-bytes-per-sandbox`. A policy's write or status that would go past
//! either is not kept: the write is deferred (the guest is told to retry, and the Sandbox is
//! told, once, by an Event and a condition), the status written with its messages cut.

use foldhash::HashMap;

use super::Children;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::bindings::{ObservedObject, SandboxStatus};

/// The flat bytes of one record's fixed part (its map slot, the strings' headers, the version
/// and the record of its write awaiting its echo).
pub(crate) const RECORD_BYTES: u64 = 96;

/// The bytes of each sandbox's records not charged against the total: the ordinary record of
/// a sandbox and its children (the default policy's take about 2 KiB).
pub(crate) const ALLOWANCE: u64 = 4 << 10;

/// The default of `--max-policy-object-bytes`: see `docs/architecture.md` ("Host memory
/// across objects") for how it fits the Deployment's 512Mi beside the calls' budget.
pub const DEFAULT_MAX_POLICY_OBJECT_BYTES: u64 = 16 << 20;

/// The default of `--max-policy-object-bytes-per-sandbox`: a status at the status budget
/// (64 KiB) and children whose records are a few hundred bytes each.
pub const DEFAULT_MAX_POLICY_OBJECT_BYTES_PER_SANDBOX: u64 = 128 << 10;

/// How much the cache may hold of what policies wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectBounds {
    /// All sandboxes' records past their [`ALLOWANCE`], together.
    pub total: u64,
    /// One sandbox's records.
    pub per_sandbox: u64,
}

impl Default for ObjectBounds {
    fn default() -> Self {
        Self {
            total: DEFAULT_MAX_POLICY_OBJECT_BYTES,
            per_sandbox: DEFAULT_MAX_POLICY_OBJECT_BYTES_PER_SANDBOX,
        }
    }
}

/// Which bound a write or status would pass, with the figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Past {
    /// The sandbox's own records would hold `held` bytes.
    Sandbox { held: u64, bound: u64 },
    /// All sandboxes' records past their allowance would hold `held` bytes.
    Total { held: u64, bound: u64 },
}

impl Past {
    /// The condition's reason.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Past::Sandbox { .. } => "SandboxBound",
            Past::Total { .. } => "TotalBound",
        }
    }

    /// The bound in words: which flag, its value, what it would hold, and the fix.
    pub(crate) fn words(&self) -> String {
        let q = |b: u64| cubepod_policy_host::containment::format_bytes(u128::from(b));
        match self {
            Past::Sandbox { held, bound } => format!(
                "the controller would hold {} of this Sandbox's objects and status, past its \
                 bound of {} (--max-policy-object-bytes-per-sandbox): write smaller objects and \
                 status (a short cubepod.io/spec-hash, short condition messages), or raise the \
                 flag",
                q(*held),
                q(*bound)
            ),
            Past::Total { held, bound } => format!(
                "the controller would hold {} of the policy's objects and statuses across \
                 sandboxes, past its bound of {} (--max-policy-object-bytes): write smaller \
                 objects and status, or raise the flag with the container's memory limit",
                q(*held),
                q(*bound)
            ),
        }
    }
}

/// Each sandbox's charge, and the total past the allowances.
#[derive(Default)]
pub(super) struct Charges {
    per: HashMap<ObjectRef, u64>,
    /// What writes given room and not answered yet will add, per sandbox: part of its charge
    /// until its records next change (the answer applied), so that writes in flight at once
    /// cannot each take the same room.
    reserved: HashMap<ObjectRef, u64>,
    excess: u64,
    held: u64,
}

/// The part of `bytes` charged against the total.
fn excess(bytes: u64) -> u64 {
    bytes.saturating_sub(ALLOWANCE)
}

fn len(s: &str) -> u64 {
    s.len() as u64
}

fn opt(s: &Option<String>) -> u64 {
    s.as_deref().map_or(0, len)
}

/// The bytes the cache holds of a status (what the policy wrote of it).
pub(crate) fn status_bytes(status: &SandboxStatus) -> u64 {
    let conditions: u64 = status
        .conditions
        .iter()
        .map(|c| len(&c.kind) + len(&c.reason) + len(&c.message) + RECORD_BYTES)
        .sum();
    conditions
        + opt(&status.pod_ip)
        + opt(&status.rootfs_pvc)
        + opt(&status.workspace_pvc)
        + opt(&status.claimed_member)
        + opt(&status.service_fqdn)
        + opt(&status.shutdown_in)
        + RECORD_BYTES
}

/// The bytes of a NetworkPolicy's or Service's record, the spec digest the policy chose
/// among them.
pub(crate) fn object_bytes(name: &str, spec_hash: Option<&str>) -> u64 {
    len(name) + spec_hash.map_or(0, len)
}

fn observed_object(o: &Option<ObservedObject>) -> u64 {
    o.as_ref()
        .map_or(0, |o| object_bytes(&o.name, o.spec_hash.as_deref()))
}

/// The bytes the cache holds of a sandbox's children.
pub(super) fn children_bytes(children: &Children) -> u64 {
    let versions: u64 = children
        .versions
        .iter()
        .map(|(key, held)| {
            len(key) + len(&held.version) + held.owner.as_deref().map_or(0, len) + RECORD_BYTES
        })
        .sum();
    let pvcs: u64 = children
        .pvcs
        .iter()
        .map(|(name, held)| len(name) + held.owner_uid.as_deref().map_or(0, len))
        .sum();
    let pod = children
        .pod
        .as_ref()
        .map_or(0, |p| len(&p.name) + opt(&p.ip));
    versions
        + pvcs
        + pod
        + observed_object(&children.network_policy)
        + observed_object(&children.service)
}

impl Charges {
    /// `key`'s records now hold `records`: what was reserved for it is in them or gone.
    pub(super) fn set_records(&mut self, key: &ObjectRef, records: u64) {
        self.reserved.remove(key);
        self.set(key, records);
    }

    /// Reserves for `key` the growth from `before` to `after` bytes that [`Self::room`] allowed.
    pub(super) fn reserve(&mut self, key: &ObjectRef, before: u64, after: u64) {
        let grown = after.saturating_sub(before);
        if grown == 0 {
            return;
        }
        *self.reserved.entry(key.clone()).or_default() += grown;
        let now = self.of(key) + grown;
        self.set(key, now);
    }

    /// `key` now holds `bytes`.
    fn set(&mut self, key: &ObjectRef, bytes: u64) {
        let before = match bytes {
            0 => self.per.remove(key),
            _ => self.per.insert(key.clone(), bytes),
        }
        .unwrap_or(0);
        self.excess = self.excess - excess(before) + excess(bytes);
        self.held = self.held - before + bytes;
    }

    /// What `key` holds now.
    pub(super) fn of(&self, key: &ObjectRef) -> u64 {
        self.per.get(key).copied().unwrap_or(0)
    }

    /// All sandboxes' charges past their allowance, and all they hold.
    pub(super) fn totals(&self) -> (u64, u64) {
        (self.excess, self.held)
    }

    /// Whether `key` may go from holding `before` bytes to `after`: within its own bound,
    /// and, if it adds to the total, within the total's. Shrinking is always allowed.
    pub(super) fn room(
        &self,
        bounds: &ObjectBounds,
        key: &ObjectRef,
        before: u64,
        after: u64,
    ) -> Result<(), Past> {
        if after <= before {
            return Ok(());
        }
        let held = self.of(key) - before.min(self.of(key)) + after;
        if held > bounds.per_sandbox {
            return Err(Past::Sandbox {
                held,
                bound: bounds.per_sandbox,
            });
        }
        let added = excess(held).saturating_sub(excess(self.of(key)));
        let total = self.excess + added;
        if added > 0 && total > bounds.total {
            return Err(Past::Total {
                held: total,
                bound: bounds.total,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_counts_only_what_lies_past_each_allowance() {
        let mut charges = Charges::default();
        let (a, b) = (ObjectRef::new("ns", "a"), ObjectRef::new("ns", "b"));
        charges.set_records(&a, 1_000);
        charges.set_records(&b, ALLOWANCE + 500);
        assert_eq!(charges.totals(), (500, 1_000 + ALLOWANCE + 500));
        charges.set_records(&b, 10);
        assert_eq!(charges.totals(), (0, 1_010));
        // A write given room counts until its answer is in the records.
        charges.reserve(&a, 0, ALLOWANCE);
        assert_eq!(charges.totals(), (1_000, 1_010 + ALLOWANCE));
        charges.set_records(&a, 0);
        charges.set_records(&b, 0);
        assert_eq!(charges.totals(), (0, 0));
        assert!(charges.per.is_empty() && charges.reserved.is_empty());
    }

    #[test]
    fn growth_past_either_bound_is_refused_and_shrinking_never_is() {
        let bounds = ObjectBounds {
            total: 10_000,
            per_sandbox: ALLOWANCE + 8_000,
        };
        let mut charges = Charges::default();
        let (a, b) = (ObjectRef::new("ns", "a"), ObjectRef::new("ns", "b"));
        charges.set_records(&a, ALLOWANCE + 6_000);
        // Within its own bound, within the total.
        assert_eq!(charges.room(&bounds, &b, 0, ALLOWANCE + 3_000), Ok(()));
        // Past the total: 6,000 + 5,000 charged.
        assert_eq!(
            charges.room(&bounds, &b, 0, ALLOWANCE + 5_000),
            Err(Past::Total {
                held: 11_000,
                bound: 10_000
            })
        );
        // Past its own bound.
        assert!(matches!(
            charges.room(&bounds, &a, 100, 3_000),
            Err(Past::Sandbox { .. })
        ));
        // Within its allowance, a sandbox is never held back by the total.
        charges.set_records(&b, ALLOWANCE + 4_000);
        assert_eq!(
            charges.room(&bounds, &ObjectRef::new("ns", "c"), 0, 2_000),
            Ok(())
        );
        // Smaller than what it replaces: always.
        assert_eq!(charges.room(&bounds, &a, 5_000, 10), Ok(()));
        let message = Past::Total {
            held: 11_000,
            bound: 10_000,
        }
        .words();
        assert!(message.contains("--max-policy-object-bytes"), "{message}");
    }
}
