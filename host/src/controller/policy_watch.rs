//! The `--policy` file, watched: at start, the first module admission accepts (the process
//! waits, serving its probes and writing nothing, until one is); then hot swap, replacing the
//! running policy when the file's content changes. A ConfigMap volume swaps a symlink rather
//! than writing the file, so file events only say "look now": what decides is the content's
//! digest (and, with verification keys, the signature's). A new module goes through the
//! admission pipeline ([`crate::admission`]: signature, compile, contract, self-test) before it
//! replaces the running one between reconciles; a module that fails any step is refused and the
//! running one stays.
//!
//! The parts: [`PolicyFile`] yields a [`Look`] at each event or poll; [`Verdicts`] judges each
//! look (admission, told once per distinct refusal, on `/readyz` and in the metrics);
//! [`first_admitted`] waits on any stream of looks for the first module to run, and
//! [`PolicyWatcher`] swaps each later one into the running manager.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt as _};
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use super::health::{ActivePolicy, Health};
use super::manager::ControllerManager;
use crate::admission::Refused as SwapRefused;
pub use crate::admission::sha256_hex;
use crate::admission::{Admission, Admitted, Candidate};
use crate::metrics::Metrics;

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

/// What one look at a source of policy modules found.
#[derive(Debug)]
pub enum Look {
    /// A module as read, for admission to judge.
    Module(Candidate),
    /// Refused unread (reason `file`): not a file to read, past its bound, a read that did not
    /// end.
    Refused(SwapRefused),
    /// Not there or not readable now (missing, not permitted): the next look may find it.
    Unreadable(String),
}

/// The file of `run --policy` (and its `.sig`), looked at on each change in its folder and
/// every poll interval.
pub struct PolicyFile {
    path: PathBuf,
    admission: Admission,
    poll_interval: Duration,
    metrics: Arc<Metrics>,
    /// Started by the first [`PolicyFile::next`].
    watching: Option<Watching>,
}

/// The file events and the poll, once started.
struct Watching {
    changed: mpsc::Receiver<()>,
    poll: tokio::time::Interval,
    /// Kept for its events; `None` when the folder cannot be watched (polling only).
    _watcher: Option<notify::RecommendedWatcher>,
}

impl PolicyFile {
    /// The file at `path`, read with `admission`'s bounds and looked at also every
    /// `poll_interval`, in case a file event was missed; `metrics` counts the looks.
    pub fn new(
        path: PathBuf,
        admission: Admission,
        poll_interval: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            path,
            admission,
            poll_interval,
            metrics,
            watching: None,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Reads the module (and its signature) now.
    pub async fn look(&self) -> Look {
        match self.admission.read(&self.path).await {
            Ok(candidate) => Look::Module(candidate),
            Err(error) if error.is_refusal() => Look::Refused(SwapRefused::File(error)),
            Err(error) => Look::Unreadable(error.to_string()),
        }
    }

    /// Waits for a change in the file's folder or the next poll (the first comes at once),
    /// then looks; `None` once `shutdown` changes.
    pub async fn next(&mut self, shutdown: &mut watch::Receiver<bool>) -> Option<Look> {
        let watching = match &mut self.watching {
            Some(watching) => watching,
            None => self.watching.insert(self.start()),
        };
        let checks = &self.metrics.policy_file_checks;
        tokio::select! {
            _ = watching.changed.recv() => checks.with_label_values(&["event"]).inc(),
            _ = watching.poll.tick() => checks.with_label_values(&["poll"]).inc(),
            _ = shutdown.changed() => return None,
        }
        Some(self.look().await)
    }

    /// The looks [`PolicyFile::next`] gives, as a stream that ends at shutdown.
    pub fn looks(
        &mut self,
        shutdown: watch::Receiver<bool>,
    ) -> impl Stream<Item = Look> + Send + '_ {
        futures_util::stream::unfold((self, shutdown), |(file, mut shutdown)| async move {
            let look = file.next(&mut shutdown).await?;
            Some((look, (file, shutdown)))
        })
    }

    fn start(&self) -> Watching {
        let (events, changed) = mpsc::channel::<()>(1);
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
        let watcher = match watcher {
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
        Watching {
            changed,
            poll,
            _watcher: watcher,
        }
    }
}

/// What [`Verdicts::judge`] found.
#[derive(Debug)]
pub(crate) enum Judged {
    /// A new module that passed every step.
    Admitted {
        /// The module.
        admitted: Admitted,
        /// Its sha256, hex.
        digest: String,
    },
    /// Nothing to run: the outcome to report.
    Not(SwapOutcome),
}

/// Judges the looks of a source: each new module goes through admission, and each refusal or
/// unreadable file is counted, logged and put on `/readyz` once, however often it is seen
/// again. The same module (with the same signature) as the last refused one is not checked
/// again.
pub struct Verdicts {
    admission: Admission,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// The module digest and signature digest of the last refusal.
    last_refused: Option<(String, Option<String>)>,
    last_unreadable: Option<String>,
}

impl Verdicts {
    /// Verdicts by `admission`, counted in `metrics` and told on `health`'s `/readyz`.
    pub fn new(admission: Admission, metrics: Arc<Metrics>, health: Arc<Health>) -> Self {
        Self {
            admission,
            metrics,
            health,
            last_refused: None,
            last_unreadable: None,
        }
    }

    /// Judges `look`; `running` is the digest of the module running now, `None` before the
    /// first (what a refusal leaves running is said accordingly).
    pub(crate) async fn judge(&mut self, look: Look, running: Option<&str>) -> Judged {
        let stays = match running {
            Some(_) => "the running one stays",
            None => "nothing is reconciled until a module is admitted",
        };
        let candidate = match look {
            Look::Module(candidate) => candidate,
            Look::Refused(why) => {
                // Refused unread, told once per distinct refusal, and looked at again at the
                // next event or poll.
                let said = why.to_string();
                if self.last_unreadable.as_deref() != Some(said.as_str()) {
                    self.metrics
                        .policy_swaps
                        .with_label_values(&[why.reason()])
                        .inc();
                    tracing::warn!(
                        reason = why.reason(),
                        "policy module refused, {stays}: {said}"
                    );
                    self.health
                        .set_policy_file(Some(format!("refused ({}): {said}", why.reason())));
                    self.last_unreadable = Some(said);
                }
                return Judged::Not(SwapOutcome::Refused {
                    digest: String::new(),
                    why,
                });
            }
            Look::Unreadable(why) => {
                if self.last_unreadable.as_deref() != Some(why.as_str()) {
                    tracing::warn!("policy file unreadable, {stays}: {why}");
                    self.health
                        .set_policy_file(Some(format!("unreadable: {why}")));
                    self.last_unreadable = Some(why.clone());
                }
                return Judged::Not(SwapOutcome::Unreadable(why));
            }
        };
        self.last_unreadable = None;
        let identity = candidate.identity();
        let digest = identity.0.clone();
        // The running module stays whatever its signature file does now: it was verified when
        // it was admitted. A refusal is not sticky: a new signature is a new identity.
        if running == Some(digest.as_str()) {
            self.health.set_policy_file(None);
            return Judged::Not(SwapOutcome::Unchanged);
        }
        if self.last_refused.as_ref() == Some(&identity) {
            return Judged::Not(SwapOutcome::Unchanged);
        }
        let what = candidate.what.clone();
        tracing::info!(digest = %digest, path = %what, "new policy module: checking it");
        match self.admission.admit(candidate).await {
            Ok(admitted) => {
                self.health.set_policy_file(None);
                self.last_refused = None;
                let (compile, check, self_test) = module_times(&admitted);
                let steps = [
                    ("compile", compile),
                    ("check", check),
                    ("self_test", self_test),
                ];
                for (step, took) in steps {
                    self.metrics
                        .policy_admission_duration
                        .with_label_values(&[step])
                        .observe(took.as_secs_f64());
                }
                Judged::Admitted { admitted, digest }
            }
            Err(why) => {
                self.metrics
                    .policy_swaps
                    .with_label_values(&[why.reason()])
                    .inc();
                tracing::warn!(
                    digest = %digest,
                    path = %what,
                    reason = why.reason(),
                    "policy module refused, {stays}: {why}"
                );
                self.health.set_policy_file(Some(format!(
                    "refused ({}): {what}, sha256 {digest}: {why}",
                    why.reason()
                )));
                self.last_refused = Some(identity);
                Judged::Not(SwapOutcome::Refused { digest, why })
            }
        }
    }
}

/// Waits for the first module admission accepts among what `looks` yields, each judged by
/// `verdicts` (a refusal told once, on `/readyz` too); `None` when `looks` ends first (at
/// shutdown). Any source of modules can feed it (several merged with
/// `futures_util::stream::select`): the first admitted one, whichever its source, is the
/// module the controller starts with.
pub async fn first_admitted<S>(looks: S, verdicts: &mut Verdicts) -> Option<Admitted>
where
    S: Stream<Item = Look>,
{
    let mut looks = std::pin::pin!(looks);
    while let Some(look) = looks.next().await {
        if let Judged::Admitted { admitted, .. } = verdicts.judge(look, None).await {
            return Some(admitted);
        }
    }
    None
}

/// Watches `run --policy`'s file and swaps in each new module admission accepts.
pub struct PolicyWatcher {
    file: PolicyFile,
    verdicts: Verdicts,
    manager: Arc<ControllerManager>,
}

impl PolicyWatcher {
    /// A watcher of `path` that swaps modules into `manager`.
    pub fn new(
        path: PathBuf,
        admission: Admission,
        manager: Arc<ControllerManager>,
        poll_interval: Duration,
    ) -> Self {
        let file = PolicyFile::new(
            path,
            admission.clone(),
            poll_interval,
            manager.metrics.clone(),
        );
        let verdicts = Verdicts::new(admission, manager.metrics.clone(), manager.health.clone());
        Self::resume(file, verdicts, manager)
    }

    /// The watcher of a file already watched (since [`first_admitted`] waited on it), keeping
    /// what its verdicts remember, now swapping into `manager`.
    pub fn resume(file: PolicyFile, verdicts: Verdicts, manager: Arc<ControllerManager>) -> Self {
        Self {
            file,
            verdicts,
            manager,
        }
    }

    /// Watches until shutdown.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        while let Some(look) = self.file.next(&mut shutdown).await {
            self.apply(look, Instant::now()).await;
        }
    }

    /// Reads the file (and its signature) and swaps if the content is new and passes every step.
    pub async fn check(&mut self) -> SwapOutcome {
        let started = Instant::now();
        let look = self.file.look().await;
        self.apply(look, started).await
    }

    async fn apply(&mut self, look: Look, started: Instant) -> SwapOutcome {
        let active = self.manager.policy.current();
        let (admitted, digest) = match self.verdicts.judge(look, Some(active.digest())).await {
            Judged::Admitted { admitted, digest } => (admitted, digest),
            Judged::Not(outcome) => return outcome,
        };
        let loaded = module_times(&admitted);
        let module = admitted.module;
        let next = ActivePolicy::of(&module);
        let build = module.tier().describe();
        let previous = ActivePolicy::of(&self.manager.policy.replace(module));
        announce_swap(&self.manager, &previous, &next);
        let took = started.elapsed();
        tracing::info!(
            name = %next.name,
            version = %next.version,
            digest = %next.digest,
            replaced = %previous.digest,
            key = %admitted.key.as_ref().map_or_else(|| "none".to_string(), |k| k.describe()),
            took_ms = millis(took),
            compile_ms = millis(loaded.0),
            check_ms = millis(loaded.1),
            self_test_ms = millis(loaded.2),
            "policy swapped, serving its {build} build; reconciling every object under it"
        );
        self.manager.requeue_all();
        SwapOutcome::Applied { digest, took }
    }
}

/// A module's admission steps: its compile, its check (contract, pre-instantiation,
/// `describe`) and its self-test.
fn module_times(admitted: &Admitted) -> (Duration, Duration, Duration) {
    let loaded = admitted.module.loaded_in();
    (loaded.compile, loaded.check, admitted.self_tested_in)
}

/// A duration in milliseconds, for a log field.
fn millis(took: Duration) -> f64 {
    took.as_secs_f64() * 1e3
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

    use crate::admission::SignatureFile;
    use crate::signing::KeyRing;
    use cubepod_policy_host::runtime::{PolicyEngine, RuntimeConfig};

    fn verdicts() -> (Verdicts, Arc<Metrics>, Arc<Health>) {
        let engine = PolicyEngine::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .expect("an engine");
        let (metrics, health) = (Arc::new(Metrics::new()), Arc::new(Health::default()));
        let admission = Admission::new(engine, KeyRing::default());
        let verdicts = Verdicts::new(admission, metrics.clone(), health.clone());
        (verdicts, metrics, health)
    }

    fn garbage() -> Candidate {
        Candidate {
            what: "/etc/cubepod/policy/policy.wasm".to_string(),
            bytes: Arc::from(&b"not a component"[..]),
            signature: SignatureFile::NotChecked,
        }
    }

    fn refusals(metrics: &Metrics, reason: &str) -> u64 {
        metrics.policy_swaps.with_label_values(&[reason]).get()
    }

    /// Before any module runs, each refusal and unreadable file is told on `/readyz` (the file,
    /// the digest, the reason) and counted once however often it is seen; a source that ends
    /// first gives no module.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn while_waiting_each_refusal_is_told_once_with_the_file_and_why() {
        let (mut verdicts, metrics, health) = verdicts();
        let missing = "/etc/cubepod/policy/policy.wasm: No such file or directory".to_string();
        let looks = futures_util::stream::iter([
            Look::Unreadable(missing.clone()),
            Look::Unreadable(missing.clone()),
        ]);
        assert!(first_admitted(looks, &mut verdicts).await.is_none());
        assert_eq!(health.policy_file(), Some(format!("unreadable: {missing}")));

        let looks = futures_util::stream::iter([Look::Module(garbage()), Look::Module(garbage())]);
        assert!(first_admitted(looks, &mut verdicts).await.is_none());
        let said = health.policy_file().expect("/readyz says why");
        let digest = sha256_hex(b"not a component");
        assert!(
            said.starts_with("refused (compile): /etc/cubepod/policy/policy.wasm, sha256 "),
            "{said}"
        );
        assert!(said.contains(&digest), "{said}");
        assert_eq!(
            refusals(&metrics, "compile"),
            1,
            "the same module is told once"
        );
        assert_eq!(health.policy(), None, "nothing runs");
    }

    /// The first module admission accepts is the one returned, after refusals, and `/readyz`
    /// no longer tells the refusal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_admissible_module_ends_the_wait() {
        let (mut verdicts, metrics, health) = verdicts();
        let looks = futures_util::stream::iter([
            Look::Module(garbage()),
            Look::Module(Candidate::builtin()),
            Look::Module(garbage()),
        ]);
        let admitted = first_admitted(looks, &mut verdicts)
            .await
            .expect("the built-in module is admitted");
        assert_eq!(admitted.module.digest(), Candidate::builtin().digest());
        assert_eq!(health.policy_file(), None);
        assert_eq!(refusals(&metrics, "compile"), 1);
    }

    /// A swap to a third module while the second's optimised (Cranelift) build still
    /// compiles: the manager ends on the third module, on its own optimised build; whatever
    /// becomes of the second's build, it never replaces the module running.
    #[cfg(target_arch = "x86_64")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_swap_during_the_last_swaps_optimised_compile_ends_on_the_newer_module() {
        use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
        use cubepod_policy_host::runtime::{Compile, DEFAULT_POLICY, Optimisations, Tier};

        use crate::controller::manager::ManagerConfig;

        let settled = |engine: &PolicyEngine| {
            let Optimisations {
                applied,
                dropped,
                failed,
            } = engine.optimisations();
            applied + dropped + failed
        };
        let until_settled = async |engine: &PolicyEngine, n: u64| {
            let started = Instant::now();
            while settled(engine) < n {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "never settled"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let variant = |n: u8| {
            let mut bytes = DEFAULT_POLICY.to_vec();
            bytes.extend_from_slice(&[0, 3, 1, b'n', n]);
            bytes
        };
        let engine = PolicyEngine::new(RuntimeConfig {
            cache_dir: None,
            compile: Compile::Tiered,
            ..RuntimeConfig::default()
        })
        .expect("an engine");
        let first = engine.load(DEFAULT_POLICY).expect("the default policy");
        until_settled(&engine, 1).await;
        let manager = ControllerManager::new(
            MemoryCluster::new(MemoryClusterConfig::instant()),
            first,
            ManagerConfig::for_namespaces(vec!["ns".to_string()]),
            Arc::new(Metrics::new()),
            Arc::new(Health::default()),
        );
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("policy.wasm");
        let admission = Admission::new(engine.clone(), KeyRing::default());
        let mut watcher = PolicyWatcher::new(
            path.clone(),
            admission,
            manager.clone(),
            Duration::from_secs(600),
        );

        std::fs::write(&path, variant(2)).expect("the second module written");
        let outcome = watcher.check().await;
        assert!(
            matches!(outcome, SwapOutcome::Applied { .. }),
            "{outcome:?}"
        );
        assert_eq!(manager.policy.current().tier(), Tier::Baseline);
        std::fs::write(&path, variant(3)).expect("the third module written");
        let outcome = watcher.check().await;
        assert!(
            matches!(outcome, SwapOutcome::Applied { .. }),
            "{outcome:?}"
        );

        // The second's build and the third's, whichever order they end in.
        until_settled(&engine, 3).await;
        let running = manager.policy.current();
        assert_eq!(running.digest(), sha256_hex(&variant(3)));
        assert_eq!(running.tier(), Tier::Optimised);
        assert_eq!(engine.optimisations().failed, 0);
    }

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
