//! Warm-pool claims raced against everything else that happens to a pool, over the real
//! `ControllerManager` and `MemoryCluster` in-process: a property test of randomised
//! interleavings, each drawn from a seed.
//!
//! A run creates two pools, waits for them to fill, then carries out a plan of operations with
//! short random gaps, some of them overlapping: bursts of claims created at once (one task
//! each, more claims than workers), claim deletes, scaling, template changes under both update
//! strategies, member deletes, pauses and resumes, and controller restarts (stop the manager,
//! start a new one over the same cluster). The controller's cluster answers a random share of
//! its patches and status writes with 409 Conflict, so its retry paths are raced too. Then the
//! test waits for quiet (no API write for a while) and checks, from the cluster itself:
//!
//! 1. a member is claimed by one claim at most, and its label, its controller ownerReference
//!    and the claim's `status.claimedMember` agree;
//! 2. every claim is Running (on its member's Pod, or cold on its own), or Paused if asked,
//!    never failed because its member was lost (a claim whose member is deleted is served
//!    again) nor stuck `Pending` with `Claiming`;
//! 3. no child and no member outlives its owner, and nothing is left terminating;
//! 4. every pool is back at its size: `min(spec.replicas, max_pool_replicas)` ready, unclaimed
//!    members (of the current template under `Recreate`), and its status says so;
//! 5. no API write after quiet, over a window of several pool ticks;
//! 6. the `PolicyRollout` the plan last changed is `Promoted`, its candidate the module serving,
//!    and no stage was announced twice (a restart takes a canary or a promotion up, silently).
//!
//! Policy rollouts race the same work: a plan changes a rollout's module (the default policy
//! under a new digest: the same decisions, so 1 to 5 hold whichever module reconciles) and
//! strategy (a swap, or canary steps of a second), so that canaries start, step, are replaced
//! by the next candidate mid-step and are taken up by a restarted controller from the status,
//! all while claims are served.
//!
//! The MemoryCluster's garbage collector deletes an object's dependents when the object is
//! removed (`kube/memory/gc.rs`), so a deleted claim takes its member along; a member whose
//! ownerReference names an owner that is already gone is never collected there (a real GC
//! would delete it), and is reported under 3.
//!
//! Every failure prints the seed, the knobs it drew, and the operations as carried out.
//! `CUBEPOD_CLAIMS_SEED` (decimal or 0x-hex) replays one seed; the ignored `soak` runs more:
//! `CUBEPOD_CLAIMS_SEEDS` seeds (from `CUBEPOD_CLAIMS_SEED`, else from the clock) of
//! `CUBEPOD_CLAIMS_OPS` operations each.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::admission::Admission;
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::policy_watch::sha256_hex;
use cubepod_host::controller::queue::Backoff;
use cubepod_host::controller::reconcile::Settings;
use cubepod_host::controller::rollout::RolloutController;
use cubepod_host::metrics::Metrics;
use cubepod_host::signing::KeyRing;
use cubepod_kube::{
    ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, ObjectList, PageRequest, Resource,
    Scope, WatchEvent,
};
use cubepod_policy_host::runtime::{PolicyEngine, PolicyModule, RuntimeConfig, default_policy};
use cubepod_tests::bench::swap::variant;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

const NS: &str = "cubepod-workloads";
/// The controller's own namespace, where the rollout and its ConfigMap live.
const SYSTEM: &str = "cubepod-system";
const ROLLOUT: &str = "next-policy";
const POOLS: [&str; 2] = ["alpha", "beta"];
const CLAIMED_BY: &str = "cubepod.io/claimed-by";
const POOL_LABEL: &str = "cubepod.io/pool";
/// The controller's `--max-pool-replicas`; scaling draws go above it, so the cap is raced too.
const MAX_POOL_REPLICAS: u32 = 40;
const POOL_INTERVAL: Duration = Duration::from_millis(100);
/// No controller write for this long is quiet: longer than a pool tick, the retry backoff's
/// cap and the status hold, so that nothing the controller still means to do is pending.
const QUIET: Duration = Duration::from_millis(1500);
/// After quiet, the controller must stay silent this long: ten pool ticks.
const SILENT: Duration = Duration::from_secs(1);
/// How long the pools may take to fill, and the cluster to go quiet once the plan is done.
const PATIENCE: Duration = Duration::from_secs(90);

const DEFAULT_SEEDS: [u64; 4] = [0xc1a1_0001, 0xc1a1_0002, 0xc1a1_0003, 0xc1a1_0004];
const DEFAULT_OPS: usize = 12;

/// The default seeds (or `CUBEPOD_CLAIMS_SEED` alone), a short plan each: about a minute in a
/// debug build.
#[test]
fn concurrent_claims_each_get_their_own_member() {
    let seeds = match env_seed() {
        Some(seed) => vec![seed],
        None => DEFAULT_SEEDS.to_vec(),
    };
    run_seeds(&seeds, DEFAULT_OPS);
}

/// More seeds and longer plans: `CUBEPOD_CLAIMS_SEEDS`, `CUBEPOD_CLAIMS_OPS`,
/// `CUBEPOD_CLAIMS_SEED` (the first seed).
#[test]
#[ignore = "soak: minutes; run with --ignored"]
fn soak() {
    let count = env_count("CUBEPOD_CLAIMS_SEEDS", 20);
    let ops = env_count("CUBEPOD_CLAIMS_OPS", 40);
    let first = env_seed().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let seeds: Vec<u64> = (0..count as u64).map(|i| first.wrapping_add(i)).collect();
    run_seeds(&seeds, ops);
}

/// A tenant who may create Sandboxes plants one that looks like a pool's member: the pool's
/// labels, its template hash, the pool as controller owner, the pool's image. The pool never
/// counts it, no claim adopts it, and the pool's scale-down does not delete it: membership is
/// the pool's own record of what the controller created.
#[test]
fn a_sandbox_that_only_looks_like_a_member_is_never_counted_claimed_or_deleted() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
        let module = engine.load(default_policy::DEFAULT_POLICY).unwrap();
        let (cluster, flaky) = Flaky::over_new_cluster(0.0, 1);
        let knobs = Knobs {
            concurrency: 4,
            conflicts: 0.0,
            pools: Vec::new(),
        };
        let controller = Controller::start(flaky.clone(), module, &knobs);
        let pool = cluster
            .create(
                Resource::PodWarmPool,
                NS,
                json!({
                    "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                    "metadata": {"name": "alpha", "namespace": NS},
                    "spec": {"replicas": 2, "template": {"image": "img-t"}},
                }),
            )
            .await
            .unwrap();
        let filled = Instant::now() + PATIENCE;
        while Snapshot::take(&cluster).ready_unclaimed("alpha").len() < 2 {
            assert!(Instant::now() < filled, "the pool never filled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let real = Snapshot::take(&cluster).ready_unclaimed("alpha")[0].clone();
        let real = cluster.get(Resource::Sandbox, NS, &real).await.unwrap();
        let mut planted = sandbox("a-planted", json!({"image": "img-t"}));
        planted["metadata"]["labels"] = real["metadata"]["labels"].clone();
        planted["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "name": "alpha", "uid": uid(&pool).unwrap(), "controller": true,
        }]);
        cluster
            .create(Resource::Sandbox, NS, planted)
            .await
            .unwrap();
        quiet(&cluster, &controller, || {
            flaky.writes.load(Ordering::SeqCst)
        })
        .await
        .unwrap();
        let status = |p: &Value| p["status"]["replicas"].as_u64();
        let alpha = cluster
            .get(Resource::PodWarmPool, NS, "alpha")
            .await
            .unwrap();
        assert_eq!(
            status(&alpha),
            Some(2),
            "the planted Sandbox is not counted"
        );

        // Three claims: two take the pool's members, the third never the planted one.
        for claim in ["c1", "c2", "c3"] {
            let spec = json!({"image": "img-t", "warmPool": "alpha"});
            cluster
                .create(Resource::Sandbox, NS, sandbox(claim, spec))
                .await
                .unwrap();
        }
        quiet(&cluster, &controller, || {
            flaky.writes.load(Ordering::SeqCst)
        })
        .await
        .unwrap();
        let planted = cluster
            .get(Resource::Sandbox, NS, "a-planted")
            .await
            .unwrap();
        assert_eq!(
            label(&planted, CLAIMED_BY),
            None,
            "the planted Sandbox was adopted"
        );
        for claim in ["c1", "c2", "c3"] {
            let c = cluster.get(Resource::Sandbox, NS, claim).await.unwrap();
            assert_ne!(c["status"]["claimedMember"], "a-planted");
            assert_eq!(phase(&c), "Running", "{claim}: {c}");
        }

        // Scaled to none: the pool deletes its members, not the planted one.
        let patch = json!({"spec": {"replicas": 0}});
        cluster
            .patch(Resource::PodWarmPool, NS, "alpha", patch)
            .await
            .unwrap();
        quiet(&cluster, &controller, || {
            flaky.writes.load(Ordering::SeqCst)
        })
        .await
        .unwrap();
        let planted = cluster.get(Resource::Sandbox, NS, "a-planted").await;
        assert!(
            planted.is_ok_and(|p| !terminating(&p)),
            "the pool deleted it"
        );
        let alpha = cluster
            .get(Resource::PodWarmPool, NS, "alpha")
            .await
            .unwrap();
        assert_eq!(status(&alpha), Some(0));
        controller.stop().await;
    });
}

/// The checks themselves, on a cluster made by hand to break invariants 1 to 4: each names
/// what it finds, so that a run that passes does so because nothing was wrong.
#[test]
fn the_checks_find_what_they_name() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    runtime.block_on(async {
        let create = |resource, object| cluster.create(resource, NS, object);
        let pool = create(
            Resource::PodWarmPool,
            json!({
                "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                "metadata": {"name": "p", "namespace": NS},
                "spec": {"replicas": 2, "template": {"image": "img"}},
            }),
        )
        .await
        .unwrap();
        let mut uids = BTreeMap::new();
        for claim in ["a", "b", "c"] {
            let mut spec = json!({"image": "img", "warmPool": "p"});
            if claim == "c" {
                spec["desiredState"] = json!("Paused");
            }
            let made = create(Resource::Sandbox, sandbox(claim, spec))
                .await
                .unwrap();
            uids.insert(claim, uid(&made).unwrap().to_string());
        }
        let owner = |kind: &str, name: &str, uid: &str| {
            json!([{"apiVersion": "cubepod.io/v1alpha1", "kind": kind, "name": name,
                    "uid": uid, "controller": true}])
        };
        let ready = json!({"phase": "Running", "podIP": "10.0.0.1",
                           "conditions": [{"type": "Ready", "status": "True", "reason": "PodReady",
                               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        // p-0 ready and unclaimed; p-1 claimed by b but named by a and b; p-2 held by the
        // paused c.
        for (member, holder) in [("p-0", None), ("p-1", Some("b")), ("p-2", Some("c"))] {
            let mut object = sandbox(member, json!({"image": "img"}));
            object["metadata"]["labels"] = json!({POOL_LABEL: "p"});
            object["metadata"]["ownerReferences"] = owner("PodWarmPool", "p", uid(&pool).unwrap());
            if let Some(holder) = holder {
                object["metadata"]["labels"][CLAIMED_BY] = json!(holder);
                object["metadata"]["ownerReferences"] = owner("Sandbox", holder, &uids[holder]);
            }
            create(Resource::Sandbox, object).await.unwrap();
            let status = json!({"status": ready});
            cluster
                .patch_status(Resource::Sandbox, NS, member, status)
                .await
                .unwrap();
        }
        let claiming = json!({"status": {"phase": "Pending", "claimedMember": "p-1",
            "conditions": [{"type": "Ready", "status": "False", "reason": "Claiming",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let mut running = ready.clone();
        running["claimedMember"] = json!("p-1");
        let mut paused_running = ready.clone();
        paused_running["claimedMember"] = json!("p-2");
        for (claim, status) in [
            ("a", claiming),
            ("b", json!({"status": running})),
            ("c", json!({"status": paused_running})),
        ] {
            cluster
                .patch_status(Resource::Sandbox, NS, claim, status)
                .await
                .unwrap();
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ghost", "namespace": NS,
                         "ownerReferences": owner("Sandbox", "ghost", "no-such-uid")}});
        create(Resource::Pod, pod).await.unwrap();
    });
    let found = Snapshot::take(&cluster).violations();
    let expected = [
        "1: member p-1 is status.claimedMember of 2 claims: a, b",
        "1: claim a names member p-1, which is claimed by b",
        "2: claim a is Pending/Claiming: its member p-1 is claimed by b",
        "2: claim b reports podIP \"10.0.0.1\" but its member p-1's Pod has None",
        "2: claim c asks to be Paused but is Running/PodReady (member p-2)",
        "3: Pod ghost is orphaned: its owner Sandbox ghost (uid no-such-uid) does not exist",
        "4: pool p wants 2 (spec.replicas 2, cap 40) but has 1 ready, unclaimed members",
        "4: pool p's status.readyReplicas is 0, the cluster holds 1",
    ];
    for line in expected {
        assert!(
            found.iter().any(|f| f.starts_with(line)),
            "{line:?} not among {found:#?}"
        );
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

fn env_seed() -> Option<u64> {
    let text = std::env::var("CUBEPOD_CLAIMS_SEED").ok()?;
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(default)
}

/// Runs every seed (each on its own cluster) and fails once, with every failing seed's report.
fn run_seeds(seeds: &[u64], ops: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let module = runtime.block_on(async {
        let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
        engine.load(default_policy::DEFAULT_POLICY).unwrap()
    });
    let mut failures = Vec::new();
    for &seed in seeds {
        let plan = Plan::draw(seed, ops);
        let started = Instant::now();
        let outcome = runtime.block_on(run(&plan, module.clone()));
        eprintln!(
            "claims seed {seed:#x}: {} in {:.1}s",
            if outcome.is_ok() { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if let Err(report) = outcome {
            failures.push(report);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What a seed fixes besides the operations.
#[derive(Clone, Debug)]
struct Knobs {
    /// `--concurrency`: workers reconciling at once.
    concurrency: usize,
    /// Share of the controller's patches and status writes answered 409 Conflict.
    conflicts: f64,
    /// Each pool's replicas and update strategy at creation.
    pools: Vec<(String, u32, Strategy)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    Recreate,
    OnReplenish,
}

impl Strategy {
    fn as_str(self) -> &'static str {
        match self {
            Strategy::Recreate => "Recreate",
            Strategy::OnReplenish => "OnReplenish",
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Claims created at once, one task each, each after its own delay of a few milliseconds
    /// at most, as creates from many clients arrive: (name, pool, created paused, delay).
    Burst(Vec<(String, String, bool, Duration)>),
    DeleteClaims(Vec<String>),
    Scale(String, u32),
    Template(String, String, Strategy),
    /// Deletes the member at this draw's index (modulo the members there are then).
    DeleteMember(String, u32),
    Pause(String),
    Resume(String),
    Restart,
    Wait(Duration),
    /// The rollout's module becomes candidate n, with these canary weights (none: `Immediate`).
    Rollout(u32, Vec<u8>),
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Burst(claims) => {
                write!(f, "burst of {} claims:", claims.len())?;
                for (name, pool, paused, _) in claims {
                    write!(
                        f,
                        " {name}->{pool}{}",
                        if *paused { "(paused)" } else { "" }
                    )?;
                }
                Ok(())
            }
            Op::DeleteClaims(names) => write!(f, "delete claims {}", names.join(" ")),
            Op::Scale(pool, n) => write!(f, "scale {pool} to {n}"),
            Op::Template(pool, image, s) => {
                write!(f, "template of {pool}: image {image}, {}", s.as_str())
            }
            Op::DeleteMember(pool, k) => write!(f, "delete member #{k} of {pool}"),
            Op::Pause(claim) => write!(f, "pause {claim}"),
            Op::Resume(claim) => write!(f, "resume {claim}"),
            Op::Restart => write!(f, "restart the controller"),
            Op::Wait(d) => write!(f, "wait {}ms", d.as_millis()),
            Op::Rollout(n, weights) if weights.is_empty() => {
                write!(f, "roll out candidate {n}, Immediate")
            }
            Op::Rollout(n, weights) => write!(f, "roll out candidate {n}, canary {weights:?}"),
        }
    }
}

/// One step of a plan: the operation, whether the plan goes on without waiting for it, and the
/// gap before the next step.
#[derive(Clone, Debug)]
struct Step {
    op: Op,
    overlap: bool,
    gap: Duration,
}

impl Step {
    fn new(op: Op, overlap: bool, gap: Duration) -> Self {
        Self { op, overlap, gap }
    }
}

#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    knobs: Knobs,
    steps: Vec<Step>,
}

impl Plan {
    /// Everything a run does, drawn from `seed` alone: the same seed, the same plan.
    fn draw(seed: u64, ops: usize) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let strategies = [Strategy::Recreate, Strategy::OnReplenish];
        let knobs = Knobs {
            concurrency: *[4, 8].choose(&mut rng).unwrap(),
            conflicts: *[0.0, 0.05, 0.15].choose(&mut rng).unwrap(),
            pools: POOLS
                .iter()
                .map(|p| {
                    (
                        p.to_string(),
                        rng.random_range(12..=32),
                        *strategies.choose(&mut rng).unwrap(),
                    )
                })
                .collect(),
        };
        let mut claims = 0;
        let mut alive: Vec<String> = Vec::new();
        let mut paused: BTreeSet<String> = BTreeSet::new();
        let mut restarts = 0;
        let mut rollouts = 0;
        let mut images = 0;
        let mut steps = Vec::new();
        // Every plan opens with the race this test is about: as many claims as a full pool has
        // members, or a few more, created at once on that pool.
        let (first_pool, first_size) = {
            let (pool, replicas, _) = knobs.pools.choose(&mut rng).unwrap();
            (pool.clone(), *replicas + rng.random_range(0..=8))
        };
        let mut opening = true;
        while steps.len() < ops {
            let roll = rng.random_range(0..100);
            let op = if opening || roll < 30 {
                let (main, size, spread) = if opening {
                    (first_pool.as_str(), first_size, 0.0)
                } else {
                    (
                        *POOLS.choose(&mut rng).unwrap(),
                        rng.random_range(4..=24),
                        0.2,
                    )
                };
                opening = false;
                let burst: Vec<(String, String, bool, Duration)> = (0..size)
                    .map(|_| {
                        claims += 1;
                        let name = format!("claim-{claims}");
                        let pool = if rng.random_bool(spread) {
                            *POOLS.choose(&mut rng).unwrap()
                        } else {
                            main
                        };
                        let held = rng.random_bool(0.1);
                        alive.push(name.clone());
                        if held {
                            paused.insert(name.clone());
                        }
                        let delay = Duration::from_millis(rng.random_range(0..=3));
                        (name, pool.to_string(), held, delay)
                    })
                    .collect();
                Op::Burst(burst)
            } else if roll < 42 && !alive.is_empty() {
                let n = rng.random_range(1..=3.min(alive.len()));
                let gone: Vec<String> = (0..n)
                    .map(|_| alive.swap_remove(rng.random_range(0..alive.len())))
                    .collect();
                for name in &gone {
                    paused.remove(name);
                }
                Op::DeleteClaims(gone)
            } else if roll < 54 {
                let pool = POOLS.choose(&mut rng).unwrap().to_string();
                Op::Scale(pool, rng.random_range(0..=MAX_POOL_REPLICAS + 6))
            } else if roll < 62 {
                images += 1;
                let pool = POOLS.choose(&mut rng).unwrap().to_string();
                let strategy = *strategies.choose(&mut rng).unwrap();
                Op::Template(pool, format!("img-v{images}"), strategy)
            } else if roll < 72 {
                let pool = POOLS.choose(&mut rng).unwrap().to_string();
                Op::DeleteMember(pool, rng.random())
            } else if roll < 80 && !alive.is_empty() {
                let name = alive[rng.random_range(0..alive.len())].clone();
                if paused.remove(&name) {
                    Op::Resume(name)
                } else {
                    paused.insert(name.clone());
                    Op::Pause(name)
                }
            } else if roll < 85 && restarts < 2 {
                restarts += 1;
                Op::Restart
            } else if roll < 90 && rollouts < 2 {
                rollouts += 1;
                Op::Rollout(rollouts, draw_weights(&mut rng))
            } else {
                Op::Wait(Duration::from_millis(rng.random_range(50..400)))
            };
            let overlap = !matches!(op, Op::Restart | Op::Wait(_)) && rng.random_bool(0.35);
            let gap = Duration::from_millis(rng.random_range(0..30));
            steps.push(Step { op, overlap, gap });
        }
        // Every plan changes the policy once at least, somewhere after its opening burst, and
        // restarts the controller within the next seconds: mid-admission, mid-canary or after
        // the promotion, which the new controller takes up from the status.
        if rollouts == 0 {
            let at = rng.random_range(1..=steps.len());
            let op = Op::Rollout(1, draw_weights(&mut rng));
            steps.insert(at, Step::new(op, false, Duration::ZERO));
        }
        if let Some(at) = steps.iter().position(|s| matches!(s.op, Op::Rollout(..))) {
            steps[at].overlap = false;
            steps[at].gap = Duration::from_millis(rng.random_range(0..3_000));
            let gap = Duration::from_millis(rng.random_range(0..30));
            steps.insert(at + 1, Step::new(Op::Restart, false, gap));
        }
        Plan { seed, knobs, steps }
    }
}

/// A rollout's canary weights: none (`Immediate`), or one to three growing steps.
fn draw_weights(rng: &mut StdRng) -> Vec<u8> {
    let mut weights: Vec<u8> = (0..rng.random_range(0..=3))
        .map(|_| rng.random_range(0..=100))
        .collect();
    weights.sort();
    weights
}

/// The controller's view of the cluster: the MemoryCluster, with a random share of patches and
/// status writes refused as 409 Conflict before they reach it, and every write counted.
struct Flaky {
    inner: Arc<MemoryCluster>,
    share: f64,
    rng: Mutex<StdRng>,
    writes: AtomicU64,
    injected: AtomicU64,
}

impl Flaky {
    /// A new MemoryCluster whose Pods start and stop in 5 ms, and this view of it refusing
    /// `share` of the controller's patches, drawn from `seed`.
    fn over_new_cluster(share: f64, seed: u64) -> (Arc<MemoryCluster>, Arc<Flaky>) {
        let cluster = MemoryCluster::new(MemoryClusterConfig {
            pod_start_delay: Duration::from_millis(5),
            pod_stop_delay: Duration::from_millis(5),
            ..MemoryClusterConfig::default()
        });
        let flaky = Arc::new(Flaky {
            inner: cluster.clone(),
            share,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            writes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        });
        (cluster, flaky)
    }

    fn write(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    fn conflict(&self, resource: Resource, name: &str) -> Option<ApiError> {
        self.write();
        let hit = self.share > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .random_bool(self.share);
        hit.then(|| {
            self.injected.fetch_add(1, Ordering::SeqCst);
            ApiError::new(
                ApiErrorKind::Conflict,
                format!(
                    "Operation cannot be fulfilled on {resource} \"{name}\": the object has \
                     been modified; please apply your changes to the latest version and try \
                     again"
                ),
            )
        })
    }
}

impl Cluster for Flaky {
    fn create(
        &self,
        resource: Resource,
        namespace: &str,
        object: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.write();
        self.inner.create(resource, namespace, object)
    }

    fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.inner.get(resource, namespace, name)
    }

    fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<()>> {
        self.write();
        self.inner.delete(resource, namespace, name)
    }

    fn patch(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        match self.conflict(resource, name) {
            Some(error) => Box::pin(async move { Err(error) }),
            None => self.inner.patch(resource, namespace, name, patch),
        }
    }

    fn patch_status(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        match self.conflict(resource, name) {
            Some(error) => Box::pin(async move { Err(error) }),
            None => self.inner.patch_status(resource, namespace, name, patch),
        }
    }

    fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        self.inner.list(scope)
    }

    fn list_page(&self, scope: &Scope, page: &PageRequest) -> BoxFuture<'_, ApiResult<ObjectList>> {
        self.inner.list_page(scope, page)
    }

    fn watch(
        &self,
        scope: &Scope,
        resource_version: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        self.inner.watch(scope, resource_version)
    }
}

/// One controller process: the manager's and the rollout controller's tasks and the switch
/// that stops them.
struct Controller {
    manager: Arc<ControllerManager>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    rollouts: tokio::task::JoinHandle<()>,
}

impl Controller {
    /// The control loop and the rollout controller, on `module` until a rollout says otherwise.
    fn start(cluster: Arc<Flaky>, module: PolicyModule, knobs: &Knobs) -> Controller {
        let module_engine = module.engine().clone();
        let mut config = ManagerConfig::for_namespaces(vec![NS.to_string()]);
        config.concurrency = knobs.concurrency;
        config.pool_interval = POOL_INTERVAL;
        config.reconcile = Arc::new(Settings {
            max_pool_replicas: MAX_POOL_REPLICAS,
            status_coalesce: Duration::from_millis(200),
            ..Settings::default()
        });
        config.shutdown_timeout = Duration::from_secs(5);
        // Retries within the quiet window: a key still failing is seen writing, not asleep.
        config.backoff = Backoff {
            base: Duration::from_millis(20),
            max: Duration::from_millis(500),
        };
        let manager = ControllerManager::new(
            cluster,
            module,
            config,
            Arc::new(Metrics::new()),
            Arc::new(Health::default()),
        );
        let (stop, shutdown) = watch::channel(false);
        let admission = Admission::new(module_engine, KeyRing::default());
        let rollouts = RolloutController::new(manager.clone(), admission, SYSTEM.to_string());
        let rollouts = tokio::spawn(rollouts.run(shutdown.clone()));
        let task = tokio::spawn(manager.clone().run(shutdown));
        Controller {
            manager,
            stop,
            task,
            rollouts,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let _ = self.rollouts.await;
    }
}

/// What the operations share: the cluster, and the log of what was done, each line with its
/// time since the start.
struct World {
    cluster: Arc<MemoryCluster>,
    started: Instant,
    log: Mutex<Vec<String>>,
    /// The digest of the module the rollout was last given.
    rolled_out: Mutex<Option<String>>,
}

impl World {
    fn note(&self, line: String) {
        let at = self.started.elapsed().as_millis();
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{at:>6}ms {line}"));
    }

    async fn apply(self: Arc<Self>, op: Op) {
        let cluster = &self.cluster;
        match &op {
            Op::Burst(claims) => {
                self.note(op.to_string());
                let mut tasks = tokio::task::JoinSet::new();
                for (name, pool, paused, delay) in claims.clone() {
                    let cluster = cluster.clone();
                    tasks.spawn(async move {
                        tokio::time::sleep(delay).await;
                        let mut spec = json!({"image": "img-claim", "warmPool": pool});
                        if paused {
                            spec["desiredState"] = json!("Paused");
                        }
                        cluster
                            .create(Resource::Sandbox, NS, sandbox(&name, spec))
                            .await
                            .map_err(|e| format!("create {name}: {e}"))
                    });
                }
                while let Some(done) = tasks.join_next().await {
                    if let Ok(Err(error)) = done {
                        self.note(format!("  {error}"));
                    }
                }
            }
            Op::DeleteClaims(names) => {
                self.note(op.to_string());
                for name in names {
                    if let Err(e) = cluster.delete(Resource::Sandbox, NS, name).await {
                        self.note(format!("  delete {name}: {e}"));
                    }
                }
            }
            Op::Scale(pool, replicas) => {
                self.note(op.to_string());
                let patch = json!({"spec": {"replicas": replicas}});
                if let Err(e) = cluster.patch(Resource::PodWarmPool, NS, pool, patch).await {
                    self.note(format!("  scale {pool}: {e}"));
                }
            }
            Op::Template(pool, image, strategy) => {
                self.note(op.to_string());
                let patch = json!({"spec": {
                    "updateStrategy": strategy.as_str(),
                    "template": {"image": image},
                }});
                if let Err(e) = cluster.patch(Resource::PodWarmPool, NS, pool, patch).await {
                    self.note(format!("  template of {pool}: {e}"));
                }
            }
            Op::DeleteMember(pool, k) => {
                let mut members: Vec<String> = cluster
                    .objects(Resource::Sandbox)
                    .iter()
                    .filter(|s| label(s, POOL_LABEL) == Some(pool.as_str()))
                    .filter_map(|s| Some(name(s)?.to_string()))
                    .collect();
                members.sort();
                if members.is_empty() {
                    self.note(format!("{op}: {pool} has no member"));
                    return;
                }
                let member = members[*k as usize % members.len()].clone();
                let deleted = cluster.delete(Resource::Sandbox, NS, &member).await;
                // Whose it was as the delete left it: that claim is served again.
                let after = cluster.get(Resource::Sandbox, NS, &member).await.ok();
                let holder = after
                    .as_ref()
                    .and_then(|m| label(m, CLAIMED_BY))
                    .map(str::to_string);
                self.note(format!(
                    "{op}: {member} (claimed by {}){}",
                    holder.as_deref().unwrap_or("none"),
                    deleted.err().map(|e| format!(": {e}")).unwrap_or_default()
                ));
            }
            Op::Pause(claim) | Op::Resume(claim) => {
                self.note(op.to_string());
                let state = if matches!(op, Op::Pause(_)) {
                    "Paused"
                } else {
                    "Running"
                };
                let patch = json!({"spec": {"desiredState": state}});
                if let Err(e) = cluster.patch(Resource::Sandbox, NS, claim, patch).await {
                    self.note(format!("  {claim}: {e}"));
                }
            }
            Op::Wait(pause) => {
                self.note(op.to_string());
                tokio::time::sleep(*pause).await;
            }
            Op::Rollout(n, weights) => {
                self.note(op.to_string());
                let bytes = variant(*n as usize);
                *self
                    .rolled_out
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(sha256_hex(&bytes));
                let data = json!({"policy.wasm": base64::engine::general_purpose::STANDARD.encode(&bytes)});
                let strategy = if weights.is_empty() {
                    json!({"type": "Immediate"})
                } else {
                    let steps: Vec<Value> = weights
                        .iter()
                        .map(|w| json!({"weight": w, "duration": "1s"}))
                        .collect();
                    // No call gate: pools' uids fall on either side of a step's weight by
                    // chance, and a last step under 100 that leaves both pools on the stable
                    // module would hold the canary for the candidate's pool calls forever.
                    json!({"type": "Progressive", "canary": {"steps": steps},
                           "gates": {"minCallsPerExport": 0}})
                };
                let map = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": ROLLOUT, "namespace": SYSTEM},
                    "binaryData": data,
                });
                let rollout = json!({
                    "apiVersion": "cubepod.io/v1alpha1", "kind": "PolicyRollout",
                    "metadata": {"name": ROLLOUT, "namespace": SYSTEM},
                    "spec": {"module": {"configMap": ROLLOUT}, "strategy": strategy},
                });
                for (resource, object, patch) in [
                    (Resource::ConfigMap, map, json!({"binaryData": data})),
                    (
                        Resource::PolicyRollout,
                        rollout,
                        json!({"spec": {"strategy": strategy}}),
                    ),
                ] {
                    let made = match cluster.create(resource, SYSTEM, object).await {
                        Err(e) if e.is(ApiErrorKind::AlreadyExists) => {
                            cluster.patch(resource, SYSTEM, ROLLOUT, patch).await
                        }
                        made => made,
                    };
                    if let Err(e) = made {
                        self.note(format!("  {resource}: {e}"));
                    }
                }
            }
            Op::Restart => unreachable!("restarts are carried out by the run itself"),
        }
    }
}

/// One seed's run: `Err` holds the report of every violation.
async fn run(plan: &Plan, module: PolicyModule) -> Result<(), String> {
    let (cluster, flaky) = Flaky::over_new_cluster(plan.knobs.conflicts, plan.seed ^ 0x5eed);
    let world = Arc::new(World {
        cluster: cluster.clone(),
        started: Instant::now(),
        log: Mutex::new(Vec::new()),
        rolled_out: Mutex::new(None),
    });
    let mut controller = Controller::start(flaky.clone(), module.clone(), &plan.knobs);
    for (pool, replicas, strategy) in &plan.knobs.pools {
        cluster
            .create(
                Resource::PodWarmPool,
                NS,
                json!({
                    "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                    "metadata": {"name": pool, "namespace": NS},
                    "spec": {
                        "replicas": replicas,
                        "updateStrategy": strategy.as_str(),
                        "template": {"image": "img-v0"},
                    },
                }),
            )
            .await
            .unwrap();
    }
    let filled = Instant::now() + PATIENCE;
    while !plan.knobs.pools.iter().all(|(pool, replicas, _)| {
        Snapshot::take(&cluster).ready_unclaimed(pool).len() == *replicas as usize
    }) {
        if Instant::now() > filled {
            controller.stop().await;
            return Err(report(
                plan,
                &world,
                &flaky,
                &["the pools never filled".into()],
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    world.note("pools filled".into());

    let mut overlapping = tokio::task::JoinSet::new();
    for step in &plan.steps {
        match &step.op {
            Op::Restart => {
                world.note("restart: stopping the controller".into());
                controller.stop().await;
                controller = Controller::start(flaky.clone(), module.clone(), &plan.knobs);
                world.note("restart: a new controller started".into());
            }
            op if step.overlap => {
                overlapping.spawn(world.clone().apply(op.clone()));
            }
            op => world.clone().apply(op.clone()).await,
        }
        tokio::time::sleep(step.gap).await;
    }
    while overlapping.join_next().await.is_some() {}
    world.note("plan done; waiting for quiet".into());

    let writes = || flaky.writes.load(Ordering::SeqCst);
    if let Err(never) = quiet(&cluster, &controller, writes).await {
        controller.stop().await;
        return Err(report(plan, &world, &flaky, &[never]));
    }
    world.note("quiet".into());
    // A candidate still being compiled writes nothing meanwhile: the rollout is waited for,
    // then quiet again.
    let mut violations = Vec::new();
    let rolled_out = world
        .rolled_out
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(digest) = rolled_out {
        let promoted = |status: &Value| {
            status["phase"] == "Promoted" && status["stable"]["digest"] == digest.as_str()
        };
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            let status = cluster
                .get(Resource::PolicyRollout, SYSTEM, ROLLOUT)
                .await
                .map(|o| o["status"].clone())
                .unwrap_or_default();
            if promoted(&status) || Instant::now() > deadline {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let serving = controller.manager.policy.current().digest().to_string();
        if !promoted(&status) || serving != digest {
            violations.push(format!(
                "6: the last candidate ({digest}) is not Promoted and serving within {}s: the \
                 module serving is {serving}; the rollout's status: {status}",
                PATIENCE.as_secs()
            ));
        }
        if let Err(never) = quiet(&cluster, &controller, writes).await {
            controller.stop().await;
            return Err(report(plan, &world, &flaky, &[never]));
        }
        world.note("rollout promoted; quiet".into());
        // A stage taken up after a restart is not announced again.
        let announced = |reason: &str| {
            cluster
                .objects(Resource::Event)
                .iter()
                .filter(|e| e["involvedObject"]["name"] == ROLLOUT && e["reason"] == reason)
                .map(|e| e["count"].as_u64().unwrap_or(1))
                .sum::<u64>()
        };
        let rollouts: Vec<&Vec<u8>> = plan
            .steps
            .iter()
            .filter_map(|s| match &s.op {
                Op::Rollout(_, weights) => Some(weights),
                _ => None,
            })
            .collect();
        let canaries = rollouts.iter().filter(|w| !w.is_empty()).count() as u64;
        for (reason, most) in [
            ("CanaryStarted", canaries),
            ("Promoted", rollouts.len() as u64),
        ] {
            if announced(reason) > most {
                violations.push(format!(
                    "6: {} {reason} Events for {most} rollout changes: a stage was started \
                     again, not taken up",
                    announced(reason)
                ));
            }
        }
    }
    violations.extend(Snapshot::take(&cluster).violations());

    let (before, logged) = (writes(), cluster.writes().len());
    tokio::time::sleep(SILENT).await;
    if writes() != before {
        let late: Vec<String> = cluster.writes()[logged..]
            .iter()
            .map(|w| format!("{} {} {}", w.verb, w.resource, w.name))
            .collect();
        violations.push(format!(
            "5: {} API write(s) after quiet, within {}ms: {}",
            writes() - before,
            SILENT.as_millis(),
            late.join(", ")
        ));
    }
    controller.stop().await;
    if violations.is_empty() {
        Ok(())
    } else {
        Err(report(plan, &world, &flaky, &violations))
    }
}

/// Waits until the controller has written nothing for [`QUIET`] with an empty queue; `Err`
/// names the writes still going on after [`PATIENCE`].
async fn quiet(
    cluster: &MemoryCluster,
    controller: &Controller,
    writes: impl Fn() -> u64,
) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    let mut last = writes();
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = writes();
        let queue = &controller.manager.queue;
        if now != last || !queue.is_empty() || queue.in_flight() > 0 {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= QUIET {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = cluster.writes();
            let tail: Vec<String> = log[log.len().saturating_sub(30)..]
                .iter()
                .map(|w| {
                    let error = w.error.map(|e| format!(" ({})", e.label()));
                    format!(
                        "{} {} {}{}",
                        w.verb,
                        w.resource,
                        w.name,
                        error.unwrap_or_default()
                    )
                })
                .collect();
            let rollout = cluster
                .get(Resource::PolicyRollout, SYSTEM, ROLLOUT)
                .await
                .map(|o| o["status"].clone())
                .unwrap_or_default();
            return Err(format!(
                "5: never quiet within {}s; the last writes: {}; the rollout's status: {rollout}",
                PATIENCE.as_secs(),
                tail.join(", ")
            ));
        }
    }
}

fn report(plan: &Plan, world: &World, flaky: &Flaky, violations: &[String]) -> String {
    let mut out = format!(
        "claims race failed, seed {:#x} (replay: CUBEPOD_CLAIMS_SEED={:#x} cargo test -p \
         cubepod-tests --test claims)\nknobs: {:?}; {} conflicts injected in {} controller \
         writes\nviolations ({}):\n",
        plan.seed,
        plan.seed,
        plan.knobs,
        flaky.injected.load(Ordering::SeqCst),
        flaky.writes.load(Ordering::SeqCst),
        violations.len()
    );
    for v in violations {
        out.push_str(&format!("  - {v}\n"));
    }
    out.push_str("plan:\n");
    for (i, step) in plan.steps.iter().enumerate() {
        let how = if step.overlap { " (overlapping)" } else { "" };
        out.push_str(&format!("  {:>2}. {}{how}\n", i + 1, step.op));
    }
    out.push_str("as carried out:\n");
    for line in world
        .log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

fn sandbox(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

fn name(object: &Value) -> Option<&str> {
    object["metadata"]["name"].as_str()
}

fn uid(object: &Value) -> Option<&str> {
    object["metadata"]["uid"].as_str()
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["labels"][key].as_str()
}

/// The controller ownerReference: (kind, name, uid).
fn controller_owner(object: &Value) -> Option<(&str, &str, &str)> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or(""),
                r["uid"].as_str().unwrap_or(""),
            )
        })
}

fn phase(object: &Value) -> &str {
    object["status"]["phase"].as_str().unwrap_or("")
}

/// The Ready condition's reason.
fn ready_reason(object: &Value) -> &str {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("")
}

fn is_ready(object: &Value) -> bool {
    phase(object) == "Running"
        && object["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn terminating(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// What the cluster holds, by name.
struct Snapshot {
    sandboxes: BTreeMap<String, Value>,
    pools: BTreeMap<String, Value>,
    children: Vec<(Resource, Value)>,
}

const CHILD_KINDS: [Resource; 5] = [
    Resource::Pod,
    Resource::PersistentVolumeClaim,
    Resource::Secret,
    Resource::NetworkPolicy,
    Resource::Service,
];

impl Snapshot {
    fn take(cluster: &MemoryCluster) -> Snapshot {
        let by_name = |resource| {
            cluster
                .objects(resource)
                .into_iter()
                .filter_map(|o| Some((name(&o)?.to_string(), o)))
                .collect::<BTreeMap<_, _>>()
        };
        Snapshot {
            sandboxes: by_name(Resource::Sandbox),
            pools: by_name(Resource::PodWarmPool),
            children: CHILD_KINDS
                .iter()
                .flat_map(|&r| cluster.objects(r).into_iter().map(move |o| (r, o)))
                .collect(),
        }
    }

    fn members<'a>(&'a self, pool: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.sandboxes
            .iter()
            .filter(move |(_, s)| label(s, POOL_LABEL) == Some(pool))
    }

    fn ready_unclaimed(&self, pool: &str) -> Vec<String> {
        self.members(pool)
            .filter(|(_, m)| label(m, CLAIMED_BY).is_none() && !terminating(m) && is_ready(m))
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn claims(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.sandboxes
            .iter()
            .filter(|(_, s)| s["spec"]["warmPool"].is_string())
    }

    fn pod(&self, name: &str) -> Option<&Value> {
        self.children
            .iter()
            .find(|(r, o)| *r == Resource::Pod && self::name(o) == Some(name))
            .map(|(_, o)| o)
    }

    /// Who a member's `cubepod.io/claimed-by` label names, as said in a violation.
    fn holder(&self, member: &str) -> String {
        match self.sandboxes.get(member) {
            None => "nobody: it does not exist".to_string(),
            Some(m) => label(m, CLAIMED_BY).unwrap_or("nobody").to_string(),
        }
    }

    fn sandbox_by_uid(&self, uid: &str) -> Option<&Value> {
        self.sandboxes.values().find(|s| self::uid(s) == Some(uid))
    }

    /// Every invariant's violations, each naming its objects.
    fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();

        // 1. One claim per member, and member and claim name each other.
        let mut named: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (claim, c) in self.claims() {
            if let Some(member) = c["status"]["claimedMember"].as_str() {
                named.entry(member).or_default().push(claim);
            }
        }
        for (member, claims) in &named {
            if claims.len() > 1 {
                v.push(format!(
                    "1: member {member} is status.claimedMember of {} claims: {} (the member \
                     is labelled claimed-by {})",
                    claims.len(),
                    claims.join(", "),
                    self.holder(member)
                ));
            }
            for claim in claims {
                let holder = self.holder(member);
                if holder != *claim {
                    v.push(format!(
                        "1: claim {claim} names member {member}, which is claimed by {holder}"
                    ));
                }
            }
        }
        for (member, m) in &self.sandboxes {
            let Some(holder) = label(m, CLAIMED_BY) else {
                continue;
            };
            match controller_owner(m) {
                Some(("Sandbox", owner, _)) if owner == holder => {}
                other => v.push(format!(
                    "1: member {member} is labelled claimed-by {holder} but its controller \
                     owner is {other:?}"
                )),
            }
            match self.sandboxes.get(holder) {
                None => {} // reported under 3
                Some(c) if c["status"]["claimedMember"] == member.as_str() => {}
                Some(c) => v.push(format!(
                    "1: member {member} is claimed by {holder}, whose status.claimedMember is \
                     {} (a member taken and never used)",
                    c["status"]["claimedMember"]
                )),
            }
        }

        // 2. Every claim runs (on its member or cold), or is paused if asked.
        for (claim, c) in self.claims() {
            let member = c["status"]["claimedMember"].as_str();
            let (phase, reason) = (phase(c), ready_reason(c));
            if reason == "ClaimedMemberGone" || reason == "Claiming" {
                let member = member.unwrap_or("?");
                v.push(format!(
                    "2: claim {claim} is {phase}/{reason}: its member {member} is claimed by {}",
                    self.holder(member)
                ));
                continue;
            }
            let paused = c["spec"]["desiredState"] == "Paused";
            let wanted = if paused { "Paused" } else { "Running" };
            if phase != wanted {
                v.push(format!(
                    "2: claim {claim} asks to be {wanted} but is {phase}/{reason} (member {})",
                    member.unwrap_or("none")
                ));
                continue;
            }
            let pod_of = |name: &str| {
                self.pod(name)
                    .filter(|p| !terminating(p))
                    .map(|p| p["status"]["podIP"].clone())
            };
            let own_pod = pod_of(claim);
            let ip = &c["status"]["podIP"];
            match (member, paused) {
                (Some(member), _) => {
                    if own_pod.is_some() {
                        v.push(format!(
                            "2: claim {claim} holds member {member} and has a Pod of its own"
                        ));
                    }
                    let member_pod = pod_of(member);
                    if paused && member_pod.is_some() {
                        v.push(format!(
                            "2: claim {claim} is Paused but its member {member}'s Pod runs"
                        ));
                    }
                    if !paused && (member_pod.as_ref() != Some(ip) || !ip.is_string()) {
                        v.push(format!(
                            "2: claim {claim} reports podIP {ip} but its member {member}'s Pod \
                             has {member_pod:?}"
                        ));
                    }
                }
                (None, false) => {
                    if own_pod.as_ref() != Some(ip) || !ip.is_string() {
                        v.push(format!(
                            "2: claim {claim} runs cold with podIP {ip} but its Pod has \
                             {own_pod:?}"
                        ));
                    }
                }
                (None, true) => {
                    if own_pod.is_some() {
                        v.push(format!("2: claim {claim} is Paused but its Pod runs"));
                    }
                }
            }
        }

        // 3. No child or member outlives its owner; nothing left terminating.
        for (resource, child) in &self.children {
            let child_name = name(child).unwrap_or("?");
            if terminating(child) {
                v.push(format!(
                    "3: {} {child_name} is still terminating",
                    resource.kind()
                ));
            }
            match controller_owner(child) {
                None => v.push(format!(
                    "3: {} {child_name} has no controller ownerReference",
                    resource.kind()
                )),
                Some((kind, owner, owner_uid)) => {
                    if kind != "Sandbox" || self.sandbox_by_uid(owner_uid).is_none() {
                        v.push(format!(
                            "3: {} {child_name} is orphaned: its owner {kind} {owner} (uid \
                             {owner_uid}) does not exist",
                            resource.kind()
                        ));
                    }
                }
            }
        }
        for (sandbox, s) in &self.sandboxes {
            if terminating(s) {
                v.push(format!(
                    "3: Sandbox {sandbox} is still terminating (finalizers {})",
                    s["metadata"]["finalizers"]
                ));
            }
            let Some(pool) = label(s, POOL_LABEL) else {
                continue;
            };
            let owner = controller_owner(s);
            let exists = match owner {
                Some(("Sandbox", _, owner_uid)) => self.sandbox_by_uid(owner_uid).is_some(),
                Some(("PodWarmPool", _, owner_uid)) => {
                    self.pools.values().any(|p| uid(p) == Some(owner_uid))
                }
                _ => false,
            };
            if !exists {
                v.push(format!(
                    "3: member {sandbox} of pool {pool} is orphaned: its owner {owner:?} does \
                     not exist"
                ));
            }
        }

        // 4. Every pool back at its size.
        for (pool, p) in &self.pools {
            let replicas = p["spec"]["replicas"].as_u64().unwrap_or(0) as u32;
            let wanted = replicas.min(MAX_POOL_REPLICAS) as usize;
            let image = p["spec"]["template"]["image"].as_str().unwrap_or("");
            let recreate = p["spec"]["updateStrategy"] != "OnReplenish";
            let unclaimed: Vec<(&String, &Value)> = self
                .members(pool)
                .filter(|(_, m)| label(m, CLAIMED_BY).is_none())
                .collect();
            let not_ready: Vec<String> = unclaimed
                .iter()
                .filter(|(_, m)| !is_ready(m))
                .map(|(n, m)| format!("{n} ({}/{})", phase(m), ready_reason(m)))
                .collect();
            if !not_ready.is_empty() {
                v.push(format!(
                    "4: pool {pool} has unclaimed members not ready: {}",
                    not_ready.join(", ")
                ));
            }
            let stale: Vec<&str> = unclaimed
                .iter()
                .filter(|(_, m)| recreate && m["spec"]["image"] != image)
                .map(|(n, _)| n.as_str())
                .collect();
            if !stale.is_empty() {
                v.push(format!(
                    "4: pool {pool} (Recreate, template image {image}) keeps members of an \
                     older template: {}",
                    stale.join(", ")
                ));
            }
            let good: Vec<&str> = unclaimed
                .iter()
                .filter(|(_, m)| is_ready(m) && !(recreate && m["spec"]["image"] != image))
                .map(|(n, _)| n.as_str())
                .collect();
            if good.len() != wanted {
                v.push(format!(
                    "4: pool {pool} wants {wanted} (spec.replicas {replicas}, cap \
                     {MAX_POOL_REPLICAS}) but has {} ready, unclaimed members of its template: \
                     {}",
                    good.len(),
                    good.join(", ")
                ));
            }
            let reported = p["status"]["readyReplicas"].as_u64().unwrap_or(0) as usize;
            if reported != good.len() {
                v.push(format!(
                    "4: pool {pool}'s status.readyReplicas is {reported}, the cluster holds {}",
                    good.len()
                ));
            }
        }
        v
    }
}
