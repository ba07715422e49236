//! The sandbox router's figures (`--only router`): the real `cubepod-controller router` against
//! the fake API server, its Pods served on loopback at their own IPs by the simulated kubelet's
//! stand-in (`crate::router`), and the embedded demo for the wake.
//!
//! - Requests/s of one closed-loop client straight to a Pod's stand-in, and the same client
//!   through the router to the same stand-in: HTTP/1.1 keep-alive over [`CONNECTIONS`]
//!   connections, and HTTP/2 (h2c) with as many streams at once on one connection.
//! - At [`PACED_RATE`] requests/s: the time to the response's head straight and through the
//!   router; what the router adds is the difference of the p99s.
//! - The wake in the embedded demo (`run --embedded --router-listen`): from a request to a
//!   sandbox paused for idleness to its response's head, less the simulated Pod start.
//! - The router's RSS once it has routed one request to each of N sandboxes.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_apiserver::serve::KubeconfigAuth;
use cubepod_kube::rest::{ConnectionConfig, RestCluster, RestOptions};
use cubepod_kube::{Cluster, Resource, Scope};
use cubepod_policy_sdk::names::SANDBOX_LABEL;
use serde_json::json;

use super::process::{ControllerProcess, memory_of};
use super::say;
use super::stats::{median, p50_p99_micros};
use crate::convergence::TOKEN;
use crate::router::{
    Connection, RouterProcess, answer_of, fake_api, host, sandbox_with_pod, serve_pod_ips,
};

/// The namespace of the router's sandboxes.
const NS: &str = "cubepod-workloads";
/// The paced run's rate, requests/s (the target is set at it).
pub const PACED_RATE: u64 = 1_000;
/// Connections of the closed-loop and the paced clients.
const CONNECTIONS: usize = 8;
/// How long each throughput and paced run lasts, after a second's warm-up.
const RUN: Duration = Duration::from_secs(5);
/// The simulated Pod start of the wake runs.
pub const WAKE_POD_START: Duration = Duration::from_millis(1_000);
/// The N of the RSS runs.
pub const RSS_SIZES: [usize; 2] = [100, 10_000];
/// Rounds of a request to each sandbox after the first, before RSS is read again.
pub const MORE_ROUNDS: usize = 5;

#[derive(Clone, Debug, Default)]
pub struct RouterRun {
    /// Closed-loop requests/s straight to the Pod's stand-in, and through the router:
    /// HTTP/1.1, then HTTP/2.
    pub direct_per_second: Vec<f64>,
    pub proxied_per_second: Vec<f64>,
    pub direct_h2_per_second: Vec<f64>,
    pub proxied_h2_per_second: Vec<f64>,
    /// At [`PACED_RATE`]: p50 and p99 of the time to the response's head, µs.
    pub direct_latency: Vec<(f64, f64)>,
    pub proxied_latency: Vec<(f64, f64)>,
    /// Each wake: request to first byte, less [`WAKE_POD_START`].
    pub wakes: Vec<Duration>,
    /// The router's VmRSS after routing requests to each of N sandboxes, by N.
    pub rss: BTreeMap<usize, Routed>,
}

/// The router's VmRSS, KiB, after one request to each sandbox, and after [`MORE_ROUNDS`] more.
#[derive(Clone, Copy, Debug, Default)]
pub struct Routed {
    pub once_kib: u64,
    pub again_kib: u64,
}

impl RouterRun {
    pub fn direct(&self) -> Option<f64> {
        median(&self.direct_per_second)
    }

    pub fn proxied(&self) -> Option<f64> {
        median(&self.proxied_per_second)
    }

    pub fn direct_h2(&self) -> Option<f64> {
        median(&self.direct_h2_per_second)
    }

    pub fn proxied_h2(&self) -> Option<f64> {
        median(&self.proxied_h2_per_second)
    }

    /// The p99 the router adds at [`PACED_RATE`], µs (median over runs).
    pub fn added_p99_micros(&self) -> Option<f64> {
        let added: Vec<f64> = self
            .direct_latency
            .iter()
            .zip(&self.proxied_latency)
            .map(|(direct, proxied)| proxied.1 - direct.1)
            .collect();
        median(&added)
    }
}

/// Every router figure, `runs` times each (the RSS once per N).
pub fn run(runtime: &tokio::runtime::Runtime, binary: &Path, runs: usize) -> Result<RouterRun> {
    let mut result = RouterRun::default();
    let dir = tempfile::tempdir().context("temp dir")?;
    {
        let network = Ipv4Addr::new(127, 21, 0, 0);
        let fake = fake_api(NS, Duration::ZERO, network)?;
        let cluster = fake.cluster();
        let pod_port = runtime.block_on(async {
            let port = serve_pod_ips(&cluster, network, 1).await?;
            sandbox_with_pod(&cluster, NS, "bench").await?;
            anyhow::Ok(port)
        })?;
        let kubeconfig = fake.write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))?;
        let router =
            RouterProcess::start(binary, &kubeconfig, dir.path(), crate::free_port(), NS, &[])?;
        let direct = SocketAddr::from((Ipv4Addr::new(127, 21, 0, 1), pod_port));
        let proxied = SocketAddr::from(([127, 0, 0, 1], router.port));
        for run in 0..runs {
            for http2 in [false, true] {
                let straight = runtime.block_on(closed_loop(direct, pod_port, http2))?;
                let through = runtime.block_on(closed_loop(proxied, pod_port, http2))?;
                say(format_args!(
                    "router run {}, {}: {straight:.0} requests/s straight to the Pod, \
                     {through:.0} through the router ({:.0}%)",
                    run + 1,
                    if http2 { "HTTP/2" } else { "HTTP/1.1" },
                    through / straight * 100.0
                ));
                let (to_direct, to_proxied) = if http2 {
                    (
                        &mut result.direct_h2_per_second,
                        &mut result.proxied_h2_per_second,
                    )
                } else {
                    (
                        &mut result.direct_per_second,
                        &mut result.proxied_per_second,
                    )
                };
                to_direct.push(straight);
                to_proxied.push(through);
            }
            let straight = p50_p99_micros(&runtime.block_on(paced(direct, pod_port))?);
            let through = p50_p99_micros(&runtime.block_on(paced(proxied, pod_port))?);
            say(format_args!(
                "router run {}: at {PACED_RATE} requests/s, p50/p99 {:.0}/{:.0} µs straight, \
                 {:.0}/{:.0} µs through the router",
                run + 1,
                straight.0,
                straight.1,
                through.0,
                through.1
            ));
            result.direct_latency.push(straight);
            result.proxied_latency.push(through);
        }
    }
    result.wakes = wakes(binary, runs)?;
    for n in RSS_SIZES {
        let routed = routed_rss(runtime, binary, n)?;
        say(format_args!(
            "router RSS with {n} sandboxes routed: {:.1} MiB, {:.1} MiB after {MORE_ROUNDS} \
             more requests to each",
            routed.once_kib as f64 / 1024.0,
            routed.again_kib as f64 / 1024.0
        ));
        result.rss.insert(n, routed);
    }
    Ok(result)
}

/// Requests/s of a closed-loop client to `addr`, each of [`CONNECTIONS`] workers sending its
/// next request when its last is answered, over [`RUN`] after a second's warm-up; the Pod's port
/// `pod_port`. HTTP/1.1: a keep-alive connection per worker; HTTP/2: one connection, a stream
/// per worker at a time.
async fn closed_loop(addr: SocketAddr, pod_port: u16, http2: bool) -> Result<f64> {
    let target = host(pod_port, "bench", NS);
    let warm = Instant::now() + Duration::from_secs(1);
    let end = warm + RUN;
    let shared = if http2 {
        Some(Connection::open_http2(addr).await?)
    } else {
        None
    };
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let target = target.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut connection = match shared {
                Some(connection) => connection,
                None => Connection::open(addr).await?,
            };
            let mut counted = 0u64;
            loop {
                let (status, _, _) = connection.get(&target, "/bench").await?;
                if status != 200 {
                    bail!("{addr} answered {status}");
                }
                let now = Instant::now();
                if now >= end {
                    return anyhow::Ok(counted);
                }
                if now >= warm {
                    counted += 1;
                }
            }
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.context("a client task")??;
    }
    Ok(total as f64 / RUN.as_secs_f64())
}

/// The time to each response's head at [`PACED_RATE`] requests/s over [`CONNECTIONS`]
/// connections, over [`RUN`] after a second's warm-up; the Pod's port `pod_port`.
async fn paced(addr: SocketAddr, pod_port: u16) -> Result<Vec<Duration>> {
    let target = host(pod_port, "bench", NS);
    let period = Duration::from_micros(1_000_000 * CONNECTIONS as u64 / PACED_RATE);
    let warm = Instant::now() + Duration::from_secs(1);
    let end = warm + RUN;
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(addr).await?;
            // The connections' requests spread over the period, not sent together.
            tokio::time::sleep(period * c as u32 / CONNECTIONS as u32).await;
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut heads = Vec::new();
            while Instant::now() < end {
                ticks.tick().await;
                let (status, head, _) = connection.get(&target, "/bench").await?;
                if status != 200 {
                    bail!("{addr} answered {status}");
                }
                if Instant::now() >= warm {
                    heads.push(head);
                }
            }
            anyhow::Ok(heads)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.context("a client task")??);
    }
    Ok(all)
}

/// `runs` wakes in the embedded demo: a sandbox idle for a second is paused, a request wakes
/// it; each from the request to its response's head, less the simulated Pod start.
fn wakes(binary: &Path, runs: usize) -> Result<Vec<Duration>> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let seed = dir.path().join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: sleepy\n  \
         namespace: cubepod-workloads\nspec:\n  image: ghcr.io/cubepod/sandbox-base:1.0\n  \
         desiredState: Running\n  idleTimeoutSeconds: 1\n",
    )
    .context("writing the seed")?;
    let kubeconfig = dir.path().join("kubeconfig");
    let port = crate::free_port();
    let mut controller = ControllerProcess::start(
        binary,
        &dir.path().join("no-kubeconfig"),
        &[
            "--embedded".to_owned(),
            format!("--embedded-kubeconfig={}", kubeconfig.display()),
            format!("--router-listen=127.0.0.1:{port}"),
            format!("--seed={}", seed.display()),
            format!("--pod-start-delay={}ms", WAKE_POD_START.as_millis()),
            "--reap-interval=200ms".to_owned(),
        ],
    )?;
    controller.wait_ready(Duration::from_secs(120))?;
    let token = std::fs::read_to_string(&kubeconfig)
        .context("the embedded kubeconfig")?
        .lines()
        .find_map(|line| line.trim().strip_prefix("token: ").map(str::to_owned))
        .context("no token in the embedded kubeconfig")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let client = EmbeddedClient {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        token,
    };
    let cluster = RestCluster::new(
        ConnectionConfig::from_kubeconfig_file(&kubeconfig).context("the embedded kubeconfig")?,
        RestOptions::default(),
    )
    .context("a client of the embedded cluster")?;
    let mut wakes = Vec::new();
    let mut last_pause = None;
    for run in 0..runs {
        // A new idle pause of the sandbox, then its Pod gone: a request that met the Pod
        // before its deletion would be answered by it (the wake cancels the pause).
        last_pause = Some(runtime.block_on(idle_paused(
            &*cluster,
            "sleepy",
            last_pause.as_deref(),
            Duration::from_secs(60),
        ))?);
        runtime.block_on(no_pod(&*cluster, "sleepy", Duration::from_secs(60)))?;
        let took = runtime.block_on(client.first_byte())?;
        if took < WAKE_POD_START {
            bail!(
                "the request to the paused sandbox was answered in {:.0} ms, within the Pod's \
                 start ({} ms): it met a Pod still running, not a wake",
                took.as_secs_f64() * 1e3,
                WAKE_POD_START.as_millis()
            );
        }
        let wake = took.saturating_sub(WAKE_POD_START);
        say(format_args!(
            "router wake {}: {:.0} ms to the first byte, {:.0} ms past the Pod's start",
            run + 1,
            took.as_secs_f64() * 1e3,
            wake.as_secs_f64() * 1e3
        ));
        wakes.push(wake);
    }
    controller.stop(Duration::from_secs(10));
    Ok(wakes)
}

/// Waits until the sandbox `name` of [`NS`] is paused for idleness at another time than
/// `before`; that time (`status.idlePausedAt`).
async fn idle_paused(
    cluster: &dyn Cluster,
    name: &str,
    before: Option<&str>,
    timeout: Duration,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let sandbox = cluster
            .get(Resource::Sandbox, NS, name)
            .await
            .with_context(|| format!("reading sandbox {name}"))?;
        if let Some(at) = sandbox["status"]["idlePausedAt"].as_str()
            && Some(at) != before
        {
            return Ok(at.to_owned());
        }
        if Instant::now() > deadline {
            bail!("sandbox {name} was not paused for idleness within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the sandbox `name` of [`NS`] has no Pod.
async fn no_pod(cluster: &dyn Cluster, name: &str, timeout: Duration) -> Result<()> {
    let scope = Scope {
        resource: Resource::Pod,
        namespace: NS.to_owned(),
        label_selector: Some(format!("{SANDBOX_LABEL}={name}")),
    };
    let deadline = Instant::now() + timeout;
    loop {
        let pods = cluster.list(&scope).await.context("listing the Pods")?;
        if pods.items.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the paused sandbox's Pod was still there after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct EmbeddedClient {
    addr: SocketAddr,
    token: String,
}

impl EmbeddedClient {
    /// A request to the paused sandbox: the time to its response's head.
    async fn first_byte(&self) -> Result<Duration> {
        let mut connection = Connection::open_with_token(self.addr, &self.token).await?;
        let (status, head, body) = connection.get(&host(8080, "sleepy", NS), "/wake").await?;
        if status != 200 || !body.starts_with(answer_of("sleepy", NS).as_bytes()) {
            bail!(
                "the wake was answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        Ok(head)
    }
}

/// The router's VmRSS once it has routed a request to each of `n` sandboxes, and after
/// [`MORE_ROUNDS`] more (their Pods all at one stand-in address: the figure is the router's
/// state per sandbox, not its connections to n Pods).
fn routed_rss(runtime: &tokio::runtime::Runtime, binary: &Path, n: usize) -> Result<Routed> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let network = Ipv4Addr::new(127, 22, 0, 0);
    let fake = fake_api(NS, Duration::ZERO, network)?;
    let cluster = fake.cluster();
    let names: Vec<String> = (0..n).map(|i| format!("r{i:05}")).collect();
    let stand_in = "127.22.0.1";
    let pod_port = runtime.block_on(async {
        let pod_port = serve_pod_ips(&cluster, network, 1).await?;
        for name in &names {
            sandbox_with_pod(&cluster, NS, name).await?;
            cluster
                .patch_status(
                    Resource::Pod,
                    NS,
                    name,
                    json!({"status": {"podIP": stand_in, "podIPs": [{"ip": stand_in}]}}),
                )
                .await
                .with_context(|| format!("moving Pod {name} to the stand-in's address"))?;
        }
        anyhow::Ok(pod_port)
    })?;
    let kubeconfig = fake.write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.into()))?;
    let router =
        RouterProcess::start(binary, &kubeconfig, dir.path(), crate::free_port(), NS, &[])?;
    let addr = SocketAddr::from(([127, 0, 0, 1], router.port));
    let mut after = Vec::new();
    for rounds in [1, MORE_ROUNDS] {
        for _ in 0..rounds {
            runtime.block_on(route_each(addr, pod_port, &names))?;
        }
        after.push(memory_of(router.pid())?.rss_kib);
    }
    Ok(Routed {
        once_kib: after[0],
        again_kib: after[1],
    })
}

/// One request to each of `names` (their Pods' port `pod_port`), over [`CONNECTIONS`]
/// connections.
async fn route_each(addr: SocketAddr, pod_port: u16, names: &[String]) -> Result<()> {
    let mut tasks = Vec::new();
    for chunk in names.chunks(names.len().div_ceil(CONNECTIONS)) {
        let chunk = chunk.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(addr).await?;
            for name in &chunk {
                // One stand-in answers for all: it names the first Pod at its address.
                let (status, _, body) = connection.get(&host(pod_port, name, NS), "/").await?;
                if status != 200 || !body.starts_with(b"sandbox ") {
                    bail!(
                        "sandbox {name} was answered {status}: {}",
                        String::from_utf8_lossy(&body).trim()
                    );
                }
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a client task")??;
    }
    Ok(())
}
