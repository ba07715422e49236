//! The active policy module: swapped atomically between reconciles, so that a reconcile in
//! flight finishes on the module it started with. During a canary (a `PolicyRollout`) the slot
//! holds a candidate beside the stable module and a weight: each Sandbox or pool goes to the
//! candidate when a stable hash of its uid falls under the weight, so that its assignment only
//! grows with the weight, and each reconcile picks its module once, at its start.
//!
//! The slot has one source of its stable module, fixed when it is made ([`PolicySource`]): the
//! `--policy` file, or the PolicyRollouts. Only with the latter does [`PolicySlot::rollouts`]
//! hand out the handle through which a canary, a shadow or a promotion changes the slot, so
//! that a rollout cannot change the module a file serves, whatever the timing.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::Notify;

use super::action::{Action, ReconcileError};
use super::export::Export;
use super::undo::{MAX_TOUCHED, Marks};
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::bindings::KubeError;
use cubepod_policy_host::runtime::{PolicyModule, RuntimeError};

tokio::task_local! {
    /// The module the reconcile on this task picked at its start.
    static PICKED: Arc<PolicyModule>;
}

/// Where the stable module comes from: one source for the life of the process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PolicySource {
    /// The built-in module at start, then what PolicyRollouts promote.
    #[default]
    Rollouts,
    /// `run --policy FILE`: the file's modules only, hot-swapped; PolicyRollouts are refused.
    File(PathBuf),
}

/// The running policy module, swapped whole when a new one is admitted, and the candidate of a
/// canary in progress, if any.
pub struct PolicySlot {
    current: RwLock<Arc<PolicyModule>>,
    canary: RwLock<Option<Arc<Canary>>>,
    shadow: RwLock<Option<Arc<super::shadow::Shadow>>>,
    source: PolicySource,
    /// What candidates that no longer serve (rolled back, not promoted) wrote of each
    /// Sandbox, for the stable module's next pass over it to write again.
    pub(crate) undo: super::undo::Written,
}

/// What PolicyRollouts may do to a slot whose source they are: start and end canaries and
/// shadows, promote. Given only by [`PolicySlot::rollouts`].
pub(crate) struct RolloutSwap<'a>(&'a PolicySlot);

impl PolicySlot {
    pub(crate) fn new(module: PolicyModule, source: PolicySource) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(module)),
            canary: RwLock::new(None),
            shadow: RwLock::new(None),
            source,
            undo: super::undo::Written::default(),
        })
    }

    /// The `--policy` file that is the only source of the stable module, if there is one.
    pub(crate) fn file_source(&self) -> Option<&Path> {
        match &self.source {
            PolicySource::File(path) => Some(path),
            PolicySource::Rollouts => None,
        }
    }

    /// The handle through which rollouts change the slot; `Err` with the file when the
    /// `--policy` file is its source.
    pub(crate) fn rollouts(&self) -> Result<RolloutSwap<'_>, &Path> {
        match &self.source {
            PolicySource::File(path) => Err(path),
            PolicySource::Rollouts => Ok(RolloutSwap(self)),
        }
    }

    /// The shadow run in progress, if any.
    pub(crate) fn shadow(&self) -> Option<Arc<super::shadow::Shadow>> {
        self.shadow
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The stable module: the one running for every object outside a canary's share.
    pub fn current(&self) -> Arc<PolicyModule> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes `module` the active one and returns the one it replaced: the file's swap.
    pub(crate) fn replace(&self, module: PolicyModule) -> Arc<PolicyModule> {
        self.replace_shared(Arc::new(module))
    }

    fn replace_shared(&self, module: Arc<PolicyModule>) -> Arc<PolicyModule> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut current, module)
    }

    fn end_canary(&self) -> Option<Arc<Canary>> {
        self.canary
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// The canary in progress, if any.
    pub(crate) fn canary(&self) -> Option<Arc<Canary>> {
        self.canary
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The module that reconciles the object of `uid` now, and whether it is the candidate.
    pub(crate) fn pick(&self, uid: &str) -> (Arc<PolicyModule>, Option<Arc<Canary>>) {
        if let Some(canary) = self.canary()
            && canary.covers(uid)
        {
            return (canary.module.clone(), Some(canary));
        }
        (self.current(), None)
    }

    /// Runs `reconcile` with `module` as the module of every policy call it makes.
    pub(crate) async fn scope<F: Future>(module: Arc<PolicyModule>, reconcile: F) -> F::Output {
        PICKED.scope(module, reconcile).await
    }

    /// Records that the reconcile on this task wrote `marks` of the Sandbox `target` (of
    /// `uid`), if it runs on a canary's candidate. A candidate that stopped serving meanwhile
    /// hands what it wrote to [`Self::undo`] at once.
    pub(crate) fn candidate_wrote(&self, target: &ObjectRef, uid: &str, marks: Marks) {
        let Ok(module) = PICKED.try_with(Arc::clone) else {
            return;
        };
        if marks.is_empty() || Arc::ptr_eq(&module, &self.current()) {
            return;
        }
        let Some(canary) = self.canary() else {
            // Ended between this reconcile's pick and its write: not promoted, or the module
            // would be the stable one.
            self.undo.record(target, uid, marks);
            return;
        };
        if Arc::ptr_eq(&canary.module, &module) {
            canary.written.record(target, uid, marks);
        } else {
            self.undo.record(target, uid, marks);
        }
    }

    /// Whether the reconcile on this task runs on the stable module.
    pub(crate) fn stable_this_pass(&self) -> bool {
        Arc::ptr_eq(&self.for_this_pass(), &self.current())
    }

    /// The module of the reconcile on this task: the one it picked at its start, else (`policy
    /// test`, the reaper, the self-test) the stable one.
    pub(crate) fn for_this_pass(&self) -> Arc<PolicyModule> {
        PICKED
            .try_with(Arc::clone)
            .unwrap_or_else(|_| self.current())
    }
}

impl RolloutSwap<'_> {
    /// Runs `shadow`'s candidate beside the stable module from now on (`None`: no more).
    pub(crate) fn set_shadow(&self, shadow: Option<Arc<super::shadow::Shadow>>) {
        *self.0.shadow.write().unwrap_or_else(|p| p.into_inner()) = shadow;
    }

    /// Makes `module` the stable one (a promotion); the one it replaced.
    pub(crate) fn replace_shared(&self, module: Arc<PolicyModule>) -> Arc<PolicyModule> {
        self.0.replace_shared(module)
    }

    /// Starts a canary of `module` at weight 0 (no object on it yet), replacing any other.
    pub(crate) fn start_canary(&self, module: Arc<PolicyModule>) -> Arc<Canary> {
        let canary = Arc::new(Canary {
            module,
            weight: AtomicU8::new(0),
            stats: Mutex::default(),
            breach: Notify::new(),
            written: super::undo::Written::default(),
        });
        let replaced = self
            .0
            .canary
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .replace(canary.clone());
        // A candidate replaced was not promoted: what it wrote is undone, unless it is the
        // same module starting over.
        if let Some(replaced) = replaced {
            if replaced.module.digest() == canary.module.digest() {
                canary.written.take_all(&replaced.written);
            } else {
                self.0.undo.take_all(&replaced.written);
            }
        }
        canary
    }

    /// Ends the canary with every object back on the stable module, which writes again what
    /// the candidate wrote (`PolicySlot::undo`).
    pub(crate) fn end_canary(&self) -> Option<Arc<Canary>> {
        let canary = self.0.end_canary()?;
        self.0.undo.take_all(&canary.written);
        Some(canary)
    }

    /// Ends the canary by making its candidate the stable module; the one it replaced.
    pub(crate) fn promote_canary(&self) -> Option<Arc<PolicyModule>> {
        let canary = self.0.end_canary()?;
        Some(self.0.replace_shared(canary.module.clone()))
    }
}

/// The percent bucket of an object: the first 8 bytes of the sha256 of its uid, as a big-endian
/// u64, mod 100. The same uid always falls in the same bucket, so that an object on the
/// candidate at weight w stays on it at every weight above w.
pub fn bucket(uid: &str) -> u8 {
    (uid_hash(uid) % 100) as u8
}

/// The first 8 bytes of the sha256 of `uid`, as a big-endian u64.
fn uid_hash(uid: &str) -> u64 {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(uid.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A candidate module reconciling the objects whose bucket is under its weight, and what it and
/// the stable module did over the current step.
pub(crate) struct Canary {
    pub(crate) module: Arc<PolicyModule>,
    weight: AtomicU8,
    stats: Mutex<CanaryStats>,
    /// Woken by a failure of the candidate's, so that a gate is judged at once.
    pub(crate) breach: Notify,
    /// What the candidate wrote of each Sandbox: undone if it is not promoted.
    pub(crate) written: super::undo::Written,
}

impl Canary {
    /// Percent of objects on the candidate.
    pub(crate) fn weight(&self) -> u8 {
        self.weight.load(Ordering::Acquire)
    }

    /// Sets the share of objects on the candidate, at most 100, and starts a new window.
    pub(crate) fn set_weight(&self, weight: u8) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.window = Window::default();
        stats.step += 1;
        self.weight.store(weight.min(100), Ordering::Release);
    }

    /// Whether the object of `uid` is on the candidate.
    pub(crate) fn covers(&self, uid: &str) -> bool {
        bucket(uid) < self.weight()
    }

    /// Counts one call of `export` by the candidate (`candidate`) or the stable module, made
    /// for the object of `uid` (none: the reaper's page), and what it did for the sandbox's
    /// progress, if anything.
    pub(crate) fn record(
        &self,
        uid: Option<&str>,
        candidate: bool,
        export: Option<Export>,
        outcome: Outcome,
        progress: Option<Progress>,
    ) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        if candidate && let Some(uid) = uid {
            stats.touch(uid);
        }
        if let (Some(uid), Some(progress)) = (uid, progress) {
            stats.progress(uid, candidate, progress);
        }
        let counts = if candidate {
            &mut stats.window.candidate
        } else {
            &mut stats.window.stable
        };
        counts.add(outcome);
        if let Some(export) = export {
            counts.calls[export as usize] += 1;
            stats.calls[usize::from(candidate)][export as usize] += 1;
        }
        drop(stats);
        if candidate && outcome.failed() {
            self.breach.notify_one();
        }
    }

    /// The counts of the step in progress, with each side's progress as its sandboxes' last
    /// passes left it, a sandbox not Ready yet counted as started `now` minus its creation.
    pub(crate) fn window(&self, now: i64) -> Window {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let mut window = stats.window;
        window.stable.canary_calls = stats.calls[0];
        window.candidate.canary_calls = stats.calls[1];
        for (&(candidate, _), progress) in &stats.progress {
            let counts = if candidate {
                &mut window.candidate
            } else {
                &mut window.stable
            };
            counts.count_progress(progress, progress.step == stats.step, now);
        }
        window
    }

    /// How many objects the candidate has reconciled since the canary started ([`MAX_TOUCHED`]
    /// at most).
    pub(crate) fn touched(&self) -> usize {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .touched
            .len()
    }
}

#[derive(Default)]
struct CanaryStats {
    window: Window,
    /// The objects the candidate reconciled (their uids' hashes), [`MAX_TOUCHED`] at most.
    touched: std::collections::HashSet<u64>,
    /// Each sandbox's progress as the last pass of each module left it, by (candidate, uid
    /// hash), over the whole canary: a step at 100% still has the stable module's share of
    /// the steps before to be compared with. [`MAX_TOUCHED`] entries at most.
    progress: std::collections::HashMap<(bool, u64), Progress>,
    /// Which step (window) is in progress: 1 for the first.
    step: u32,
    /// Calls of each export over the whole canary: the stable module's, the candidate's.
    calls: [[u64; 4]; 2],
}

impl CanaryStats {
    /// Counts `uid` as touched, unless [`MAX_TOUCHED`] objects already are.
    fn touch(&mut self, uid: &str) {
        if self.touched.len() < MAX_TOUCHED {
            self.touched.insert(uid_hash(uid));
        }
    }

    /// Keeps `progress` as the sandbox's latest on that side, stamped with the step.
    fn progress(&mut self, uid: &str, candidate: bool, mut progress: Progress) {
        let key = (candidate, uid_hash(uid));
        if self.progress.len() >= MAX_TOUCHED && !self.progress.contains_key(&key) {
            return;
        }
        progress.step = self.step;
        self.progress.insert(key, progress);
    }
}

/// What a pass of a module did for its sandbox's progress: a sandbox to run, Ready after the
/// pass or not; or one being deleted, its cleanup done (the finalizer removed) or not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Progress {
    pub(crate) cleanup: bool,
    pub(crate) done: bool,
    /// The sandbox's creationTimestamp, for the time a sandbox not Ready yet has waited.
    pub(crate) created_at: Option<i64>,
    /// The step the pass was in.
    step: u32,
}

impl Progress {
    /// A sandbox to run, `ready` after the pass.
    pub(crate) fn start(ready: bool, created_at: Option<i64>) -> Self {
        Self {
            cleanup: false,
            done: ready,
            created_at,
            step: 0,
        }
    }

    /// A sandbox being deleted, its cleanup `done` or not.
    pub(crate) fn cleanup(done: bool) -> Self {
        Self {
            cleanup: true,
            done,
            created_at: None,
            step: 0,
        }
    }
}

/// What one reconcile came to, as the gates count it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// It got through; `Some` with the seconds from creation to Ready when its status write
    /// first reported the sandbox Ready.
    Ok(Option<f64>),
    /// The policy trapped, ran past its deadline or its memory.
    Trap,
    /// Its output or a write it asked for was refused.
    Refusal,
    /// Any other failure.
    Error,
}

impl Outcome {
    /// The outcome of a reconcile that returned `result`, with the Ready time it reported.
    pub(crate) fn of(result: &Result<Action, ReconcileError>, ready_seconds: Option<f64>) -> Self {
        match result {
            Ok(_) => Outcome::Ok(ready_seconds),
            Err(error) => Self::of_error(error),
        }
    }

    /// The outcome of a call that failed with `error`.
    pub(crate) fn of_error(error: &ReconcileError) -> Self {
        match error {
            // The controller's shared memory budget is not the module's doing.
            ReconcileError::Runtime(RuntimeError::MemoryBudget { .. }) => Outcome::Error,
            ReconcileError::Runtime(_) => Outcome::Trap,
            ReconcileError::Refused(_)
            | ReconcileError::Budget(_)
            | ReconcileError::Guest(KubeError::Refused(_)) => Outcome::Refusal,
            _ => Outcome::Error,
        }
    }

    fn failed(self) -> bool {
        !matches!(self, Outcome::Ok(_))
    }
}

/// One module's reconciles over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) reconciles: u64,
    pub(crate) traps: u64,
    pub(crate) refusals: u64,
    pub(crate) errors: u64,
    /// Sum and number of creation-to-Ready times, seconds; a sandbox of the step not Ready
    /// yet counts with the time it has waited so far.
    pub(crate) ready_seconds: f64,
    pub(crate) readied: u64,
    /// Calls of each export, in [`Export::ALL`]'s order: over the window, and over the
    /// whole canary.
    pub(crate) calls: [u64; 4],
    pub(crate) canary_calls: [u64; 4],
    /// Sandboxes to run, and those of them Ready, as the module's last pass left each.
    pub(crate) started: u64,
    pub(crate) ready: u64,
    /// Sandboxes being deleted, and those whose cleanup is done.
    pub(crate) cleanups: u64,
    pub(crate) cleaned: u64,
}

impl Counts {
    /// One sandbox's progress counted; one not Ready yet that the step's passes saw
    /// (`this_step`) also counts in the mean time to Ready with the time it has waited.
    fn count_progress(&mut self, progress: &Progress, this_step: bool, now: i64) {
        if progress.cleanup {
            self.cleanups += 1;
            self.cleaned += u64::from(progress.done);
            return;
        }
        self.started += 1;
        self.ready += u64::from(progress.done);
        if !progress.done
            && this_step
            && let Some(waited) = super::startup::since(progress.created_at, now)
        {
            self.ready_seconds += waited;
            self.readied += 1;
        }
    }

    /// The share of `done` of `of`, if there is any.
    pub(crate) fn share(done: u64, of: u64) -> Option<f64> {
        (of > 0).then(|| done as f64 / of as f64)
    }

    fn add(&mut self, outcome: Outcome) {
        self.reconciles += 1;
        match outcome {
            Outcome::Ok(Some(seconds)) => {
                self.ready_seconds += seconds;
                self.readied += 1;
            }
            Outcome::Ok(None) => {}
            Outcome::Trap => self.traps += 1,
            Outcome::Refusal => self.refusals += 1,
            Outcome::Error => self.errors += 1,
        }
    }

    /// `n` per reconcile; 0 with no reconcile.
    pub(crate) fn ratio(&self, n: u64) -> f64 {
        if self.reconciles == 0 {
            0.0
        } else {
            n as f64 / self.reconciles as f64
        }
    }

    /// The mean creation-to-Ready time, if any sandbox became Ready.
    pub(crate) fn mean_ready(&self) -> Option<f64> {
        (self.readied > 0).then(|| self.ready_seconds / self.readied as f64)
    }
}

/// Both modules' counts over the same window (a canary step).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Window {
    pub(crate) candidate: Counts,
    pub(crate) stable: Counts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_stable_and_spread() {
        assert_eq!(bucket("a"), bucket("a"));
        let mut seen = [0u32; 100];
        for n in 0..10_000 {
            seen[usize::from(bucket(&format!("uid-{n}")))] += 1;
        }
        // Each percent holds about 100 of 10,000: none empty, none three times its share.
        assert!(seen.iter().all(|&n| n > 0 && n < 300), "{seen:?}");
    }

    /// An object on the candidate at one weight is on it at every greater weight, and the
    /// share on it follows the weight.
    #[test]
    fn assignment_only_grows_with_the_weight() {
        let uids: Vec<String> = (0..2_000).map(|n| format!("uid-{n}")).collect();
        let mut previous: Vec<&String> = Vec::new();
        for weight in [0u8, 1, 10, 25, 50, 99, 100] {
            let on: Vec<&String> = uids.iter().filter(|u| bucket(u) < weight).collect();
            assert!(previous.iter().all(|u| on.contains(u)), "weight {weight}");
            let share = on.len() as f64 / uids.len() as f64 * 100.0;
            assert!((share - f64::from(weight)).abs() < 5.0, "{weight}: {share}");
            previous = on;
        }
        assert_eq!(previous.len(), uids.len());
    }

    #[test]
    fn touched_counts_each_object_once_up_to_its_bound() {
        let mut stats = CanaryStats::default();
        stats.touch("a");
        stats.touch("a");
        stats.touch("b");
        assert_eq!(stats.touched.len(), 2);
        for n in 0..MAX_TOUCHED + 10 {
            stats.touch(&format!("uid-{n}"));
        }
        assert_eq!(stats.touched.len(), MAX_TOUCHED);
    }

    #[test]
    fn counts_give_ratios_and_a_mean() {
        let mut counts = Counts::default();
        assert_eq!(counts.ratio(counts.traps), 0.0);
        for outcome in [
            Outcome::Ok(Some(2.0)),
            Outcome::Ok(Some(4.0)),
            Outcome::Trap,
            Outcome::Refusal,
        ] {
            counts.add(outcome);
        }
        assert_eq!(counts.reconciles, 4);
        assert_eq!(counts.ratio(counts.traps), 0.25);
        assert_eq!(counts.ratio(counts.refusals), 0.25);
        assert_eq!(counts.mean_ready(), Some(3.0));
    }
}
