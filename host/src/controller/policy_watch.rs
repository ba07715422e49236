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

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use super::health::ActivePolicy;
use super::manager::ControllerManager;
use super::queue::WorkKey;
use crate::admission::Admission;
pub use crate::admission::{Refused as SwapRefused, sha256_hex};

/// What a check of the file found.
#[derive(Debug)]
pub enum SwapOutcome {
    /// Same content as the running module, or as one refused before (with the same signature).
    Unchanged,
    Applied {
        digest: String,
        took: Duration,
    },
    Refused {
        digest: String,
        why: SwapRefused,
    },
    /// The file could not be read; the running module stays.
    Unreadable(String),
}

pub struct PolicyWatcher {
    pub path: PathBuf,
    pub admission: Admission,
    pub manager: Arc<ControllerManager>,
    /// A check also runs this often, in case a file event was missed.
    pub poll_interval: Duration,
    /// The module digest and signature digest of the last refusal.
    last_refused: Option<(String, Option<String>)>,
    last_unreadable: Option<String>,
}

impl PolicyWatcher {
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
        let watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
            let _ = events.try_send(());
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
        loop {
            tokio::select! {
                _ = changed.recv() => {}
                _ = poll.tick() => {}
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
            Err(error) => {
                let why = format!("{}: {error}", self.path.display());
                if self.last_unreadable.as_deref() != Some(why.as_str()) {
                    tracing::warn!("policy file unreadable, the running module stays: {why}");
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
        if digest == active.digest() || self.last_refused.as_ref() == Some(&identity) {
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
                self.manager.health.set_policy(next.clone());
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
                self.requeue_all();
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
                self.last_refused = Some(identity);
                SwapOutcome::Refused { digest, why }
            }
        }
    }

    /// Every object is reconciled again under the new policy, at the queue's normal rate.
    fn requeue_all(&self) {
        let cache = &self.manager.cache;
        for key in cache.sandbox_keys() {
            self.manager.queue.add(WorkKey::Sandbox(key));
        }
        for key in cache.pool_keys() {
            self.manager.queue.add(WorkKey::Pool(key));
        }
    }
}
