//! Hot swap: `run --policy PATH` watches the file and replaces the running policy when its
//! content changes. A ConfigMap volume swaps a symlink rather than writing the file, so file
//! events only say "look now": what decides is the content's digest (and, with verification
//! keys, the signature's). A new module goes through the admission pipeline that admitted the
//! first one ([`crate::admission`]: signature, compile, contract, self-test) before it replaces
//! the running one between reconciles; a module that fails any step is refused and the running
//! one stays.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use super::health::ActivePolicy;
use super::manager::ControllerManager;
use crate::admission::Admission;
use crate::admission::Refused as SwapRefused;
pub use crate::admission::sha256_hex;

/// What a check of the file found.
#[derive(Debug)]
pub enum SwapOutcome {
    /// Same content as the running module, or as one refused before (with the same signature).
    Unchanged,
    /// A new module, admitted and running now.
    Applied {
        /// Its sha256, hex.
        digest: String,
        /// How long the check took, from the read to the swap.
        took: Duration,
    },
    /// A new module that admission refused; the running module stays.
    Refused {
        /// Its sha256, hex.
        digest: String,
        /// Why it was refused.
        why: SwapRefused,
    },
    /// The file could not be read; the running module stays.
    Unreadable(String),
}

/// Watches `run --policy`'s file and swaps in each new module admission accepts.
pub struct PolicyWatcher {
    pub(crate) path: PathBuf,
    pub(crate) admission: Admission,
    pub(crate) manager: Arc<ControllerManager>,
    /// A check also runs this often, in case a file event was missed.
    pub(crate) poll_interval: Duration,
    /// The module digest and signature digest of the last refusal.
    last_refused: Option<(String, Option<String>)>,
    last_unreadable: Option<String>,
}

impl PolicyWatcher {
    /// A watcher of `path` that swaps modules into `manager`.
    pub fn new(
        path: PathBuf,
        admission: Admission,
        manager: Arc<ControllerManager>,
        poll_interval: Duration,
    ) -> Self {
        Self {
            path,
            admission,
            manager,
            poll_interval,
            last_refused: None,
            last_unreadable: None,
        }
    }

    /// Watches until shutdown.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let (events, mut changed) = mpsc::channel::<()>(1);
        // Watch the folder, not the file: a ConfigMap update replaces the `..data` symlink
        // beside it, and an editor may replace the file by a rename. The module's signature
        // (`<module>.sig`) lives in the same folder, so its changes wake the check too.
        let folder = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if may_change_the_module(&event) {
                let _ = events.try_send(());
            }
        })
        .and_then(|mut w| w.watch(&folder, RecursiveMode::NonRecursive).map(|()| w));
        let _watcher = match watcher {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(
                    folder = %folder.display(),
                    %error,
                    poll = ?self.poll_interval,
                    "cannot watch the policy's folder; polling only"
                );
                None
            }
        };
        let mut poll = tokio::time::interval(self.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let checks = &self.manager.metrics.policy_file_checks;
        let (by_event, by_poll) = (
            checks.with_label_values(&["event"]),
            checks.with_label_values(&["poll"]),
        );
        loop {
            tokio::select! {
                _ = changed.recv() => by_event.inc(),
                _ = poll.tick() => by_poll.inc(),
                _ = shutdown.changed() => return,
            }
            self.check().await;
        }
    }

    /// Reads the file (and its signature) and swaps if the content is new and passes every step.
    pub async fn check(&mut self) -> SwapOutcome {
        let started = Instant::now();
        let candidate = match self.admission.read(&self.path).await {
            Ok(candidate) => candidate,
            Err(error) if error.is_refusal() => {
                // Not a file to read (a FIFO, a directory, past its bound, a read that did not
                // end): refused unread, told once per distinct refusal, and looked at again at
                // the next event or poll.
                let why = SwapRefused::File(error);
                let said = why.to_string();
                if self.last_unreadable.as_deref() != Some(said.as_str()) {
                    self.manager
                        .metrics
                        .policy_swaps
                        .with_label_values(&[why.reason()])
                        .inc();
                    tracing::warn!(
                        reason = why.reason(),
                        "policy module refused, the running one stays: {said}"
                    );
                    self.manager
                        .health
                        .set_policy_file(Some(format!("refused ({}): {said}", why.reason())));
                    self.last_unreadable = Some(said);
                }
                return SwapOutcome::Refused {
                    digest: String::new(),
                    why,
                };
            }
            Err(error) => {
                let why = error.to_string();
                if self.last_unreadable.as_deref() != Some(why.as_str()) {
                    tracing::warn!("policy file unreadable, the running module stays: {why}");
                    self.manager
                        .health
                        .set_policy_file(Some(format!("unreadable: {why}")));
                    self.last_unreadable = Some(why.clone());
                }
                return SwapOutcome::Unreadable(why);
            }
        };
        self.last_unreadable = None;
        let identity = candidate.identity();
        let digest = identity.0.clone();
        let active = self.manager.policy.current();
        // The running module stays whatever its signature file does now: it was verified when
        // it was admitted. A refusal is not sticky: a new signature is a new identity.
        if digest == active.digest() {
            self.manager.health.set_policy_file(None);
            return SwapOutcome::Unchanged;
        }
        if self.last_refused.as_ref() == Some(&identity) {
            return SwapOutcome::Unchanged;
        }
        tracing::info!(digest = %digest, path = %self.path.display(), "new policy module: checking it");
        let checked = self.admission.admit(candidate).await;
        let metrics = &self.manager.metrics;
        match checked {
            Ok(admitted) => {
                let module = admitted.module;
                let next = ActivePolicy::of(&module);
                let previous = ActivePolicy::of(&self.manager.policy.replace(module));
                announce_swap(&self.manager, &previous, &next);
                self.manager.health.set_policy_file(None);
                self.last_refused = None;
                let took = started.elapsed();
                tracing::info!(
                    name = %next.name,
                    version = %next.version,
                    digest = %next.digest,
                    replaced = %previous.digest,
                    key = %admitted.key.as_ref().map_or_else(|| "none".to_string(), |k| k.describe()),
                    ?took,
                    "policy swapped; reconciling every object under it"
                );
                self.manager.requeue_all();
                SwapOutcome::Applied { digest, took }
            }
            Err(why) => {
                metrics
                    .policy_swaps
                    .with_label_values(&[why.reason()])
                    .inc();
                tracing::warn!(
                    digest = %digest,
                    reason = why.reason(),
                    "policy module refused, the running one stays: {why}"
                );
                self.manager.health.set_policy_file(Some(format!(
                    "refused ({}): sha256 {digest}: {why}",
                    why.reason()
                )));
                self.last_refused = Some(identity);
                SwapOutcome::Refused { digest, why }
            }
        }
    }
}

/// What a swap of the stable module changes besides the slot: the active policy's metric
/// series, the swap counted, and `/readyz`. Said once, for the file watcher and the rollouts.
pub(crate) fn announce_swap(
    manager: &ControllerManager,
    previous: &ActivePolicy,
    next: &ActivePolicy,
) {
    let metrics = &manager.metrics;
    let _ = metrics.policy_info.remove_label_values(&[
        previous.name.as_str(),
        previous.version.as_str(),
        previous.digest.as_str(),
    ]);
    metrics
        .policy_info
        .with_label_values(&[
            next.name.as_str(),
            next.version.as_str(),
            next.digest.as_str(),
        ])
        .set(1);
    metrics.policy_swaps.with_label_values(&["applied"]).inc();
    manager.health.set_policy(next.clone());
}

/// Whether a file event in the policy's folder can mean a new module or signature. Opening and
/// reading a file are events too (inotify's `IN_OPEN`, which notify always asks for), and each
/// check opens the file: waking on those, every check would wake the next, and an idle
/// controller would spend a core reading its own policy. A write that ends (`IN_CLOSE_WRITE`)
/// does count: it is when a file written in place is whole. An error or a rescan may have lost
/// events, so it wakes a check.
fn may_change_the_module(event: &notify::Result<notify::Event>) -> bool {
    match event {
        Ok(event) => match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) => false,
            _ => true,
        },
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode};

    use super::*;

    fn event(kind: EventKind) -> notify::Result<notify::Event> {
        Ok(notify::Event::new(kind).add_path(PathBuf::from("/etc/cubepod/policy.wasm")))
    }

    #[test]
    fn reading_the_file_does_not_wake_a_check_and_changing_it_does() {
        let reads = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ];
        for kind in reads {
            assert!(!may_change_the_module(&event(kind)), "{kind:?}");
        }
        let changes = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
            EventKind::Other,
        ];
        for kind in changes {
            assert!(may_change_the_module(&event(kind)), "{kind:?}");
        }
        let lost = Err(notify::Error::generic("queue overflow"));
        assert!(may_change_the_module(&lost));
    }
}
