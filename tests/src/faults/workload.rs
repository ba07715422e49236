//! The workload: sandboxes driven through their lifecycle straight in the fake's
//! [`MemoryCluster`] (as `kubectl` would, through the API the controller watches), each on its
//! own seeded plan, and a ledger of what each should end as.
//!
//! A plain sandbox goes create → pause → resume → reset (`rootfsGeneration: 2`), either
//! resuming before the reset or resetting while paused; some are forked (a new sandbox with
//! `forkFrom`), some end paused, some are deleted. Most steps wait for the controller to show
//! the previous one in the status; some do not, so that changes also race the reconciles.
//! Sandboxes named `trap-`, `loop-` and `oom-` (for the faulty policy) are created and some
//! deleted; they never get children.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cubepod_apiserver::MemoryCluster;
use cubepod_kube::{ApiErrorKind, Cluster, Resource};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::convergence::{NS, sandbox_manifest};

/// What the faulty policy does on a sandbox, by its name's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misbehaviour {
    Trap,
    Loop,
    Oom,
}

impl Misbehaviour {
    pub const ALL: [Misbehaviour; 3] = [Misbehaviour::Trap, Misbehaviour::Loop, Misbehaviour::Oom];

    pub fn prefix(self) -> &'static str {
        match self {
            Misbehaviour::Trap => "trap",
            Misbehaviour::Loop => "loop",
            Misbehaviour::Oom => "oom",
        }
    }

    /// The `reason` label of `cubepod_guest_traps_total` it shows as.
    pub fn trap_reason(self) -> &'static str {
        match self {
            Misbehaviour::Trap => "trap",
            Misbehaviour::Loop => "timeout",
            Misbehaviour::Oom => "memory",
        }
    }
}

/// Why a sandbox is in the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Plain,
    /// Created with `forkFrom: source`.
    Fork {
        source: String,
    },
    /// The faulty policy fails every reconcile of it.
    Faulty(Misbehaviour),
}

/// What one sandbox should end as.
#[derive(Clone, Debug)]
pub struct Entry {
    pub role: Role,
    /// `spec.desiredState` last written: `Running` or `Paused`.
    pub desired: &'static str,
    /// `spec.rootfsGeneration` last written.
    pub generation: u32,
    /// Deleted by the workload: must be gone, finalizer and all.
    pub deleted: bool,
}

/// How many of each step the workload took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Steps {
    pub created: usize,
    pub paused: usize,
    pub resumed: usize,
    pub reset: usize,
    pub forked: usize,
    pub deleted: usize,
    /// Steps taken without waiting for the previous one to show in the status.
    pub raced: usize,
}

/// What the workload did and expects.
#[derive(Debug, Default)]
pub struct Ledger {
    pub entries: BTreeMap<String, Entry>,
    pub steps: Steps,
    /// Waits that ran out of patience (`name: step after N s`); the checker has the last word.
    pub stalls: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub seed: u64,
    /// Plain sandboxes (forks come on top).
    pub sandboxes: usize,
    /// Sandboxes of each misbehaviour (only with the faulty policy).
    pub faulty_each: usize,
    /// Between the starts of two sandboxes' plans.
    pub stagger: Duration,
    /// How long one step waits for the status to show the previous one.
    pub step_patience: Duration,
    /// Chance that a step does not wait for the previous one.
    pub race: f64,
}

/// The plan of one plain sandbox, drawn from the seed.
#[derive(Clone, Debug)]
struct Plan {
    name: String,
    reset_while_paused: bool,
    fork: bool,
    delete_fork: bool,
    end_paused: bool,
    delete: bool,
    /// Per step: wait for the status first.
    waits: [bool; 8],
}

/// Drives every plan to its end and returns the ledger. Runs on the caller's runtime, which
/// must outlive the MemoryCluster's kubelet timers it starts (deletes of pods).
pub async fn run(cluster: Arc<MemoryCluster>, config: WorkloadConfig) -> Ledger {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut tasks = tokio::task::JoinSet::new();
    let mut order = 0u32;
    for index in 0..config.sandboxes {
        let plan = Plan {
            name: format!("s{index:04}"),
            reset_while_paused: rng.random_bool(0.3),
            fork: rng.random_bool(0.25),
            delete_fork: rng.random_bool(0.5),
            end_paused: rng.random_bool(0.2),
            delete: rng.random_bool(0.4),
            waits: std::array::from_fn(|_| !rng.random_bool(config.race)),
        };
        let driver = Driver {
            cluster: cluster.clone(),
            ledger: ledger.clone(),
            config: config.clone(),
        };
        let start = config.stagger * order;
        order += 1;
        tasks.spawn(async move {
            tokio::time::sleep(start).await;
            driver.plain(plan).await;
        });
    }
    for misbehaviour in Misbehaviour::ALL {
        for index in 0..config.faulty_each {
            let name = format!("{}-{index:03}", misbehaviour.prefix());
            // The first of each kind stays, so that the last controller meets it.
            let delete = index > 0 && rng.random_bool(0.5);
            let linger = Duration::from_millis(rng.random_range(500..3000));
            let driver = Driver {
                cluster: cluster.clone(),
                ledger: ledger.clone(),
                config: config.clone(),
            };
            let start = config.stagger * order;
            order += 1;
            tasks.spawn(async move {
                tokio::time::sleep(start).await;
                driver.faulty(name, misbehaviour, delete, linger).await;
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(error) = done {
            std::panic::resume_unwind(error.into_panic());
        }
    }
    Arc::try_unwrap(ledger)
        .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
        .unwrap_or_else(|shared| {
            std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner))
        })
}

struct Driver {
    cluster: Arc<MemoryCluster>,
    ledger: Arc<Mutex<Ledger>>,
    config: WorkloadConfig,
}

impl Driver {
    fn record(&self, f: impl FnOnce(&mut Ledger)) {
        f(&mut self.ledger.lock().unwrap_or_else(PoisonError::into_inner));
    }

    async fn plain(&self, plan: Plan) {
        let name = plan.name.as_str();
        let mut step = 0;
        let wait = |step: &mut usize| {
            let w = plan.waits[*step % plan.waits.len()];
            *step += 1;
            w
        };

        self.create(name, json!({}), Role::Plain).await;
        self.settle(name, "Running", 1, wait(&mut step), "create")
            .await;
        self.set(name, json!({"desiredState": "Paused"}), |e| {
            e.desired = "Paused"
        })
        .await;
        self.record(|l| l.steps.paused += 1);
        self.settle(name, "Paused", 1, wait(&mut step), "pause")
            .await;
        if plan.reset_while_paused {
            self.set(name, json!({"rootfsGeneration": 2}), |e| e.generation = 2)
                .await;
            self.record(|l| l.steps.reset += 1);
            self.settle(name, "Paused", 2, wait(&mut step), "reset")
                .await;
            self.set(name, json!({"desiredState": "Running"}), |e| {
                e.desired = "Running"
            })
            .await;
            self.record(|l| l.steps.resumed += 1);
            self.settle(name, "Running", 2, wait(&mut step), "resume")
                .await;
        } else {
            self.set(name, json!({"desiredState": "Running"}), |e| {
                e.desired = "Running"
            })
            .await;
            self.record(|l| l.steps.resumed += 1);
            self.settle(name, "Running", 1, wait(&mut step), "resume")
                .await;
            self.set(name, json!({"rootfsGeneration": 2}), |e| e.generation = 2)
                .await;
            self.record(|l| l.steps.reset += 1);
            self.settle(name, "Running", 2, wait(&mut step), "reset")
                .await;
        }
        let fork = format!("{name}-fork");
        let mut source_free = true;
        if plan.fork {
            let role = Role::Fork {
                source: name.to_string(),
            };
            self.create(&fork, json!({"forkFrom": name}), role).await;
            self.record(|l| l.steps.forked += 1);
            // The source is deleted only once the fork has cloned its volumes: a fork whose
            // source is gone before that fails by design (ForkSourceNotFound).
            let must_wait = plan.delete || wait(&mut step);
            // A stalled wait is in the report; deleting the source after it would make the
            // fork fail by design and the ledger untrue.
            source_free = self.settle_fork(&fork, must_wait).await;
        }
        if plan.end_paused {
            self.set(name, json!({"desiredState": "Paused"}), |e| {
                e.desired = "Paused"
            })
            .await;
            self.record(|l| l.steps.paused += 1);
            self.settle(name, "Paused", 2, wait(&mut step), "pause again")
                .await;
        }
        if plan.delete && source_free {
            self.delete(name).await;
            self.gone(name, wait(&mut step)).await;
        }
        if plan.fork && plan.delete_fork {
            self.delete(&fork).await;
            self.gone(&fork, wait(&mut step)).await;
        }
    }

    async fn faulty(
        &self,
        name: String,
        misbehaviour: Misbehaviour,
        delete: bool,
        linger: Duration,
    ) {
        self.create(&name, json!({}), Role::Faulty(misbehaviour))
            .await;
        tokio::time::sleep(linger).await;
        if delete {
            self.delete(&name).await;
            self.gone(&name, true).await;
        }
    }

    async fn create(&self, name: &str, spec: Value, role: Role) {
        let manifest = sandbox_manifest(name, spec);
        if let Err(error) = self.cluster.create(Resource::Sandbox, NS, manifest).await {
            panic!("the workload could not create sandbox {name}: {error}");
        }
        self.record(|l| {
            l.steps.created += 1;
            l.entries.insert(
                name.to_string(),
                Entry {
                    role,
                    desired: "Running",
                    generation: 1,
                    deleted: false,
                },
            );
        });
    }

    /// Merges `spec` into the sandbox's spec (no resourceVersion: the user's write always wins).
    async fn set(&self, name: &str, spec: Value, update: impl FnOnce(&mut Entry)) {
        let patch = json!({"spec": spec});
        if let Err(error) = self.cluster.patch(Resource::Sandbox, NS, name, patch).await {
            panic!("the workload could not change sandbox {name}: {error}");
        }
        self.record(|l| {
            if let Some(entry) = l.entries.get_mut(name) {
                update(entry);
            }
        });
    }

    async fn delete(&self, name: &str) {
        match self.cluster.delete(Resource::Sandbox, NS, name).await {
            Ok(()) => {}
            Err(error) if error.is(ApiErrorKind::NotFound) => {}
            Err(error) => panic!("the workload could not delete sandbox {name}: {error}"),
        }
        self.record(|l| {
            l.steps.deleted += 1;
            if let Some(entry) = l.entries.get_mut(name) {
                entry.deleted = true;
            }
        });
    }

    /// Waits (when `wait`) until the status shows `phase` on rootfs generation `generation`
    /// for the current spec; otherwise lets a moment pass and races on.
    async fn settle(&self, name: &str, phase: &str, generation: u32, wait: bool, step: &str) {
        if !wait {
            self.record(|l| l.steps.raced += 1);
            let pause = rand::rng().random_range(0..50);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            return;
        }
        let rootfs = format!("{name}-rootfs-g{generation}");
        self.until(name, step, |object| {
            let Some(object) = object else { return false };
            let status = &object["status"];
            status["phase"] == phase
                && status["observedGeneration"] == object["metadata"]["generation"]
                && status["rootfsPVC"] == rootfs.as_str()
        })
        .await;
    }

    /// Waits (when `wait`) until a fork has its volumes; false if the wait stalled.
    async fn settle_fork(&self, name: &str, wait: bool) -> bool {
        if !wait {
            self.record(|l| l.steps.raced += 1);
            return true;
        }
        self.until(name, "fork", |object| {
            object.is_some_and(|o| o["status"]["workspacePVC"].is_string())
        })
        .await
    }

    async fn gone(&self, name: &str, wait: bool) {
        if !wait {
            self.record(|l| l.steps.raced += 1);
            return;
        }
        self.until(name, "delete", |object| object.is_none()).await;
    }

    /// Polls until `done`; false, and a stall in the ledger, after the step's patience.
    async fn until(&self, name: &str, step: &str, done: impl Fn(Option<&Value>) -> bool) -> bool {
        let started = Instant::now();
        loop {
            let object = match self.cluster.get(Resource::Sandbox, NS, name).await {
                Ok(object) => Some(object),
                Err(error) if error.is(ApiErrorKind::NotFound) => None,
                Err(error) => panic!("the workload could not read sandbox {name}: {error}"),
            };
            if done(object.as_ref()) {
                return true;
            }
            if started.elapsed() > self.config.step_patience {
                let waited = started.elapsed().as_secs();
                self.record(|l| {
                    l.stalls
                        .push(format!("{name}: {step} not shown after {waited}s"))
                });
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
