//! The fault-injection suite's driver: a [`Scenario`] runs the real controller against the fake
//! API server with fault rules and disruptions (kills, failovers, token rotations, expired
//! watches), drives a workload of sandboxes through their lifecycle, waits for quiet, and
//! checks convergence and metrics. Every failure message carries the seed that reproduces
//! the scenario's choices (`CUBEPOD_FAULT_SEED` overrides the default seed).

pub mod checker;
pub mod fleet;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use cubepod_kube::Resource;
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use self::fleet::Fleet;
use self::workload::{Steps, WorkloadConfig};
use crate::apiserver::{FakeApiServer, FaultAction, FaultRule, KubeconfigAuth};
use crate::convergence::{TOKEN, fake_server};
use crate::faulty_policy;

/// How long pods take to start and stop in the fake cluster: `CUBEPOD_FAULT_POD_DELAY_MS`,
/// else 10 ms.
pub fn pod_delay() -> Duration {
    Duration::from_millis(env_count("CUBEPOD_FAULT_POD_DELAY_MS", 10) as u64)
}

/// How long a controller may take to start and lead.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// The seed of a scenario: `CUBEPOD_FAULT_SEED` when set (decimal or 0x-hex), else `default`.
pub fn seed(default: u64) -> u64 {
    std::env::var("CUBEPOD_FAULT_SEED")
        .ok()
        .and_then(|text| parse_u64(&text))
        .unwrap_or(default)
}

/// A count from the environment (`CUBEPOD_SOAK_SANDBOXES`, ...), else `default`.
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(default)
}

fn parse_u64(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// One fault-injection run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    /// Plain sandboxes driven through the lifecycle (forks come on top).
    pub sandboxes: usize,
    /// Sandboxes of each of trap-, loop- and oom- (runs the faulty policy when not zero).
    pub faulty_each: usize,
    /// Fault rules of the API server, in force from the first reconcile to the end.
    pub rules: Vec<FaultRule>,
    /// Controller processes: two elect a leader.
    pub replicas: usize,
    /// SIGKILLs of the reconciling replica during the workload, each followed by a restart.
    pub kills: u32,
    /// Bearer-token rotations (a kubeconfig with `tokenFile`).
    pub token_rotations: u32,
    /// Times every watch is ended with its history compacted (the resume gets 410 Gone).
    pub watch_expiries: u32,
    /// More `run` flags.
    pub flags: Vec<String>,
    /// Check `cubepod_kube_requests_total` against every answer the server gave: only for one
    /// process that is never killed and never gives up on a request.
    pub exact_accounting: bool,
    /// Chance that a workload step does not wait for the previous one.
    pub race: f64,
    /// Between the starts of two sandboxes' plans.
    pub stagger: Duration,
    /// How long convergence may take once the workload is done.
    pub patience: Duration,
}

impl Scenario {
    /// A scenario of `sandboxes` sandboxes with no faults: add them by field.
    pub fn new(name: &str, default_seed: u64, sandboxes: usize) -> Self {
        Self {
            name: name.to_string(),
            seed: seed(default_seed),
            sandboxes,
            faulty_each: 0,
            rules: Vec::new(),
            replicas: 1,
            kills: 0,
            token_rotations: 0,
            watch_expiries: 0,
            flags: Vec::new(),
            exact_accounting: false,
            race: 0.2,
            stagger: Duration::from_millis(15),
            patience: Duration::from_secs(120),
        }
    }

    pub fn rule(mut self, rule: FaultRule) -> Self {
        self.rules.push(rule);
        self
    }

    pub fn flag(mut self, flag: &str) -> Self {
        self.flags.push(flag.to_string());
        self
    }
}

/// What a scenario did.
#[derive(Clone, Debug)]
pub struct Report {
    pub name: String,
    pub seed: u64,
    /// Sandboxes created (plain, forks and faulty).
    pub sandboxes: usize,
    pub steps: Steps,
    /// Injected faults that fired (Status, Delay, Reset, EndWatchAfter).
    pub faults_fired: u64,
    /// Injected fault answers by HTTP status (`None`: reset), as the server logged them.
    pub fault_answers: Vec<(Option<u16>, usize)>,
    pub kills: u32,
    pub crashes: u32,
    pub token_rotations: u32,
    pub watch_expiries: u32,
    pub stalls: usize,
    /// Child creates that met AlreadyExists at the API (the object was there: a create that
    /// went through after its caller gave up, or one a killed process made).
    pub already_exists: usize,
    /// Writes the API refused with a genuine Conflict (a stale resourceVersion).
    pub conflicts: usize,
    /// From the end of the workload to convergence.
    pub converge: Duration,
    pub elapsed: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.steps;
        write!(
            f,
            "scenario {} (seed {:#x}): {} sandboxes (created {}, paused {}, resumed {}, reset {}, \
             forked {}, deleted {}, raced {}); faults fired {} {:?}; kills {}, crashes {}, \
             token rotations {}, watch expiries {}; stalled waits {}; API answers AlreadyExists {}, \
             Conflict {}; converged {:.1}s after the workload, {:.1}s in all; nothing lost",
            self.name,
            self.seed,
            self.sandboxes,
            s.created,
            s.paused,
            s.resumed,
            s.reset,
            s.forked,
            s.deleted,
            s.raced,
            self.faults_fired,
            self.fault_answers,
            self.kills,
            self.crashes,
            self.token_rotations,
            self.watch_expiries,
            self.stalls,
            self.already_exists,
            self.conflicts,
            self.converge.as_secs_f64(),
            self.elapsed.as_secs_f64(),
        )
    }
}

/// The disruptions done so far, shared with the thread that does them.
#[derive(Default)]
struct Done {
    token_rotations: u32,
    watch_expiries: u32,
}

enum Disruption {
    Kill,
    RotateToken,
    ExpireWatches,
}

impl Scenario {
    /// Runs the scenario; panics, naming the seed, when anything did not converge.
    pub fn run(self) -> Report {
        let started = Instant::now();
        let fake = fake_server(pod_delay(), self.seed);
        let dir = tempfile::tempdir().expect("temp dir");
        let token_file = dir.path().join("token");
        let auth = if self.token_rotations > 0 {
            write_atomically(&token_file, TOKEN);
            KubeconfigAuth::TokenFile(token_file.clone())
        } else {
            KubeconfigAuth::Token(TOKEN.to_string())
        };
        let kubeconfig = fake
            .write_kubeconfig(dir.path(), &auth)
            .expect("kubeconfig");
        let mut flags = vec!["--concurrency=16".to_string()];
        if self.faulty_each > 0 {
            flags.push(format!("--policy={}", faulty_policy().display()));
            flags.push("--guest-deadline=200ms".to_string());
            flags.push("--guest-memory-mib=16".to_string());
        } else {
            // The deadline counts the time a call holds its thread, and a thread the OS does
            // not run still counts: on this 2-core machine under a parallel build the default
            // policy was once seen past 1 s.
            flags.push("--guest-deadline=10s".to_string());
        }
        flags.extend(self.flags.iter().cloned());
        let fleet = Fleet::start(kubeconfig, flags, self.replicas, START_PATIENCE);
        let fleet = Mutex::new(fleet);
        for rule in &self.rules {
            fake.faults().add(rule.clone());
        }
        // The watches opened at the start reopen under the rules.
        fake.cluster().end_watches();
        fake.clear_requests();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("workload runtime");
        let config = WorkloadConfig {
            seed: self.seed,
            sandboxes: self.sandboxes,
            faulty_each: self.faulty_each,
            stagger: self.stagger,
            step_patience: Duration::from_secs(60),
            race: self.race,
        };
        let stop = AtomicBool::new(false);
        let done = Mutex::new(Done::default());
        let ledger = std::thread::scope(|scope| {
            let disruptor = scope.spawn(|| self.disrupt(&fake, &fleet, &token_file, &stop, &done));
            let ledger = runtime.block_on(workload::run(fake.cluster(), config));
            stop.store(true, Ordering::Release);
            if let Err(panic) = disruptor.join() {
                std::panic::resume_unwind(panic);
            }
            ledger
        });
        let workload_done = Instant::now();
        let mut fleet = fleet.into_inner().unwrap_or_else(PoisonError::into_inner);
        fleet.restore();
        let done = done.into_inner().unwrap_or_else(PoisonError::into_inner);

        let fail = |what: &str, violations: &[String], fleet: &Fleet| -> ! {
            let shown: Vec<&String> = violations.iter().take(40).collect();
            let logs =
                std::env::temp_dir().join(format!("cubepod-faults-{}-{:x}", self.name, self.seed));
            let logs = match fleet.dump_logs(&logs) {
                Ok(dir) => format!("controller logs in {}", dir.display()),
                Err(error) => format!("controller logs not kept: {error}"),
            };
            panic!(
                "scenario {} (seed {:#x}, rerun with CUBEPOD_FAULT_SEED={:#x}): {what}: {} \
                 violations, the first {}:\n  {}\nstalled workload waits ({}): {:?}\nfaults \
                 fired: {}; kills {}, crashes {}, token rotations {}, watch expiries {}\n{logs}\n{}",
                self.name,
                self.seed,
                self.seed,
                violations.len(),
                shown.len(),
                shown
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  "),
                ledger.stalls.len(),
                ledger.stalls.iter().take(10).collect::<Vec<_>>(),
                fake.faults().fired(),
                fleet.kills,
                fleet.crashes,
                done.token_rotations,
                done.watch_expiries,
                fleet.log_tail(25),
            )
        };

        // Convergence, with the faults still in force.
        let cluster = fake.cluster();
        let deadline = workload_done + self.patience;
        loop {
            fleet.revive();
            let violations = checker::check(&cluster, &ledger);
            if violations.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                fail(
                    &format!("not converged {:?} after the workload", self.patience),
                    &violations,
                    &fleet,
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let converge = workload_done.elapsed();

        // Quiet: no write for a while, and still converged.
        wait_quiet(&fake, Duration::from_secs(2), Duration::from_secs(30));
        let violations = checker::check(&cluster, &ledger);
        if !violations.is_empty() {
            fail("converged, then moved away", &violations, &fleet);
        }

        // Metrics: the gauges follow within a heartbeat or two.
        let metrics_deadline = Instant::now() + Duration::from_secs(15);
        let text = loop {
            fleet.wait_leader(START_PATIENCE);
            let text = fleet.metrics().unwrap_or_default();
            let violations = checker::check_metrics(&text, &ledger, self.faulty_each > 0);
            if violations.is_empty() {
                break text;
            }
            if Instant::now() > metrics_deadline {
                fail("metrics untrue once quiet", &violations, &fleet);
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        if self.exact_accounting && fleet.starts == 1 && fleet.crashes == 0 {
            let violations = checker::check_request_accounting(&text, &fake.requests());
            if !violations.is_empty() {
                fail("requests miscounted", &violations, &fleet);
            }
        }

        if std::env::var_os("CUBEPOD_FAULT_KEEP_LOGS").is_some() {
            let dir =
                std::env::temp_dir().join(format!("cubepod-faults-{}-{:x}", self.name, self.seed));
            if let Ok(dir) = fleet.dump_logs(&dir) {
                eprintln!(
                    "scenario {}: controller logs in {}",
                    self.name,
                    dir.display()
                );
            }
        }
        let mut answers: std::collections::BTreeMap<Option<u16>, usize> = Default::default();
        for rule in &self.rules {
            if let FaultAction::Status { code, .. } = rule.action {
                answers.entry(Some(code)).or_default();
            }
            if rule.action == FaultAction::Reset {
                answers.entry(None).or_default();
            }
        }
        for record in fake.requests() {
            if let Some(count) = answers.get_mut(&record.status) {
                *count += 1;
            }
        }
        Report {
            name: self.name.clone(),
            seed: self.seed,
            sandboxes: ledger.entries.len(),
            steps: ledger.steps.clone(),
            faults_fired: fake.faults().fired(),
            fault_answers: answers.into_iter().collect(),
            kills: fleet.kills,
            crashes: fleet.crashes,
            token_rotations: done.token_rotations,
            watch_expiries: done.watch_expiries,
            stalls: ledger.stalls.len(),
            already_exists: writes_failed(&fake, cubepod_kube::ApiErrorKind::AlreadyExists),
            conflicts: writes_failed(&fake, cubepod_kube::ApiErrorKind::Conflict),
            converge,
            elapsed: started.elapsed(),
        }
    }

    /// Does the scenario's disruptions at seeded random moments until the workload ends.
    fn disrupt(
        &self,
        fake: &FakeApiServer,
        fleet: &Mutex<Fleet>,
        token_file: &Path,
        stop: &AtomicBool,
        done: &Mutex<Done>,
    ) {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0xD152);
        let mut plan = Vec::new();
        plan.extend((0..self.kills).map(|_| Disruption::Kill));
        plan.extend((0..self.token_rotations).map(|_| Disruption::RotateToken));
        plan.extend((0..self.watch_expiries).map(|_| Disruption::ExpireWatches));
        // A seeded shuffle.
        for i in (1..plan.len()).rev() {
            plan.swap(i, rng.random_range(0..=i));
        }
        let sleep = |millis: u64| -> bool {
            let until = Instant::now() + Duration::from_millis(millis);
            while Instant::now() < until {
                if stop.load(Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            true
        };
        let lock = || fleet.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rotation = 0;
        for disruption in plan {
            if !sleep(rng.random_range(300..1500)) {
                return;
            }
            lock().revive();
            match disruption {
                Disruption::Kill => {
                    let mut fleet = lock();
                    let victim = fleet
                        .leader()
                        .unwrap_or_else(|| rng.random_range(0..fleet.replicas()));
                    fleet.kill(victim);
                    drop(fleet);
                    // One replica: restarted at once, as a Deployment would. Two: the other
                    // takes over when the lease expires; the victim comes back as a follower.
                    let down = if self.replicas > 1 {
                        rng.random_range(500..2500)
                    } else {
                        rng.random_range(0..300)
                    };
                    std::thread::sleep(Duration::from_millis(down));
                    lock().restart(victim);
                }
                Disruption::RotateToken => {
                    rotation += 1;
                    let token = format!("rotated-token-{rotation}-{:016x}", rng.random::<u64>());
                    let lag = Duration::from_millis(rng.random_range(20..300));
                    // Mostly as the kubelet does it (the file first, the old token valid for a
                    // while); sometimes the server moves first and requests meet a 401.
                    if rng.random_bool(0.7) {
                        write_atomically(token_file, &token);
                        std::thread::sleep(lag);
                        fake.set_token(Some(&token));
                    } else {
                        fake.set_token(Some(&token));
                        std::thread::sleep(lag);
                        write_atomically(token_file, &token);
                    }
                    done.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .token_rotations += 1;
                }
                Disruption::ExpireWatches => {
                    let cluster = fake.cluster();
                    cluster.compact();
                    cluster.end_watches();
                    done.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .watch_expiries += 1;
                }
            }
        }
    }
}

/// Writes `text` to `path` by renaming a new file over it, as the kubelet swaps a projected
/// token.
fn write_atomically(path: &Path, text: &str) {
    let new: PathBuf = path.with_extension("new");
    std::fs::write(&new, format!("{text}\n")).expect("write token");
    std::fs::rename(&new, path).expect("swap token");
}

/// Writes of children and sandboxes the API refused with `kind`.
fn writes_failed(fake: &FakeApiServer, kind: cubepod_kube::ApiErrorKind) -> usize {
    fake.cluster()
        .writes()
        .iter()
        .filter(|w| w.resource != Resource::Event && w.error == Some(kind))
        .count()
}

/// Waits until the cluster saw no write but Events for `quiet`; gives up after `patience`.
fn wait_quiet(fake: &FakeApiServer, quiet: Duration, patience: Duration) {
    let cluster = fake.cluster();
    let count = || {
        cluster
            .writes()
            .iter()
            .filter(|w| w.resource != Resource::Event)
            .count()
    };
    let deadline = Instant::now() + patience;
    let mut last = count();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = count();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}

/// Rules for the fault classes, as the suite uses them.
pub mod rules {
    use super::*;

    pub fn status(code: u16, reason: &str, retry_after: Option<u64>) -> FaultAction {
        FaultAction::Status {
            code,
            reason: reason.to_string(),
            retry_after,
        }
    }

    /// 409 Conflict on creates (not AlreadyExists: a server that says an object exists when
    /// it does not is lying; real AlreadyExists answers come from creates that did happen,
    /// see the slow and kill scenarios).
    pub fn conflict_on_create(p: f64) -> FaultRule {
        FaultRule::new(status(409, "Conflict", None))
            .method(Method::POST)
            .probability(p)
    }

    /// 409 Conflict on patches (metadata and status).
    pub fn conflict_on_update(p: f64) -> FaultRule {
        FaultRule::new(status(409, "Conflict", None))
            .method(Method::PATCH)
            .probability(p)
    }

    pub fn throttled(p: f64, retry_after: u64) -> FaultRule {
        FaultRule::new(status(429, "TooManyRequests", Some(retry_after)))
            .watch(false)
            .probability(p)
    }

    pub fn internal_error(p: f64) -> FaultRule {
        FaultRule::new(status(500, "InternalError", None)).probability(p)
    }

    pub fn unavailable(p: f64) -> FaultRule {
        FaultRule::new(status(503, "ServiceUnavailable", Some(1))).probability(p)
    }

    pub fn reset(p: f64) -> FaultRule {
        FaultRule::new(FaultAction::Reset).probability(p)
    }

    pub fn slow(method: Method, delay: Duration, p: f64) -> FaultRule {
        FaultRule::new(FaultAction::Delay(delay))
            .method(method)
            .watch(false)
            .probability(p)
    }

    /// Every watch ends after `events` events.
    pub fn short_watches(events: u32) -> FaultRule {
        FaultRule::new(FaultAction::EndWatchAfter(events)).watch(true)
    }

    /// Watches that open only after `delay`: nothing arrives meanwhile.
    pub fn stalled_watches(delay: Duration, p: f64) -> FaultRule {
        FaultRule::new(FaultAction::Delay(delay))
            .watch(true)
            .probability(p)
    }

    pub fn gone_on_watch(p: f64) -> FaultRule {
        FaultRule::new(status(410, "Expired", None))
            .watch(true)
            .probability(p)
    }

    /// 410 on GETs that are not watches: lists (and the rare get).
    pub fn gone_on_list(resource: Resource, p: f64) -> FaultRule {
        FaultRule::new(status(410, "Expired", None))
            .method(Method::GET)
            .resource(resource)
            .watch(false)
            .probability(p)
    }
}
