//! A rollback that undoes: what a canary's candidate wrote of each Sandbox (its children, its
//! status), recorded while it serves, and handed back to the stable module when it stops
//! serving without being promoted (a gate breached, the rollout deleted or replaced).
//!
//! The stable module trusts what it finds: an `ensure-*` of a child that exists is success, and
//! a status carries from one pass to the next. So what the candidate wrote would outlive it (a
//! Pod of its image, a Secret of its token, a pause until a date of its choosing). The host
//! therefore keeps, per Sandbox the candidate wrote, which kinds it wrote ([`Marks`]); once the
//! candidate is gone, the next pass of the stable module over that Sandbox first takes those
//! away (`Reconciler::undo_candidate`) so that the stable module writes them again, as if the
//! candidate had never run. PVCs are kept: they hold the user's data.

use std::collections::HashMap;
use std::sync::Mutex;

use cubepod_kube::Resource;
use cubepod_policy_host::model::ObjectRef;

/// The most Sandboxes a canary keeps a record of: those its candidate touched and their
/// progress (`policy.rs`), and what it wrote of each (here), so that its records stay bounded
/// (a few MiB at most) however many objects come and go during a long step.
pub(crate) const MAX_TOUCHED: usize = 1 << 18;

/// The kinds of a Sandbox's writes the candidate made, as bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marks(u8);

impl Marks {
    pub(crate) const POD: Marks = Marks(1);
    pub(crate) const SECRET: Marks = Marks(1 << 1);
    pub(crate) const NETWORK_POLICY: Marks = Marks(1 << 2);
    pub(crate) const SERVICE: Marks = Marks(1 << 3);
    pub(crate) const STATUS: Marks = Marks(1 << 4);

    /// The mark of a write of `resource`; none for what is not undone (PVCs, the user's data).
    pub(crate) fn of(resource: Resource) -> Marks {
        match resource {
            Resource::Pod => Self::POD,
            Resource::Secret => Self::SECRET,
            Resource::NetworkPolicy => Self::NETWORK_POLICY,
            Resource::Service => Self::SERVICE,
            Resource::PersistentVolumeClaim
            | Resource::Sandbox
            | Resource::PodWarmPool
            | Resource::Event
            | Resource::Lease
            | Resource::PolicyRollout
            | Resource::ConfigMap => Marks::default(),
        }
    }

    pub(crate) fn has(self, mark: Marks) -> bool {
        self.0 & mark.0 != 0
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn with(self, mark: Marks) -> Marks {
        Marks(self.0 | mark.0)
    }

    /// What the marks undo, in words: `the Pod, the Secret and the status`.
    pub(crate) fn words(self) -> String {
        let named: Vec<&str> = [
            (Self::POD, "the Pod"),
            (Self::SECRET, "the Secret"),
            (Self::NETWORK_POLICY, "the NetworkPolicy"),
            (Self::SERVICE, "the Service"),
            (Self::STATUS, "the status"),
        ]
        .into_iter()
        .filter(|(mark, _)| self.has(*mark))
        .map(|(_, name)| name)
        .collect();
        match named.split_last() {
            None => String::new(),
            Some((last, [])) => (*last).to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        }
    }
}

/// Sandboxes and what was written of each, by the Sandbox's uid (a Sandbox made again under
/// the same name is another object, none of whose writes the candidate made). At most
/// [`MAX_TOUCHED`] Sandboxes, as a canary's `touched`.
#[derive(Default)]
pub(crate) struct Written {
    marks: Mutex<HashMap<ObjectRef, (String, Marks)>>,
}

impl Written {
    /// Records that `marks` of the Sandbox `target` (of `uid`) were written.
    pub(crate) fn record(&self, target: &ObjectRef, uid: &str, marks: Marks) {
        if marks.is_empty() {
            return;
        }
        let mut held = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((held_uid, held_marks)) = held.get_mut(target) {
            if held_uid == uid {
                *held_marks = held_marks.with(marks);
            } else {
                *held_uid = uid.to_string();
                *held_marks = marks;
            }
            return;
        }
        if held.len() < MAX_TOUCHED {
            held.insert(target.clone(), (uid.to_string(), marks));
        }
    }

    /// Everything recorded, which this record no longer holds.
    fn drain(&self) -> HashMap<ObjectRef, (String, Marks)> {
        std::mem::take(&mut *self.marks.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Adds everything `other` recorded to this record, and empties `other`.
    pub(crate) fn take_all(&self, other: &Written) {
        for (target, (uid, marks)) in other.drain() {
            self.record(&target, &uid, marks);
        }
    }

    /// What was recorded of `target` if it is still the object of `uid`, no longer held. The
    /// record of an object of another uid (gone, made again) is dropped.
    pub(crate) fn take(&self, target: &ObjectRef, uid: &str) -> Option<Marks> {
        let mut held = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let (held_uid, marks) = held.remove(target)?;
        (held_uid == uid).then_some(marks)
    }

    /// Forgets `target`: it is gone or being deleted, and its cleanup deletes every child.
    pub(crate) fn forget(&self, target: &ObjectRef) {
        self.marks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(target);
    }

    /// How many Sandboxes are recorded.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.marks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_gather_per_object_and_are_taken_once_for_its_uid() {
        let written = Written::default();
        let a = ObjectRef::new("ns", "a");
        written.record(&a, "uid-a", Marks::POD);
        written.record(&a, "uid-a", Marks::STATUS);
        written.record(&a, "uid-a", Marks::of(Resource::PersistentVolumeClaim));
        let undo = Written::default();
        undo.take_all(&written);
        assert_eq!(written.len(), 0);
        assert_eq!(
            undo.take(&a, "uid-other"),
            None,
            "another object of that name"
        );
        undo.record(&a, "uid-a", Marks::SECRET);
        let marks = undo.take(&a, "uid-a");
        assert_eq!(marks, Some(Marks::SECRET));
        assert_eq!(undo.take(&a, "uid-a"), None);
        assert_eq!(
            Marks::POD.with(Marks::SECRET).with(Marks::STATUS).words(),
            "the Pod, the Secret and the status"
        );
    }
}
