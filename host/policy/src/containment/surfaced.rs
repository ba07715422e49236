//! Which refusals the user was already told of, per object.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::model::ObjectRef;

/// Refusals already surfaced as a Warning Event, per object: a level-triggered policy repeats
/// its refused output on every pass, and the user needs to read it once, not every second.
#[derive(Default)]
pub struct Surfaced {
    seen: Mutex<HashMap<ObjectRef, VecDeque<String>>>,
}

/// Distinct refusals remembered per object; older ones may be surfaced again.
const SURFACED_PER_OBJECT: usize = 16;

impl Surfaced {
    /// True the first time `refusal` is seen for `target` (since it was forgotten).
    pub fn first(&self, target: &ObjectRef, refusal: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let known = seen.entry(target.clone()).or_default();
        if known.iter().any(|r| r == refusal) {
            return false;
        }
        if known.len() == SURFACED_PER_OBJECT {
            known.pop_front();
        }
        known.push_back(refusal.to_string());
        true
    }

    /// The object is gone: forget what was surfaced for it.
    pub fn forget(&self, target: &ObjectRef) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(target);
    }

    /// Objects remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_surfaced_once_per_object() {
        let surfaced = Surfaced::default();
        let a = ObjectRef::new("ns", "a");
        assert!(surfaced.first(&a, "r1"));
        assert!(!surfaced.first(&a, "r1"));
        assert!(surfaced.first(&a, "r2"));
        assert!(surfaced.first(&ObjectRef::new("ns", "b"), "r1"));
        surfaced.forget(&a);
        assert!(surfaced.first(&a, "r1"));
        assert_eq!(surfaced.len(), 2);
    }
}
