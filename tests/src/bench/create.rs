//! Sandboxes per second: the real controller binary against the fake API server (HTTPS with
//! HTTP/2, or plain HTTP/1.1); a load generator POSTs N Sandboxes over HTTP/2 (32 streams in
//! flight) and the fake's own watch times the N-th Pod and the N-th Running status. Then the API
//! writes and requests the controller made, once quiet, and (over HTTP/2) a second controller
//! over the converged state: its resync's writes and RSS.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use cubepod_apiserver::{MemoryCluster, WriteRecord};
use cubepod_kube::{Cluster, Resource, Scope, WatchEventType};
use serde_json::Value;
use tokio::runtime::Runtime;

use super::client::{ApiClient, Burst, post_all};
use super::process::{ControllerProcess, Memory, Scrape, cpu_of};
use super::seed::{sandbox_manifest, sandbox_name};
use super::{NS, Protocol, fake_server};

/// Streams the load generator keeps in flight, over this many connections.
const IN_FLIGHT: usize = 32;
const CONNECTIONS: usize = 2;
/// No reconcile and no API request for this long: the controller is quiet.
pub const QUIET: Duration = Duration::from_millis(1500);

/// Where the time of a run went, from the controller's own metrics (means, seconds).
#[derive(Clone, Debug, Default)]
pub struct Breakdown {
    pub reconcile_mean: Option<f64>,
    /// Sandbox reconciles, all results.
    pub reconciles: f64,
    pub guest_call_mean: BTreeMap<String, f64>,
    pub request_mean: BTreeMap<String, f64>,
    pub requests: BTreeMap<String, f64>,
}

impl Breakdown {
    pub fn of(scrape: &Scrape) -> Self {
        let mut breakdown = Breakdown {
            reconcile_mean: scrape
                .mean("cubepod_reconcile_duration_seconds", &[("kind", "sandbox")]),
            reconciles: scrape.sum("cubepod_reconciles_total", &[("kind", "sandbox")]),
            ..Breakdown::default()
        };
        for export in scrape.label_values("cubepod_guest_call_duration_seconds_count", "export") {
            if let Some(mean) = scrape.mean(
                "cubepod_guest_call_duration_seconds",
                &[("export", export.as_str())],
            ) {
                breakdown.guest_call_mean.insert(export, mean);
            }
        }
        for verb in scrape.label_values("cubepod_kube_request_duration_seconds_count", "verb") {
            for resource in
                scrape.label_values("cubepod_kube_request_duration_seconds_count", "resource")
            {
                let labels = [("verb", verb.as_str()), ("resource", resource.as_str())];
                if let Some(mean) = scrape.mean("cubepod_kube_request_duration_seconds", &labels) {
                    let key = format!("{verb} {resource}");
                    breakdown.request_mean.insert(key.clone(), mean);
                    breakdown
                        .requests
                        .insert(key, scrape.sum("cubepod_kube_requests_total", &labels));
                }
            }
        }
        breakdown
    }
}

/// One run at N sandboxes.
#[derive(Clone, Debug)]
pub struct CreateRun {
    pub protocol: Protocol,
    pub n: usize,
    pub post: Burst,
    pub to_pods: Duration,
    pub to_running: Duration,
    /// The controller's state writes once quiet, by "verb resource" (the load's creates and
    /// the Events left out).
    pub writes: BTreeMap<String, usize>,
    /// Its Event writes (creates, and patches counting a repeat), once quiet.
    pub event_writes: usize,
    pub failed_writes: usize,
    /// Every HTTP request the controller made from the first POST until quiet (lists, watches,
    /// reads and writes; the load generator's own left out).
    pub requests: usize,
    /// Watch requests the controller made while creating (1 per resource when none ends).
    pub watches: usize,
    pub controller_cpu: Duration,
    /// Instructions the controller retired over the same span (`perf stat`, user and kernel;
    /// or callgrind's, user space, in a run under it), if counted.
    pub instructions: Option<u64>,
    /// This process's CPU over the same span: the fake API server and the load generator.
    pub bench_cpu: Duration,
    pub created_memory: Memory,
    pub breakdown: Breakdown,
    pub resync_writes: BTreeMap<String, usize>,
    /// From the second controller's start until it had reconciled every sandbox and gone quiet
    /// (the quiet window not counted).
    pub resync_took: Duration,
    pub resync_memory: Memory,
    pub warnings: Vec<String>,
}

impl CreateRun {
    pub fn pods_per_second(&self) -> f64 {
        self.n as f64 / self.to_pods.as_secs_f64()
    }

    pub fn running_per_second(&self) -> f64 {
        self.n as f64 / self.to_running.as_secs_f64()
    }

    pub fn writes_per_sandbox(&self) -> f64 {
        self.writes.values().sum::<usize>() as f64 / self.n as f64
    }

    pub fn events_per_sandbox(&self) -> f64 {
        self.event_writes as f64 / self.n as f64
    }

    /// The controller's CPU (user + system) from the first POST to the N-th Running, per
    /// sandbox, µs.
    pub fn cpu_per_sandbox_micros(&self) -> f64 {
        self.controller_cpu.as_secs_f64() / self.n as f64 * 1e6
    }

    /// Instructions per sandbox, millions, if counted.
    pub fn instructions_per_sandbox_millions(&self) -> Option<f64> {
        self.instructions.map(|i| i as f64 / self.n as f64 / 1e6)
    }

    /// The same CPU per HTTP request the controller made, µs.
    pub fn cpu_per_request_micros(&self) -> f64 {
        self.controller_cpu.as_secs_f64() / self.requests.max(1) as f64 * 1e6
    }
}

/// Groups the writes by "verb resource", leaving out the load generator's Sandbox creates.
pub fn group(writes: &[WriteRecord], leave_out_sandbox_creates: bool) -> BTreeMap<String, usize> {
    let mut grouped = BTreeMap::new();
    for w in writes {
        if leave_out_sandbox_creates && w.verb == "create" && w.resource == Resource::Sandbox {
            continue;
        }
        *grouped
            .entry(format!("{} {}", w.verb, w.resource.plural()))
            .or_insert(0) += 1;
    }
    grouped
}

/// Waits on the cluster's own watch for `n` distinct objects of `resource` in [`NS`] that
/// satisfy `done`, from `resource_version` on; returns when the n-th was seen.
async fn reach(
    cluster: Arc<MemoryCluster>,
    resource: Resource,
    resource_version: String,
    n: usize,
    done: fn(&Value) -> bool,
) -> Result<Instant> {
    let seen = first_seen(cluster, resource, resource_version, done, |seen| seen >= n).await?;
    Ok(seen.into_values().max().unwrap_or_else(Instant::now))
}

/// Watches `resource` in [`NS`] from `resource_version` on, and notes when each object was
/// first seen satisfying `done`, until `enough` holds of how many were; those times, by name.
pub(super) async fn first_seen(
    cluster: Arc<MemoryCluster>,
    resource: Resource,
    mut resource_version: String,
    done: impl Fn(&Value) -> bool,
    enough: impl Fn(usize) -> bool,
) -> Result<HashMap<String, Instant>> {
    let scope = Scope {
        resource,
        namespace: NS.to_string(),
        label_selector: None,
    };
    let mut seen = HashMap::new();
    let name = |o: &Value| {
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    loop {
        let mut events = match cluster.watch(&scope, &resource_version).await {
            Ok(events) => events,
            Err(_gone) => {
                let list = cluster
                    .list(&scope)
                    .await
                    .map_err(|e| anyhow!("listing {}: {e}", resource.plural()))?;
                let now = Instant::now();
                for o in list.items.iter().filter(|o| done(o)) {
                    seen.entry(name(o)).or_insert(now);
                }
                resource_version = list.resource_version;
                if enough(seen.len()) {
                    return Ok(seen);
                }
                continue;
            }
        };
        while let Some(event) = events.recv().await {
            let Ok(event) = event else { break };
            if let Some(version) = event.object["metadata"]["resourceVersion"].as_str() {
                resource_version = version.to_string();
            }
            if event.kind != WatchEventType::Deleted
                && event.kind != WatchEventType::Bookmark
                && done(&event.object)
            {
                seen.entry(name(&event.object)).or_insert_with(Instant::now);
                if enough(seen.len()) {
                    return Ok(seen);
                }
            }
        }
        // The watch ended (its buffer overflowed): resume from the last version seen.
    }
}

/// `perf record` of a process until stopped, when asked for.
pub(super) struct Perf(Option<Child>);

/// Samples per second of `--perf`: a run at N = 3,000 is about 2 s of the controller's CPU,
/// and at 499 Hz its ~1,000 samples left every entry under 1% within the sampling noise.
const PERF_HZ: &str = "1999";

impl Perf {
    pub(super) fn start(out: Option<&Path>, pid: u32) -> Result<Self> {
        let Some(out) = out else {
            return Ok(Self(None));
        };
        let child = Command::new("perf")
            .args(["record", "-F", PERF_HZ, "--call-graph", "dwarf,16384"])
            .args(["-p", &pid.to_string(), "-o"])
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting perf record")?;
        // perf needs a moment to attach.
        std::thread::sleep(Duration::from_millis(300));
        Ok(Self(Some(child)))
    }

    pub(super) fn stop(self) {
        if let Some(mut child) = self.0 {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

/// `perf stat` counting the instructions a process retires (user and kernel) until stopped:
/// a figure of its work that other load on the machine moves far less than its CPU time.
/// `None` where perf cannot count (not installed, not permitted).
struct Instructions(Option<(Child, tempfile::NamedTempFile)>);

impl Instructions {
    fn start(pid: u32) -> Self {
        let Ok(out) = tempfile::NamedTempFile::new() else {
            return Self(None);
        };
        let child = Command::new("perf")
            .args(["stat", "-x", ",", "-e", "instructions:u,instructions:k"])
            .args(["-p", &pid.to_string(), "-o"])
            .arg(out.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        // perf needs a moment to attach.
        std::thread::sleep(Duration::from_millis(200));
        Self(child.ok().map(|child| (child, out)))
    }

    /// Stops counting; the instructions counted, user + kernel.
    fn stop(self) -> Option<u64> {
        let (mut child, out) = self.0?;
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let _ = child.wait();
        let text = std::fs::read_to_string(out.path()).ok()?;
        let counts: Vec<u64> = text
            .lines()
            .filter(|line| line.contains("instructions"))
            .filter_map(|line| line.split(',').next()?.trim().parse().ok())
            .collect();
        (!counts.is_empty()).then(|| counts.iter().sum())
    }
}

/// Instructions counted by callgrind, in a controller run under valgrind
/// ([`callgrind_wrapper`]): the counts are zeroed when counting starts and dumped when it
/// stops. Repeatable, where CPU time moves with the machine; user space only.
struct Callgrind {
    pid: u32,
    dir: PathBuf,
}

/// valgrind running the controller under callgrind, its dumps in `dir`.
fn callgrind_wrapper(dir: &Path) -> Vec<String> {
    vec![
        "valgrind".to_string(),
        "--tool=callgrind".to_string(),
        // wasmtime writes the policy's machine code at run time.
        "--smc-check=all-non-file".to_string(),
        format!("--callgrind-out-file={}/callgrind.out.%p", dir.display()),
    ]
}

impl Callgrind {
    fn start(pid: u32, dir: &Path) -> Result<Self> {
        callgrind_control("-z", pid)?;
        Ok(Self {
            pid,
            dir: dir.to_path_buf(),
        })
    }

    /// Dumps the counts; the instructions (`Ir`) since the start.
    fn stop(self) -> Result<u64> {
        callgrind_control("-d", self.pid)?;
        // Dumps are `callgrind.out.<pid>.<n>`, numbered from 1: the newest is this one.
        let prefix = format!("callgrind.out.{}.", self.pid);
        let newest = std::fs::read_dir(&self.dir)
            .with_context(|| format!("reading {}", self.dir.display()))?
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                let name = path.file_name()?.to_str()?;
                let number: u32 = name.strip_prefix(&prefix)?.parse().ok()?;
                Some((number, path))
            })
            .max()
            .map(|(_, path)| path)
            .with_context(|| format!("callgrind wrote no dump in {}", self.dir.display()))?;
        let text = std::fs::read_to_string(&newest)
            .with_context(|| format!("reading {}", newest.display()))?;
        text.lines()
            .find_map(|line| line.strip_prefix("summary:"))
            .and_then(|counts| counts.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("no `summary:` line in {}", newest.display()))
    }
}

/// `callgrind_control <flag> <pid>`, which waits for callgrind to carry the command out.
fn callgrind_control(flag: &str, pid: u32) -> Result<()> {
    let out = Command::new("callgrind_control")
        .args([flag, &pid.to_string()])
        .output()
        .context("running callgrind_control (valgrind's)")?;
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !said.contains("OK") {
        bail!(
            "callgrind_control {flag} {pid} failed: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// What counts the controller's instructions over the measured span.
enum Counting {
    Perf(Instructions),
    Callgrind(Callgrind),
}

impl Counting {
    fn stop(self) -> Result<Option<u64>> {
        match self {
            Counting::Perf(perf) => Ok(perf.stop()),
            Counting::Callgrind(callgrind) => callgrind.stop().map(Some),
        }
    }
}

pub struct Setup<'a> {
    pub runtime: &'a Runtime,
    pub binary: &'a Path,
    /// `perf record` the creating controller into this file.
    pub perf: Option<PathBuf>,
    pub pod_start_delay: Duration,
    /// Also measure RSS after `mi_collect(true)` (through gdb) in the RSS runs.
    pub trim_probe: bool,
    /// More flags for the controller.
    pub controller_args: Vec<String>,
    /// How the controller reaches the fake; over HTTP/1.1 no resync is run.
    pub protocol: Protocol,
    /// Run the controller under callgrind, its dumps in this folder, and count its
    /// instructions with it (no resync, no `perf`: the CPU figures of such a run are
    /// valgrind's). The policy's memory is then compact (`--guest-address-space=compact`):
    /// valgrind cannot map the guarded slots' reservation.
    pub callgrind: Option<PathBuf>,
    /// The bearer token the fake accepts and the controller's kubeconfig holds.
    pub token: &'a str,
}

/// What a run does to the fake around its measured burst: a policy rollout's stage, for one.
pub trait Stage {
    /// Once the controller is ready, before the burst.
    fn prepare(&mut self, runtime: &Runtime, cluster: &Arc<MemoryCluster>) -> Result<()>;
    /// Once the controller is quiet after the burst, before it stops.
    fn finish(&mut self, runtime: &Runtime, cluster: &Arc<MemoryCluster>) -> Result<()>;
}

pub fn run(setup: &Setup<'_>, n: usize) -> Result<CreateRun> {
    run_staged(setup, n, None)
}

/// [`run`], with `stage` prepared before the burst and finished once quiet; a staged run has
/// no resync (its figures are the burst's).
pub fn run_staged(
    setup: &Setup<'_>,
    n: usize,
    mut stage: Option<&mut dyn Stage>,
) -> Result<CreateRun> {
    let runtime = setup.runtime;
    let fake = fake_server(setup.pod_start_delay, setup.protocol.tls(), setup.token)?;
    let dir = tempfile::tempdir().context("temp dir")?;
    let kubeconfig = fake
        .write_kubeconfig(
            dir.path(),
            &crate::apiserver::KubeconfigAuth::Token(setup.token.to_string()),
        )
        .context("writing a kubeconfig")?;
    let (wrapper, mut controller_args, ready_within) = match &setup.callgrind {
        // Under valgrind the controller runs some 50 times slower, its compile of the policy
        // included.
        Some(dir) => (
            callgrind_wrapper(dir),
            vec!["--guest-address-space=compact".to_string()],
            Duration::from_secs(600),
        ),
        None => (Vec::new(), Vec::new(), Duration::from_secs(120)),
    };
    controller_args.extend(setup.controller_args.iter().cloned());
    let mut controller =
        ControllerProcess::start_under(&wrapper, setup.binary, &kubeconfig, &controller_args)?;
    controller.wait_ready(ready_within)?;
    let cluster = fake.cluster();
    if let Some(stage) = stage.as_deref_mut() {
        stage.prepare(runtime, &cluster)?;
    }
    cluster.clear_writes();
    fake.clear_requests();

    let items: Vec<(String, Bytes)> = (0..n)
        .map(|i| {
            let body = sandbox_manifest(&sandbox_name(i)).to_string();
            (Resource::Sandbox.collection_path(NS), Bytes::from(body))
        })
        .collect();
    let client = Arc::new(runtime.block_on(ApiClient::connect(&fake, setup.token, CONNECTIONS))?);
    let from = cluster.resource_version();
    let pods = runtime.spawn(reach(
        cluster.clone(),
        Resource::Pod,
        from.clone(),
        n,
        |_| true,
    ));
    let running = runtime.spawn(reach(cluster.clone(), Resource::Sandbox, from, n, |o| {
        o["status"]["phase"] == "Running"
    }));
    let perf = Perf::start(setup.perf.as_deref(), controller.pid())?;
    let counting = match &setup.callgrind {
        Some(dir) => Counting::Callgrind(Callgrind::start(controller.pid(), dir)?),
        None => Counting::Perf(Instructions::start(controller.pid())),
    };
    let cpu_before = (controller.cpu()?, cpu_of("/proc/self/stat")?);
    let started = Instant::now();
    let post = runtime.spawn(post_all(client, Arc::new(items), IN_FLIGHT));
    let deadline = Duration::from_secs(if n <= 100 { 30 } else { 600 });
    let waited = runtime.block_on(async {
        tokio::time::timeout(deadline, async {
            let post = post.await.context("load generator")??;
            let pods_at = pods.await.context("pod watch")??;
            let running_at = running.await.context("sandbox watch")??;
            Ok::<_, anyhow::Error>((post, pods_at, running_at))
        })
        .await
    });
    let Ok(waited) = waited else {
        let sandboxes = cluster.objects(Resource::Sandbox);
        let running = sandboxes
            .iter()
            .filter(|s| s["status"]["phase"] == "Running")
            .count();
        let stuck = sandboxes
            .iter()
            .find(|s| s["status"]["phase"] != "Running")
            .map(|s| s.to_string())
            .unwrap_or_default();
        let pod_phases: BTreeMap<String, usize> =
            cluster
                .objects(Resource::Pod)
                .iter()
                .fold(BTreeMap::new(), |mut phases, p| {
                    *phases.entry(p["status"]["phase"].to_string()).or_insert(0) += 1;
                    phases
                });
        bail!(
            "{n} sandboxes did not all run within {deadline:?}: {} Sandboxes, {} Pods, {running} \
             Running (one that is not: {stuck}; Pods by phase: {pod_phases:?}); \
             controller warnings: {:?}",
            cluster.count(Resource::Sandbox),
            cluster.count(Resource::Pod),
            controller.log_levels()
        );
    };
    let (post, pods_at, running_at) = waited?;
    let controller_cpu = controller.cpu()?.saturating_sub(cpu_before.0);
    let bench_cpu = cpu_of("/proc/self/stat")?.saturating_sub(cpu_before.1);
    let instructions = counting.stop()?;
    perf.stop();

    let scrape = controller.wait_quiet(n as f64, QUIET, Duration::from_secs(600))?;
    if let Some(stage) = stage.as_deref_mut() {
        stage.finish(runtime, &cluster)?;
    }
    let writes = cluster.writes();
    let served = fake.requests();
    let watches = served.iter().filter(|r| r.watch).count();
    let requests = served
        .iter()
        .filter(|r| !(r.method == hyper::Method::POST && r.resource == Some(Resource::Sandbox)))
        .count();
    // The controller's own requests, by the version they came over: a run over HTTP/1.1 that
    // is not is no such run.
    let expected = match setup.protocol {
        Protocol::H2 => hyper::Version::HTTP_2,
        Protocol::Http1 => hyper::Version::HTTP_11,
    };
    let other_versions = served
        .iter()
        .filter(|r| !(r.method == hyper::Method::POST && r.resource == Some(Resource::Sandbox)))
        .filter(|r| r.version != expected)
        .count();
    if other_versions > 0 {
        bail!(
            "{other_versions} of the controller's {requests} requests did not come over {}",
            setup.protocol.label()
        );
    }
    let created_memory = controller.memory()?;
    let (_, mut warnings) = controller.log_levels();
    controller.stop(Duration::from_secs(15));

    // A second controller over the converged state: a full resync (the figures of which are
    // taken over HTTP/2 only).
    let (mut resync_took, mut resync_memory, mut resync_writes) =
        (Duration::ZERO, Memory::default(), BTreeMap::new());
    if setup.protocol == Protocol::H2 && setup.callgrind.is_none() && stage.is_none() {
        cluster.clear_writes();
        let resync_started = Instant::now();
        let mut second =
            ControllerProcess::start(setup.binary, &kubeconfig, &setup.controller_args)?;
        second.wait_ready(Duration::from_secs(120))?;
        second.wait_quiet(n as f64, QUIET, Duration::from_secs(600))?;
        resync_took = resync_started.elapsed().saturating_sub(QUIET);
        resync_memory = second.memory()?;
        resync_writes = group(&cluster.writes(), false);
        warnings.extend(second.log_levels().1);
        second.stop(Duration::from_secs(15));
    }

    Ok(CreateRun {
        protocol: setup.protocol,
        n,
        requests,
        post,
        to_pods: pods_at.saturating_duration_since(started),
        to_running: running_at.saturating_duration_since(started),
        failed_writes: writes
            .iter()
            .filter(|w| {
                w.error.is_some() && !(w.verb == "create" && w.resource == Resource::Sandbox)
            })
            .count(),
        event_writes: writes
            .iter()
            .filter(|w| w.resource == Resource::Event)
            .count(),
        writes: group(
            &writes
                .iter()
                .filter(|w| w.resource != Resource::Event)
                .cloned()
                .collect::<Vec<_>>(),
            true,
        ),
        watches,
        controller_cpu,
        instructions,
        bench_cpu,
        created_memory,
        breakdown: Breakdown::of(&scrape),
        resync_writes,
        resync_took,
        resync_memory,
        warnings,
    })
}
