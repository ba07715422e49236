//! Warm-pool claims per second: the real controller binary against the fake API server fills a
//! `PodWarmPool` of N members (cold: the run's own cold sandboxes/s), then eight clients POST N
//! claiming Sandboxes, at once (a burst: as fast as the fake takes them) or paced at a sustained
//! rate. Each claim's latency runs from its own POST to the fake's watch showing it Running
//! with a pod IP: in a burst, mostly its wait behind the claims posted before it; paced at a
//! rate the controller keeps up with, the claim's own time. Once the pool has refilled and the
//! controller is quiet, the cluster is checked (no member held by two claims, no claim failed
//! or stuck) and the writes are split into the claims' own and the refill's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use cubepod_apiserver::{MemoryCluster, WriteRecord};
use cubepod_kube::{ApiErrorKind, Cluster, Resource};
use serde_json::{Value, json};

use super::client::ApiClient;
use super::create::{Perf, QUIET, Setup, first_seen};
use super::process::{ControllerProcess, cpu_of};
use super::{NS, Protocol, fake_server};

/// The clients that POST the claims, one request in flight each.
const CLIENTS: usize = 8;
const POOL: &str = "bench-pool";
const IMAGE: &str = "ghcr.io/cubepod/sandbox-python:3.12";

/// One burst of N claims on a pool of N ready members.
#[derive(Clone, Debug)]
pub struct ClaimRun {
    pub protocol: Protocol,
    pub n: usize,
    /// The claims' POSTs paced at this many per second; `None`: a burst.
    pub pace: Option<f64>,
    /// From the pool's creation to its N-th member Running: the run's cold sandboxes/s.
    pub fill: Duration,
    /// From the first claim's POST to the N-th claim Running with a pod IP.
    pub took: Duration,
    /// Each claim's, from its own POST.
    pub latencies: Vec<Duration>,
    /// The controller's writes of the claims and the members they adopted (finalizers,
    /// adoptions, statuses), Events apart.
    pub claim_writes: BTreeMap<String, usize>,
    /// Events about the claims.
    pub claim_events: usize,
    /// Everything else the controller wrote until quiet: the pool's refill.
    pub refill_writes: usize,
    /// Writes answered 409 Conflict, the refill's included.
    pub conflicts: usize,
    /// Members held by two claims, or named by two claims' status.
    pub double_claims: usize,
    /// Claims not Running with a pod IP once quiet.
    pub not_running: Vec<String>,
    /// The controller's CPU from the first POST to the N-th claim Running.
    pub controller_cpu: Duration,
    /// The controller's CPU over the pool's cold fill, from its creation to its N-th member
    /// Running (as the claims' is counted): N cold sandboxes, in the same process and on the
    /// same machine as the claims.
    pub fill_cpu: Duration,
    /// The controller's writes over the pool's cold fill (its members, their children and
    /// statuses, Events).
    pub fill_writes: usize,
    /// The refill's writes made by the time the N-th claim ran: cold-sandbox work inside the
    /// claims' CPU window, which [`Self::cpu_per_claim_own_micros`] takes out.
    pub refill_writes_in_window: usize,
    /// This process's CPU over the same time: the fake API server, the clients and the watch.
    pub bench_cpu: Duration,
    pub warnings: Vec<String>,
}

impl ClaimRun {
    pub fn claims_per_second(&self) -> f64 {
        self.n as f64 / self.took.as_secs_f64()
    }

    /// The pool's fill, as sandboxes started cold per second.
    pub fn cold_per_second(&self) -> f64 {
        self.n as f64 / self.fill.as_secs_f64()
    }

    /// Latency percentile `p` (0-100), ms.
    pub fn latency_ms(&self, p: f64) -> f64 {
        let ms: Vec<f64> = self
            .latencies
            .iter()
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        super::stats::percentile(&ms, p).unwrap_or(f64::NAN)
    }

    pub fn max_latency_ms(&self) -> f64 {
        self.latencies
            .iter()
            .max()
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    }

    pub fn writes_per_claim(&self) -> f64 {
        self.claim_writes.values().sum::<usize>() as f64 / self.n as f64
    }

    pub fn conflicts_per_claim(&self) -> f64 {
        self.conflicts as f64 / self.n as f64
    }

    pub fn cpu_per_claim_micros(&self) -> f64 {
        self.controller_cpu.as_secs_f64() / self.n as f64 * 1e6
    }

    /// The controller's CPU per member of the cold fill, µs.
    pub fn cpu_per_cold_micros(&self) -> f64 {
        self.fill_cpu.as_secs_f64() / self.n as f64 * 1e6
    }

    /// The controller's CPU per claim against its CPU per cold sandbox, in this run.
    pub fn claim_to_cold_cpu(&self) -> f64 {
        self.cpu_per_claim_micros() / self.cpu_per_cold_micros()
    }

    /// The controller's CPU per claim less the refill's share of the window: the refill's
    /// writes made in it, each at the fill's CPU per write of this run (an estimate: a cold
    /// sandbox's CPU follows its writes and the reconciles they cause), µs.
    pub fn cpu_per_claim_own_micros(&self) -> f64 {
        let per_write = self.fill_cpu.as_secs_f64() / self.fill_writes.max(1) as f64;
        let refill = per_write * self.refill_writes_in_window as f64;
        (self.controller_cpu.as_secs_f64() - refill).max(0.0) / self.n as f64 * 1e6
    }

    /// [`Self::cpu_per_claim_own_micros`] against the CPU per cold sandbox, in this run.
    pub fn claim_own_to_cold_cpu(&self) -> f64 {
        self.cpu_per_claim_own_micros() / self.cpu_per_cold_micros()
    }

    /// The fake's (and its clients') CPU per claim, µs.
    pub fn bench_cpu_per_claim_micros(&self) -> f64 {
        self.bench_cpu.as_secs_f64() / self.n as f64 * 1e6
    }
}

fn claim_name(i: usize) -> String {
    format!("claim-{i:05}")
}

fn pool_manifest(n: usize) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1",
        "kind": "PodWarmPool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {"replicas": n, "template": {"image": IMAGE}},
    })
}

fn claim_manifest(name: &str) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": IMAGE, "warmPool": POOL},
    })
}

fn is_running(o: &Value) -> bool {
    o["status"]["phase"] == "Running" && o["status"]["podIP"].is_string()
}

fn name_of(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The pool's members Running, by name.
fn running_members(cluster: &MemoryCluster) -> Vec<String> {
    cluster
        .objects(Resource::Sandbox)
        .iter()
        .filter(|o| o["metadata"]["labels"]["cubepod.io/pool"] == POOL && is_running(o))
        .map(name_of)
        .collect()
}

/// A run of N claims on a pool of N: a burst, or POSTs paced at `pace` per second.
pub fn run(setup: &Setup<'_>, n: usize, pace: Option<f64>) -> Result<ClaimRun> {
    let runtime = setup.runtime;
    let fake = fake_server(setup.pod_start_delay, setup.protocol.tls(), setup.token)?;
    let dir = tempfile::tempdir().context("temp dir")?;
    let kubeconfig = fake
        .write_kubeconfig(
            dir.path(),
            &crate::apiserver::KubeconfigAuth::Token(setup.token.to_string()),
        )
        .context("writing a kubeconfig")?;
    let mut args = vec![format!("--max-pool-replicas={n}")];
    args.extend(setup.controller_args.iter().cloned());
    let mut controller = ControllerProcess::start(setup.binary, &kubeconfig, &args)?;
    controller.wait_ready(Duration::from_secs(120))?;
    let cluster = fake.cluster();
    let deadline = Duration::from_secs(if n <= 100 { 60 } else { 600 });

    // The pool, filled cold: the run's own cold start rate, and its CPU per cold sandbox.
    cluster.clear_writes();
    let fill_cpu_before = controller.cpu()?;
    let filled = Instant::now();
    runtime
        .block_on(cluster.create(Resource::PodWarmPool, NS, pool_manifest(n)))
        .map_err(|e| anyhow!("creating the pool: {e}"))?;
    while running_members(&cluster).len() < n {
        if filled.elapsed() > deadline {
            bail!(
                "the pool of {n} did not fill within {deadline:?}: {} Running",
                running_members(&cluster).len()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let fill = filled.elapsed();
    let fill_cpu = controller.cpu()?.saturating_sub(fill_cpu_before);
    controller.wait_quiet(0.0, QUIET, Duration::from_secs(600))?;
    let members: HashSet<String> = running_members(&cluster).into_iter().collect();
    // The bench's own write of the pool apart.
    let fill_writes = cluster.writes().len().saturating_sub(1);
    cluster.clear_writes();
    fake.clear_requests();

    let names: Vec<String> = (0..n).map(claim_name).collect();
    let client = Arc::new(runtime.block_on(ApiClient::connect(&fake, setup.token, CLIENTS))?);
    let running = {
        let names: HashSet<String> = names.iter().cloned().collect();
        let count = names.len();
        runtime.spawn(first_seen(
            cluster.clone(),
            Resource::Sandbox,
            cluster.resource_version(),
            move |o| names.contains(&name_of(o)) && is_running(o),
            move |seen| seen >= count,
        ))
    };
    let posted: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let perf = Perf::start(setup.perf.as_deref(), controller.pid())?;
    let cpu_before = (controller.cpu()?, cpu_of("/proc/self/stat")?);
    let started = Instant::now();
    let post = {
        let (client, posted, names) = (client.clone(), posted.clone(), Arc::new(names.clone()));
        let next = Arc::new(AtomicUsize::new(0));
        runtime.spawn(async move {
            let mut clients = tokio::task::JoinSet::new();
            for c in 0..CLIENTS {
                let (client, posted, names, next) =
                    (client.clone(), posted.clone(), names.clone(), next.clone());
                clients.spawn(async move {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(name) = names.get(index) else {
                            return Ok::<(), anyhow::Error>(());
                        };
                        if let Some(rate) = pace {
                            let due = started + Duration::from_secs_f64(index as f64 / rate);
                            tokio::time::sleep_until(due.into()).await;
                        }
                        let body = Bytes::from(claim_manifest(name).to_string());
                        let at = Instant::now();
                        let status = client
                            .post(c, &Resource::Sandbox.collection_path(NS), body)
                            .await?;
                        if status != 201 {
                            bail!("POST of claim {name} answered {status}");
                        }
                        posted
                            .lock()
                            .map_err(|_| anyhow!("a client panicked"))?
                            .insert(name.clone(), at);
                    }
                });
            }
            while let Some(done) = clients.join_next().await {
                done.context("a client task panicked")??;
            }
            Ok::<(), anyhow::Error>(())
        })
    };
    let waited = runtime.block_on(async {
        tokio::time::timeout(deadline, async {
            post.await.context("the clients")??;
            running.await.context("the claims' watch")?
        })
        .await
    });
    let Ok(running_at) = waited else {
        let phases: BTreeMap<String, usize> = cluster
            .objects(Resource::Sandbox)
            .iter()
            .filter(|o| o["spec"]["warmPool"] == POOL)
            .fold(BTreeMap::new(), |mut phases, o| {
                let key = format!("{} {}", o["status"]["phase"], o["status"]["conditions"]);
                *phases.entry(key).or_insert(0) += 1;
                phases
            });
        bail!(
            "{n} claims did not all run within {deadline:?}; claims by phase and conditions: \
             {phases:?}; controller warnings: {:?}",
            controller.log_levels()
        );
    };
    let running_at = running_at?;
    let took = running_at.values().max().map_or(Duration::ZERO, |last| {
        last.saturating_duration_since(started)
    });
    let controller_cpu = controller.cpu()?.saturating_sub(cpu_before.0);
    let bench_cpu = cpu_of("/proc/self/stat")?.saturating_sub(cpu_before.1);
    let claims: HashSet<&String> = names.iter().collect();
    let refill_writes_in_window = cluster
        .writes()
        .iter()
        .filter(|w| written_for(w, &claims, &members) == WrittenFor::Refill)
        .count();
    perf.stop();
    let posted = posted
        .lock()
        .map_err(|_| anyhow!("a client panicked"))?
        .clone();
    let latencies: Vec<Duration> = names
        .iter()
        .filter_map(|name| {
            Some(
                running_at
                    .get(name)?
                    .saturating_duration_since(*posted.get(name)?),
            )
        })
        .collect();

    // The refill, then quiet: every write of the burst is in.
    let refilled = Instant::now();
    while running_members(&cluster)
        .iter()
        .filter(|m| !members.contains(*m))
        .count()
        < n
    {
        if refilled.elapsed() > deadline {
            bail!("the pool did not refill within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    controller.wait_quiet(0.0, QUIET, Duration::from_secs(600))?;
    let writes = cluster.writes();
    let mut claim_writes = BTreeMap::new();
    let (mut claim_events, mut refill_writes, mut conflicts) = (0, 0, 0);
    for w in &writes {
        if w.error == Some(ApiErrorKind::Conflict) {
            conflicts += 1;
        }
        match written_for(w, &claims, &members) {
            WrittenFor::ClaimPost => {}
            WrittenFor::Claim => {
                *claim_writes
                    .entry(format!("{} sandboxes", w.verb))
                    .or_insert(0) += 1;
            }
            WrittenFor::ClaimEvent => claim_events += 1,
            WrittenFor::Refill => refill_writes += 1,
        }
    }
    let objects = cluster.objects(Resource::Sandbox);
    let mut held: HashMap<String, usize> = HashMap::new();
    for o in &objects {
        if let Some(claim) = o["metadata"]["labels"]["cubepod.io/claimed-by"].as_str() {
            *held.entry(claim.to_string()).or_insert(0) += 1;
        }
        if let Some(member) = o["status"]["claimedMember"].as_str() {
            *held.entry(format!("member {member}")).or_insert(0) += 1;
        }
    }
    let double_claims = held.values().filter(|count| **count > 1).count();
    let not_running: Vec<String> = objects
        .iter()
        .filter(|o| claims.contains(&name_of(o)) && !is_running(o))
        .map(|o| {
            format!(
                "{} {} {}",
                name_of(o),
                o["status"]["phase"],
                o["status"]["conditions"]
            )
        })
        .collect();
    let (_, warnings) = controller.log_levels();
    controller.stop(Duration::from_secs(15));
    Ok(ClaimRun {
        protocol: setup.protocol,
        n,
        pace,
        fill,
        took,
        latencies,
        claim_writes,
        claim_events,
        refill_writes,
        conflicts,
        double_claims,
        not_running,
        controller_cpu,
        fill_cpu,
        fill_writes,
        refill_writes_in_window,
        bench_cpu,
        warnings,
    })
}

/// Whose a write of the claims run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WrittenFor {
    /// The bench's POST of a claim.
    ClaimPost,
    /// The controller's, of a claim or of a member it adopted (finalizers, adoptions,
    /// statuses).
    Claim,
    /// An Event about a claim.
    ClaimEvent,
    /// Everything else: the pool's refill.
    Refill,
}

fn written_for(
    w: &WriteRecord,
    claims: &HashSet<&String>,
    members: &HashSet<String>,
) -> WrittenFor {
    if w.verb == "create" && w.resource == Resource::Sandbox && claims.contains(&w.name) {
        return WrittenFor::ClaimPost;
    }
    // An Event's name is its object's, a dot, and a suffix.
    let about_claim = |name: &str| {
        name.split_once('.')
            .is_some_and(|(object, _)| claims.contains(&object.to_string()))
    };
    match w.resource {
        Resource::Sandbox if claims.contains(&w.name) || members.contains(&w.name) => {
            WrittenFor::Claim
        }
        Resource::Event if about_claim(&w.name) => WrittenFor::ClaimEvent,
        _ => WrittenFor::Refill,
    }
}
