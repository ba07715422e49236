//! The garbage collector: when an owner is removed, its dependents are deleted in the
//! background (each by the usual delete, so their own finalizers and pods' grace hold).

use super::meta;
use super::state::State;
use cubepod_kube::ApiErrorKind;

impl State {
    /// Deletes the objects whose ownerReferences name `owner_uid` and no other live owner.
    pub(super) fn collect_dependents(&mut self, owner_uid: &str) {
        for key in self.store.dependents_of(owner_uid) {
            let Some(dependent) = self.store.get(&key) else {
                continue;
            };
            // As the GC controller: an object with another owner still present is kept.
            let owned_elsewhere = meta::owner_uids(dependent)
                .into_iter()
                .any(|uid| uid != owner_uid && self.store.contains_uid(uid));
            if owned_elsewhere {
                continue;
            }
            // Removed already by an earlier step of this cascade is fine; nothing else fails.
            if let Err(error) = self.delete(&key)
                && !error.is(ApiErrorKind::NotFound)
            {
                tracing::warn!(%key, %error, "memory cluster: garbage collection failed");
            }
        }
    }
}
