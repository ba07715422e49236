//! `cubepod-bench`: the real controller against the stateful fake API server on loopback,
//! with a load generator, in one run; prints a table of every figure of the performance
//! targets, and with `--write-docs` writes `docs/performance.md` and `docs/performance.svg`.
//!
//! What runs where:
//! - the fake API server (HTTPS with HTTP/2, bearer token; or plain HTTP/1.1, as behind
//!   `kubectl proxy`) and the load generator run in this process, the controller is the real `target/release/cubepod-controller` in a subprocess
//!   (sandboxes/s, writes, resync, RSS);
//! - reap and warm-pool ticks run the real `ControllerManager` in-process over an in-memory
//!   cluster; the decision and the hot swap go through the library API, the same code the
//!   micro-benchmarks (`tests/benches/{reconcile,swap}.rs`) run.

pub mod claims;
pub mod client;
pub mod create;
pub mod decision;
pub mod instant;
pub mod languages;
pub mod process;
pub mod report;
pub mod rollout;
pub mod router;
pub mod rss;
pub mod seed;
pub mod stats;
pub mod swap;
pub mod ticks;
/// The SDK's types in the host's (the default policy's native twin's inputs).
pub use cubepod_policy_host::twin;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use cubepod_apiserver::MemoryClusterConfig;
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, PolicyModule, RuntimeConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::apiserver::{FakeApiServer, FakeOptions};

pub const NS: &str = "cubepod-workloads";
pub const TOKEN: &str = "bench-token-0123456789abcdef";

/// A bearer token of `bytes` bytes shaped like a JWT (three base64url parts, dot-separated),
/// the same every run: a projected ServiceAccount token, what a controller in a cluster sends,
/// is about a kilobyte where [`TOKEN`] is 28 bytes, and over HTTP/2 every request's header
/// block carries it whole (h2 never indexes `authorization`, so it is Huffman-coded each time).
pub fn token_of_len(bytes: usize) -> String {
    const BASE64URL: &[u8; 64] =
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    // A fixed seed, as the fault suite's generators have: the characters' spread (and so the
    // Huffman code's length) is a real token's, and every run sends the same token.
    let mut rng = StdRng::seed_from_u64(0x70_6b_65_6e);
    (0..bytes)
        .map(|i| {
            if bytes >= 16 && (i == bytes / 8 || i == bytes * 2 / 3) {
                return '.';
            }
            char::from(BASE64URL[rng.random_range(0..BASE64URL.len())])
        })
        .collect()
}

/// The fake kubelet's Pod start time in the sandboxes/s runs: none, so that the figures are the
/// controller's and the API's, not a kubelet's. A Pod is then Running before the response to
/// its create reaches the controller (the cache keeps the version last applied, so the late
/// answer does not hide it).
pub const DEFAULT_POD_START_DELAY: Duration = Duration::ZERO;

/// How the controller reaches the fake API server in the sandboxes/s runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    /// `https://`: TLS, HTTP/2 by ALPN (as a cluster's API server serves it).
    H2,
    /// `http://`: plain HTTP/1.1, as `kubectl proxy` and most API emulators serve it.
    Http1,
}

impl Protocol {
    pub const ALL: [Protocol; 2] = [Protocol::H2, Protocol::Http1];

    /// The name on the command line.
    pub fn flag(self) -> &'static str {
        match self {
            Protocol::H2 => "h2",
            Protocol::Http1 => "http1",
        }
    }

    /// The name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Protocol::H2 => "HTTPS + HTTP/2",
            Protocol::Http1 => "plain HTTP/1.1",
        }
    }

    pub fn tls(self) -> bool {
        self == Protocol::H2
    }
}

/// The command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// N of the sandboxes/s runs.
    pub sizes: Vec<usize>,
    /// N of the claims runs: a pool of N members, then N claims at once.
    pub claim_sizes: Vec<usize>,
    /// The sustained rate of the paced claims runs, claims/s (beside each burst); `None`: none.
    pub claim_rate: Option<f64>,
    /// N of the rollout runs: N sandboxes created with no rollout, during a shadow stage and
    /// during a canary step.
    pub rollout_size: usize,
    /// The protocols of the sandboxes/s runs (the resync and RSS runs use HTTP/2 only).
    pub protocols: Vec<Protocol>,
    /// N of the RSS runs over seeded sandboxes (those also in `sizes` are measured on the
    /// state the controller created, and seeded as a cross-check).
    pub rss_sizes: Vec<usize>,
    /// How the fake answers the controller's lists in the RSS runs: paged by `limit`, whole,
    /// or each N both ways (the restart's peak with and without a paginating API server).
    pub rss_lists: Vec<rss::Lists>,
    pub runs: usize,
    /// Secrets POSTed per capacity run.
    pub capacity_writes: usize,
    pub decision_runs: usize,
    pub ticks: usize,
    pub swaps: usize,
    pub write_docs: bool,
    pub controller: Option<PathBuf>,
    /// `perf record` the creating controller at the largest N into this folder.
    pub perf: Option<PathBuf>,
    /// The fake kubelet's Pod start time in the sandboxes/s runs.
    pub pod_start_delay: Duration,
    /// RSS runs: also call `mi_collect(true)` in the controller through gdb and read RSS again.
    pub trim_probe: bool,
    /// More flags for the controller in the sandboxes/s runs (`--controller-arg=--concurrency=32`).
    pub controller_args: Vec<String>,
    /// Only these scenarios (`capacity`, `create`, `instructions`, `rss`, `ticks`,
    /// `decision`, `swap`, `languages`...: [`SCENARIOS`]); all when empty.
    pub only: Vec<String>,
    /// N of the instruction counts (the controller under callgrind, one run per protocol).
    pub instruction_sizes: Vec<usize>,
    /// Keep the callgrind dumps in this folder (one subfolder per protocol and N), for
    /// `callgrind_annotate`; in a temp folder that is removed otherwise.
    pub callgrind_keep: Option<PathBuf>,
    /// The controller's bearer token in the sandboxes/s and instruction runs: [`TOKEN`], or
    /// one of this many bytes ([`token_of_len`]).
    pub token_bytes: Option<usize>,
    /// How the in-process decision lays out guest memory: compact under valgrind, which
    /// cannot reserve the guarded layout's address space.
    pub guest_address_space: cubepod_policy_host::runtime::AddressSpace,
    /// Where the in-process decision's engine keeps compiled components: a run under valgrind
    /// then loads what a run outside it compiled.
    pub policy_cache: Option<PathBuf>,
}

/// The scenarios, in the order they run.
pub const SCENARIOS: [&str; 11] = [
    "capacity",
    "decision",
    "swap",
    "languages",
    "create",
    "claims",
    "rollout",
    "instructions",
    "ticks",
    "rss",
    "router",
];

impl Options {
    fn wants(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == scenario)
    }

    /// The controller's bearer token in the sandboxes/s and instruction runs.
    pub fn token(&self) -> String {
        self.token_bytes
            .map_or_else(|| TOKEN.to_string(), token_of_len)
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            sizes: vec![1_000, 10_000],
            claim_sizes: vec![100, 300, 1_000],
            claim_rate: Some(1_000.0),
            rollout_size: 1_000,
            protocols: Protocol::ALL.to_vec(),
            rss_sizes: vec![10_000, 30_000, 100_000],
            rss_lists: rss::Lists::ALL.to_vec(),
            runs: 3,
            capacity_writes: 30_000,
            decision_runs: 3_000,
            ticks: 30,
            swaps: 10,
            write_docs: false,
            controller: None,
            perf: None,
            pod_start_delay: DEFAULT_POD_START_DELAY,
            trim_probe: false,
            only: Vec::new(),
            instruction_sizes: vec![1_000],
            callgrind_keep: None,
            controller_args: Vec::new(),
            token_bytes: None,
            guest_address_space: cubepod_policy_host::runtime::AddressSpace::default(),
            policy_cache: None,
        }
    }
}

pub const USAGE: &str = "\
cubepod-bench: the controller against the fake API server on loopback, with a load generator

usage: cubepod-bench [--quick] [--sizes 1000,10000] [--claim-sizes 100,300,1000]
                     [--claim-rate 1000]
                     [--rollout-size 1000] [--protocols h2,http1]
                     [--rss-sizes 10000,30000,100000] [--rss-lists paged,whole] [--runs 3]
                     [--pod-start-delay 0ms] [--write-docs] [--controller PATH] [--perf DIR]
                     [--instruction-sizes 1000] [--callgrind-keep DIR] [--trim-probe]
                     [--only capacity,create,claims,rollout,instructions,rss,ticks,
                             decision,swap,languages,router]
                     [--token-bytes 1024] [--controller-arg ARG]...
                     [--guest-address-space guarded|compact] [--decision-runs 3000]
                     [--policy-cache DIR]

  --quick          small and fast: N = 1,000 only, claims at N = 300, one run, fewer
                   samples, instructions counted at N = 200 (for development)
  --sizes          N of the sandboxes/s runs (default 1000,10000)
  --claim-sizes    N of the claims runs: a warm pool of N filled, then N claims at once by
                   8 clients (default 100,300,1000)
  --claim-rate     beside each burst of claims, the same N claims POSTed paced at this many
                   per second: the latency of a claim at a sustained rate (default 1000; 0:
                   bursts only)
  --rollout-size   N of the rollout runs: N sandboxes created with no rollout, in a
                   PolicyRollout's shadow stage and in its canary step, alternating
                   (default 1000)
  --protocols      how the controller reaches the API in the sandboxes/s runs: h2 (HTTPS,
                   HTTP/2), http1 (plain HTTP/1.1, as behind kubectl proxy) (default both)
  --rss-sizes      N of the RSS runs over seeded sandboxes (default 10000,30000,100000)
  --rss-lists      how the fake answers the controller's lists in the RSS runs: paged (by
                   `limit`, with continue tokens), whole (every list in one answer, as from
                   the API server's watch cache) (default both: a restart's peak each way)
  --runs           runs per figure; the median is reported (default 3)
  --pod-start-delay  the fake kubelet's Pod start time in the sandboxes/s runs (default 0ms)
  --write-docs     write docs/performance.md and docs/performance.svg
  --controller     the controller binary (default: target/release/cubepod-controller)
  --perf           perf record the creating controller at the largest N, and the claiming
                   one at the largest claims N, into DIR
  --instruction-sizes  N of the instruction counts: the controller run under valgrind's
                   callgrind, once per protocol (default 1000; needs valgrind)
  --callgrind-keep keep the callgrind dumps in DIR/<protocol>-<N>/ (for callgrind_annotate)
  --trim-probe     RSS runs: also read RSS after gdb calls mi_collect(true) in the controller
  --only           only these scenarios: capacity,create,claims,rollout,instructions,rss,
                   ticks,decision,swap,languages,router (languages: the default policy built
                   from the Rust, Python and JavaScript SDKs: component size, admission cold
                   and from the compiled cache with peak RSS, per-call time against Rust's;
                   router: requests/s and latency straight and through the sandbox router,
                   the wake in the embedded demo, its RSS)
  --token-bytes    the controller's bearer token in the sandboxes/s and instruction runs: this
                   many bytes, JWT-shaped (a projected ServiceAccount token is about 1024),
                   instead of the default 28
  --guest-address-space  the in-process decision's guest memory layout (default guarded;
                   compact under valgrind, which counts each input's paths apart with
                   valgrind --tool=callgrind --dump-after='*bench::decision::case' cubepod-bench
                   --only decision --runs 1 --decision-runs 50 --guest-address-space compact
                   --policy-cache DIR, after the same run outside valgrind filled DIR)
  --decision-runs  wasm calls timed per input and path; natively ten times as many (default
                   3000)
  --policy-cache   the in-process decision's precompiled-component cache (default none)
  --controller-arg one more flag for the controller in the sandboxes/s runs (repeatable),
                   e.g. --controller-arg=--concurrency=32
";

fn sizes(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse()
                .with_context(|| format!("{s:?} is not a count"))
        })
        .collect()
}

impl Options {
    /// Parses the arguments after the program name; `Ok(None)` for `--help`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>> {
        let mut options = Options::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = || -> Result<String> {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .with_context(|| format!("{flag} needs a value"))
            };
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "--quick" => {
                    options.sizes = vec![1_000];
                    options.claim_sizes = vec![300];
                    options.rss_sizes = vec![];
                    options.runs = 1;
                    options.capacity_writes = 5_000;
                    options.decision_runs = 500;
                    options.ticks = 10;
                    options.swaps = 3;
                    options.instruction_sizes = vec![200];
                }
                "--sizes" => options.sizes = sizes(&value()?)?,
                "--claim-sizes" => options.claim_sizes = sizes(&value()?)?,
                "--claim-rate" => {
                    let rate: f64 = value()?.parse().context("--claim-rate")?;
                    if !rate.is_finite() || rate < 0.0 {
                        bail!("--claim-rate: a rate in claims/s, or 0 for no paced runs");
                    }
                    options.claim_rate = (rate > 0.0).then_some(rate);
                }
                "--rollout-size" => {
                    options.rollout_size = value()?
                        .replace('_', "")
                        .parse()
                        .context("--rollout-size is not a count")?
                }
                "--protocols" => {
                    options.protocols = value()?
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(|p| {
                            Protocol::ALL
                                .into_iter()
                                .find(|known| known.flag() == p)
                                .with_context(|| {
                                    format!("--protocols: no protocol {p:?} (h2, http1)")
                                })
                        })
                        .collect::<Result<_>>()?;
                }
                "--rss-sizes" => options.rss_sizes = sizes(&value()?)?,
                "--rss-lists" => {
                    options.rss_lists = value()?
                        .split(',')
                        .filter(|l| !l.is_empty())
                        .map(|l| {
                            rss::Lists::ALL
                                .into_iter()
                                .find(|known| known.flag() == l)
                                .with_context(|| {
                                    format!("--rss-lists: no way {l:?} (paged, whole)")
                                })
                        })
                        .collect::<Result<_>>()?;
                }
                "--instruction-sizes" => options.instruction_sizes = sizes(&value()?)?,
                "--runs" => options.runs = value()?.parse().context("--runs")?,
                "--write-docs" => options.write_docs = true,
                "--trim-probe" => options.trim_probe = true,
                "--controller-arg" => options.controller_args.push(value()?),
                "--only" => {
                    options.only = value()?.split(',').map(str::to_string).collect();
                    if let Some(bad) = options
                        .only
                        .iter()
                        .find(|s| !SCENARIOS.contains(&s.as_str()))
                    {
                        bail!("--only: no scenario {bad:?} (there are {SCENARIOS:?})");
                    }
                }
                "--controller" => options.controller = Some(PathBuf::from(value()?)),
                "--perf" => options.perf = Some(PathBuf::from(value()?)),
                "--callgrind-keep" => options.callgrind_keep = Some(PathBuf::from(value()?)),
                "--decision-runs" => {
                    options.decision_runs = value()?.parse().context("--decision-runs")?;
                }
                "--policy-cache" => options.policy_cache = Some(PathBuf::from(value()?)),
                "--guest-address-space" => {
                    options.guest_address_space = match value()?.as_str() {
                        "guarded" => cubepod_policy_host::runtime::AddressSpace::Guarded,
                        "compact" => cubepod_policy_host::runtime::AddressSpace::Compact,
                        other => bail!("--guest-address-space: guarded or compact, not {other}"),
                    };
                }
                "--token-bytes" => {
                    let bytes: usize = value()?.parse().context("--token-bytes")?;
                    if bytes == 0 {
                        bail!("--token-bytes: a token has at least one byte");
                    }
                    options.token_bytes = Some(bytes);
                }
                "--pod-start-delay" => {
                    let text = value()?;
                    options.pod_start_delay = match text.strip_suffix("ms") {
                        Some(ms) => Duration::from_millis(ms.parse().context("--pod-start-delay")?),
                        None => Duration::from_secs_f64(
                            text.trim_end_matches('s')
                                .parse()
                                .context("--pod-start-delay")?,
                        ),
                    };
                }
                other => bail!("unknown argument {other:?}\n\n{USAGE}"),
            }
        }
        options.runs = options.runs.max(1);
        Ok(Some(options))
    }
}

/// The fake API server every scenario uses: HTTPS (plain HTTP without `tls`) with a bearer
/// token, a kubelet that starts Pods after `pod_start_delay` and stops them at once, the
/// default watch history and buffers.
pub fn fake_server(pod_start_delay: Duration, tls: bool, token: &str) -> Result<FakeApiServer> {
    FakeApiServer::start(FakeOptions {
        tls,
        token: Some(token.to_string()),
        cluster_config: MemoryClusterConfig {
            pod_start_delay,
            ..MemoryClusterConfig::instant()
        },
        ..FakeOptions::default()
    })
    .context("starting the fake API server")
}

/// The machine the numbers come from.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    pub cpus: usize,
    pub model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub rustc: String,
    pub commit: String,
    pub date: String,
    /// `/proc/loadavg` before the run: other work on the machine.
    pub load_before: String,
    /// Of the machine's CPU time during the run, the share other processes used.
    pub others_share: Option<f64>,
    pub wall: Duration,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let output = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .current_dir(crate::workspace())
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let dirty = !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
        Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
                .unwrap_or_else(|| "unknown".to_string()),
            memory_gib: meminfo
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|kib| kib.parse::<f64>().ok())
                .map_or(0.0, |kib| kib / 1024.0 / 1024.0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            rustc: output("rustc", &["--version"]),
            commit: format!(
                "{}{}",
                output("git", &["rev-parse", "--short", "HEAD"]),
                if dirty {
                    " (with uncommitted changes)"
                } else {
                    ""
                }
            ),
            date: cubepod_policy_host::model::time::format(cubepod_policy_host::model::time::now()),
            load_before: std::fs::read_to_string("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            others_share: None,
            wall: Duration::ZERO,
        }
    }
}

/// Everything one invocation measured.
#[derive(Debug, Default)]
pub struct Results {
    pub machine: Machine,
    pub options: Option<Options>,
    /// Secrets/s of each capacity run.
    pub capacity: Vec<f64>,
    /// The sandboxes/s runs over HTTPS and HTTP/2 (the resync and RSS figures come from these).
    pub creates: BTreeMap<usize, Vec<create::CreateRun>>,
    /// The same runs over plain HTTP/1.1 (no resync).
    pub creates_http1: BTreeMap<usize, Vec<create::CreateRun>>,
    /// The claims runs, by protocol and N: bursts.
    pub claims: BTreeMap<(Protocol, usize), Vec<claims::ClaimRun>>,
    /// The claims runs paced at `--claim-rate`, by protocol and N.
    pub paced_claims: BTreeMap<(Protocol, usize), Vec<claims::ClaimRun>>,
    /// The rollout runs, each stage in each round (HTTP/2).
    pub rollouts: Vec<rollout::StageRun>,
    /// The runs under callgrind, each protocol at each N of `instruction_sizes`.
    pub counted: Vec<create::CreateRun>,
    /// The RSS runs over seeded sandboxes, the fake paging its lists.
    pub seeded: BTreeMap<usize, Vec<rss::SeededRun>>,
    /// The same, the fake answering every list whole.
    pub seeded_whole: BTreeMap<usize, Vec<rss::SeededRun>>,
    /// RSS runs the machine could not hold, with the projection that said so.
    pub skipped: Vec<rss::Skipped>,
    /// JSON bytes of one converged sandbox's six objects.
    pub sandbox_json_bytes: usize,
    pub ticks: Option<ticks::Ticks>,
    /// One set of cases per round.
    pub decision: Vec<Vec<decision::Case>>,
    pub swaps: Vec<swap::Swap>,
    /// Compile-only time of the default policy by Cranelift opt level.
    pub compile: Vec<(&'static str, Duration)>,
    pub component_bytes: usize,
    /// The sandbox router's figures.
    pub router: Option<router::RouterRun>,
    /// The default policy in each language.
    pub languages: Vec<languages::LanguageRun>,
}

/// The fake API server's raw capacity: Secrets POSTed over HTTP/2 with TLS, 64 streams in
/// flight over 4 connections, against a fresh server with no controller attached.
async fn capacity(writes: usize) -> Result<f64> {
    let fake = fake_server(Duration::ZERO, true, TOKEN)?;
    let client = Arc::new(client::ApiClient::connect(&fake, TOKEN, 4).await?);
    let path = cubepod_kube::Resource::Secret.collection_path(NS);
    let items: Vec<(String, Bytes)> = (0..writes)
        .map(|i| {
            let body = serde_json::json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": format!("load-{i:06}"), "namespace": NS,
                    "labels": {"app.kubernetes.io/managed-by": "cubepod-bench"}},
                "stringData": {"token": "0123456789abcdef0123456789abcdef0123456789abcdef"},
            });
            (path.clone(), Bytes::from(body.to_string()))
        })
        .collect();
    let burst = client::post_all(client, Arc::new(items), 64).await?;
    if burst.failed > 0 {
        bail!("{} of {} capacity POSTs failed", burst.failed, burst.sent);
    }
    Ok(burst.per_second())
}

fn load_default_policy(options: &Options) -> Result<PolicyModule> {
    let engine = PolicyEngine::new(RuntimeConfig {
        address_space: options.guest_address_space,
        cache_dir: options.policy_cache.clone(),
        ..RuntimeConfig::default()
    })
    .context("engine")?;
    engine.load(DEFAULT_POLICY).context("the default policy")
}

fn say(what: impl std::fmt::Display) {
    eprintln!("[cubepod-bench] {what}");
}

/// The controller's RSS at `n`, KiB: the line through the two largest N measured; with one, the
/// line through it and the origin (more than the RSS grows, since part of it is the same at
/// any N); with none, 120 KiB per sandbox.
fn project(measured: &BTreeMap<usize, f64>, n: usize) -> f64 {
    let mut largest = measured.iter().rev();
    match (largest.next(), largest.next()) {
        (Some((&n2, &rss2)), Some((&n1, &rss1))) => {
            let slope = (rss2 - rss1) / (n2 as f64 - n1 as f64);
            rss2 + slope.max(0.0) * (n as f64 - n2 as f64)
        }
        (Some((&n1, &rss1)), None) if n1 > 0 => rss1 * (n.max(n1) as f64 / n1 as f64),
        _ => 120.0 * n as f64,
    }
}

/// A run of the release controller with the command line's flags for it, over `protocol`: no
/// `perf`, no callgrind, no trim probe unless the caller sets them.
fn setup<'a>(
    runtime: &'a tokio::runtime::Runtime,
    binary: &'a Path,
    options: &Options,
    protocol: Protocol,
    token: &'a str,
) -> create::Setup<'a> {
    create::Setup {
        runtime,
        binary,
        perf: None,
        pod_start_delay: options.pod_start_delay,
        trim_probe: false,
        controller_args: options.controller_args.clone(),
        protocol,
        callgrind: None,
        token,
    }
}

/// The controller under callgrind creating N sandboxes, once per protocol at each N: its
/// instructions per new sandbox, which the machine's speed does not move (one run each).
fn count_instructions(
    options: &Options,
    runtime: &tokio::runtime::Runtime,
    binary: &Path,
) -> Result<Vec<create::CreateRun>> {
    let found = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        bail!(
            "the instructions scenario runs the controller under valgrind, which is not \
             installed (apt-get install valgrind), or leave it out with --only"
        );
    }
    let mut counted = Vec::new();
    let token = options.token();
    for &n in &options.instruction_sizes {
        for &protocol in &options.protocols {
            // A kept folder outlives the run; a temp one goes with `_temp` at the loop's end.
            let (_temp, dir) = match &options.callgrind_keep {
                Some(keep) => {
                    let dir = keep.join(format!("{}-{n}", protocol.flag()));
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                    (None, dir)
                }
                None => {
                    let temp = tempfile::tempdir().context("temp dir")?;
                    let dir = temp.path().to_path_buf();
                    (Some(temp), dir)
                }
            };
            let setup = create::Setup {
                callgrind: Some(dir.clone()),
                ..setup(runtime, binary, options, protocol, &token)
            };
            let result = create::run(&setup, n).with_context(|| {
                format!(
                    "counting the instructions of {n} new sandboxes over {}",
                    protocol.label()
                )
            })?;
            say(format_args!(
                "N={n} {} under callgrind: {} instructions per sandbox, {:.2} reconciles each",
                protocol.flag(),
                result
                    .instructions_per_sandbox_millions()
                    .map_or("uncounted".to_string(), |m| format!("{m:.3} M")),
                result.breakdown.reconciles / n as f64
            ));
            if options.callgrind_keep.is_some() {
                say(format_args!(
                    "  dumps kept in {} (callgrind_annotate <dump>)",
                    dir.display()
                ));
            }
            counted.push(result);
        }
    }
    Ok(counted)
}

/// Runs every scenario the options name and returns what they measured.
pub fn run(options: &Options) -> Result<Results> {
    let started = Instant::now();
    // The fake API server holds every seeded object: if memory runs out, this process goes
    // before the neighbours' (after its controller).
    let _ = std::fs::write("/proc/self/oom_score_adj", "500");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench")
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let binary = if options.wants("create")
        || options.wants("claims")
        || options.wants("rollout")
        || options.wants("rss")
        || options.wants("instructions")
        || options.wants("router")
    {
        process::controller_binary(options.controller.as_deref())?
    } else {
        PathBuf::new()
    };
    let mut results = Results {
        machine: Machine::read(),
        options: Some(options.clone()),
        component_bytes: DEFAULT_POLICY.len(),
        ..Results::default()
    };
    let module = load_default_policy(options)?;
    let busy_before = process::machine_busy()?;
    let own_before = process::own_cpu_with_children()?;

    if options.wants("capacity") {
        for run in 0..options.runs {
            let writes = runtime.block_on(capacity(options.capacity_writes))?;
            say(format_args!(
                "capacity run {}: {writes:.0} writes/s",
                run + 1
            ));
            results.capacity.push(writes);
        }
    }

    // The in-process figures first, while this process holds no seeded cluster.
    if options.wants("decision") {
        // Several short rounds rather than one long one: a burst of other work on the machine
        // then spoils one round's percentiles, not the median of them.
        let subject = decision::Subject::load(
            module.engine().config(),
            DEFAULT_POLICY,
            decision::DEFAULT_POLICY_NAME,
        )?;
        for _ in 0..options.runs {
            results.decision.push(decision::run(
                &subject,
                runtime.handle().clone(),
                options.decision_runs,
                options.decision_runs * 10,
            )?);
        }
    }
    if options.wants("swap") {
        results.swaps = runtime.block_on(swap::run(
            options.swaps,
            cubepod_policy_host::runtime::Compile::Tiered,
        ))?;
        results.compile = swap::compile_only(options.swaps)?;
    }
    if options.wants("languages") {
        // A third of the Rust decision's calls (1,000 a round by default, after 100 to warm
        // up), every language alike: a Python or JavaScript call takes milliseconds, and a
        // thousand keep a round's p50 within a few percent of the next round's.
        let calls = (options.decision_runs / 3).max(100);
        results.languages = languages::run(options.runs, calls, runtime.handle().clone())?;
    }

    let largest = options.sizes.iter().copied().max();
    let token = options.token();
    for &n in options.sizes.iter().filter(|_| options.wants("create")) {
        for run in 0..options.runs {
            // The protocols alternate within a run, so that both see the same minutes of the
            // shared machine.
            for &protocol in &options.protocols {
                let perf = options
                    .perf
                    .as_ref()
                    .filter(|_| Some(n) == largest && run == 0)
                    .map(|dir| dir.join(format!("controller-create-{n}-{}.data", protocol.flag())));
                let setup = create::Setup {
                    perf,
                    ..setup(&runtime, &binary, options, protocol, &token)
                };
                let result = create::run(&setup, n).with_context(|| {
                    format!(
                        "creating {n} sandboxes over {}, run {}",
                        protocol.label(),
                        run + 1
                    )
                })?;
                say(format_args!(
                    "N={n} {} run {}: {:.0} sandboxes/s to Pods, {:.0} to Running, {:.2} writes \
                     and {:.2} reconciles each, controller CPU {:.0} µs per sandbox ({:.0} µs per \
                     request, {} instructions), resync {} writes, RSS {:.1} MiB",
                    protocol.flag(),
                    run + 1,
                    result.pods_per_second(),
                    result.running_per_second(),
                    result.writes_per_sandbox(),
                    result.breakdown.reconciles / n as f64,
                    result.cpu_per_sandbox_micros(),
                    result.cpu_per_request_micros(),
                    result
                        .instructions_per_sandbox_millions()
                        .map_or("uncounted".to_string(), |m| format!("{m:.2} M")),
                    result.resync_writes.values().sum::<usize>(),
                    result.resync_memory.rss_kib as f64 / 1024.0
                ));
                // A run whose writes are not a whole number per sandbox wrote something twice
                // or left something out: name what, since the table keeps only the median.
                if result.writes.values().sum::<usize>() % n != 0 {
                    say(format_args!("  writes by kind: {:?}", result.writes));
                }
                match protocol {
                    Protocol::H2 => &mut results.creates,
                    Protocol::Http1 => &mut results.creates_http1,
                }
                .entry(n)
                .or_default()
                .push(result);
            }
        }
    }

    let largest_claims = options.claim_sizes.iter().copied().max();
    for &n in options
        .claim_sizes
        .iter()
        .filter(|_| options.wants("claims"))
    {
        for run in 0..options.runs {
            for &protocol in &options.protocols {
                let perf = options
                    .perf
                    .as_ref()
                    .filter(|_| Some(n) == largest_claims && run == 0)
                    .map(|dir| dir.join(format!("controller-claims-{n}-{}.data", protocol.flag())));
                // A burst, then (the same minutes of the shared machine) the same N paced.
                let paced = options.claim_rate.map(Some);
                for pace in std::iter::once(None).chain(paced) {
                    let setup = create::Setup {
                        perf: perf.clone().filter(|_| pace.is_none()),
                        ..setup(&runtime, &binary, options, protocol, &token)
                    };
                    let result = claims::run(&setup, n, pace).with_context(|| {
                        format!("{n} claims over {}, run {}", protocol.label(), run + 1)
                    })?;
                    let how =
                        pace.map_or_else(|| "at once".to_string(), |r| format!("at {r:.0}/s"));
                    say(format_args!(
                        "claims N={n} {how} {} run {}: {:.0} claims/s (cold fill {:.0}/s), latency \
                         p50 {:.1} ms p90 {:.1} p99 {:.1} max {:.1}, {:.2} writes and {:.2} Events \
                         per claim {:?}, {} refill writes, {:.2} 409s per claim, {} double claims, \
                         {} not Running, CPU per claim: controller {:.0} µs ({:.2}× its {:.0} µs \
                         per cold sandbox of the fill; the claim's own {:.0} µs, {:.2}×, less \
                         the {} refill writes made meanwhile), fake and clients {:.0} µs",
                        protocol.flag(),
                        run + 1,
                        result.claims_per_second(),
                        result.cold_per_second(),
                        result.latency_ms(50.0),
                        result.latency_ms(90.0),
                        result.latency_ms(99.0),
                        result.max_latency_ms(),
                        result.writes_per_claim(),
                        result.claim_events as f64 / n as f64,
                        result.claim_writes,
                        result.refill_writes,
                        result.conflicts_per_claim(),
                        result.double_claims,
                        result.not_running.len(),
                        result.cpu_per_claim_micros(),
                        result.claim_to_cold_cpu(),
                        result.cpu_per_cold_micros(),
                        result.cpu_per_claim_own_micros(),
                        result.claim_own_to_cold_cpu(),
                        result.refill_writes_in_window,
                        result.bench_cpu_per_claim_micros(),
                    ));
                    for stuck in result.not_running.iter().take(3) {
                        say(format_args!("  not Running: {stuck}"));
                    }
                    match pace {
                        None => &mut results.claims,
                        Some(_) => &mut results.paced_claims,
                    }
                    .entry((protocol, n))
                    .or_default()
                    .push(result);
                }
            }
        }
    }

    if options.wants("rollout") {
        for run in 0..options.runs {
            // The stages alternate within a round, so that all see the same minutes of the
            // shared machine.
            for stage in rollout::Stage::ALL {
                let setup = setup(&runtime, &binary, options, Protocol::H2, &token);
                let n = options.rollout_size;
                let result = rollout::run(&setup, n, stage).with_context(|| {
                    format!("{n} sandboxes, {}, run {}", stage.label(), run + 1)
                })?;
                let detail = match stage {
                    rollout::Stage::Plain => String::new(),
                    rollout::Stage::Shadow => format!(
                        ", {} reconciles shadowed, {} differences",
                        result.compared, result.differences
                    ),
                    rollout::Stage::Canary => {
                        format!(", {} sandboxes reconciled by the candidate", result.touched)
                    }
                };
                say(format_args!(
                    "rollout N={n} {} run {}: {:.0} sandboxes/s to Running, controller CPU \
                     {:.0} µs per sandbox{detail}",
                    stage.label(),
                    run + 1,
                    result.run.running_per_second(),
                    result.run.cpu_per_sandbox_micros(),
                ));
                results.rollouts.push(result);
            }
        }
    }

    if options.wants("instructions") && !options.instruction_sizes.is_empty() {
        results.counted = count_instructions(options, &runtime, &binary)?;
    }

    if options.wants("router") {
        results.router = Some(router::run(&runtime, &binary, options.runs).context("the router")?);
    }

    let template = if options.wants("rss") || options.wants("ticks") {
        Some(runtime.block_on(seed::Template::make(module.clone()))?)
    } else {
        None
    };
    // The controller's RSS (KiB) at each N measured so far: the projection of the next N.
    let mut measured: BTreeMap<usize, f64> = results
        .creates
        .iter()
        .filter_map(|(n, runs)| {
            let rss: Vec<f64> = runs
                .iter()
                .map(|r| r.resync_memory.rss_kib as f64)
                .collect();
            Some((*n, stats::median(&rss)?))
        })
        .collect();
    results.sandbox_json_bytes = template.as_ref().map_or(0, seed::Template::json_bytes);
    if let Some(template) = template.as_ref().filter(|_| options.wants("ticks")) {
        let ticks =
            runtime.block_on(ticks::run(module.clone(), template, 10_000, options.ticks))?;
        say(format_args!(
            "ticks over 10,000: reap p50 {:.2} ms, pool p50 {:.2} ms",
            stats::p50_p99_micros(&ticks.reap).0 / 1e3,
            stats::p50_p99_micros(&ticks.pool).0 / 1e3
        ));
        results.ticks = Some(ticks);
    }

    let rss_runs = options
        .rss_sizes
        .iter()
        .flat_map(|&n| options.rss_lists.iter().map(move |&lists| (n, lists)));
    for (n, lists) in rss_runs.filter(|_| options.wants("rss")) {
        let Some(template) = &template else { break };
        if results.skipped.iter().any(|s| s.n == n) {
            continue;
        }
        for run in 0..options.runs {
            let setup = create::Setup {
                runtime: &runtime,
                binary: &binary,
                perf: None,
                pod_start_delay: Duration::ZERO,
                trim_probe: options.trim_probe,
                controller_args: Vec::new(),
                protocol: Protocol::H2,
                callgrind: None,
                token: TOKEN,
            };
            let projected_kib = project(&measured, n);
            let result =
                match rss::run(&setup, template, n, projected_kib, lists).with_context(|| {
                    format!(
                        "RSS over {n} seeded sandboxes, lists {}, run {}",
                        lists.flag(),
                        run + 1
                    )
                })? {
                    Ok(result) => result,
                    Err(skipped) => {
                        say(format_args!(
                            "seeded N={n}: not run: the controller would need about {:.0} MiB \
                         (projected from the smaller N) and the machine has {:.0} MiB available",
                            skipped.projected_mib, skipped.available_mib
                        ));
                        results.skipped.push(skipped);
                        break;
                    }
                };
            measured
                .entry(n)
                .and_modify(|rss| *rss = rss.max(result.memory.rss_kib as f64))
                .or_insert(result.memory.rss_kib as f64);
            say(format_args!(
                "seeded N={n} lists {} run {}: RSS {:.1} MiB (at ready {:.1}, peak {:.1}), \
                 ready in {:.1} s, settled in {:.1} s, resync {} writes{}{}; this process \
                 {:.0} MiB",
                lists.flag(),
                run + 1,
                result.memory.rss_kib as f64 / 1024.0,
                result.ready_memory.rss_kib as f64 / 1024.0,
                result.memory.hwm_kib as f64 / 1024.0,
                result.ready.as_secs_f64(),
                result.settled.as_secs_f64(),
                result.resync_writes.values().sum::<usize>(),
                // A resync that writes says what, since the table keeps only the median.
                if result.resync_writes.is_empty() {
                    String::new()
                } else {
                    format!(" {:?}", result.resync_writes)
                },
                result.trimmed.map_or(String::new(), |m| format!(
                    ", RSS after mi_collect {:.1} MiB",
                    m.rss_kib as f64 / 1024.0
                )),
                result.bench_memory.rss_kib as f64 / 1024.0
            ));
            let by_n = match lists {
                rss::Lists::Paged => &mut results.seeded,
                rss::Lists::Whole => &mut results.seeded_whole,
            };
            by_n.entry(n).or_default().push(result);
        }
    }

    results.machine.wall = started.elapsed();
    let busy = process::machine_busy()?.saturating_sub(busy_before);
    let own = process::own_cpu_with_children()?.saturating_sub(own_before);
    let capacity = results.machine.wall.as_secs_f64() * results.machine.cpus.max(1) as f64;
    results.machine.others_share = Some(busy.saturating_sub(own).as_secs_f64() / capacity);
    say(format_args!(
        "done in {:.0} s; other processes used {:.0}% of the machine meanwhile",
        started.elapsed().as_secs_f64(),
        results.machine.others_share.unwrap_or(0.0) * 100.0
    ));
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>> {
        Options::parse(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn a_long_token_is_jwt_shaped_the_same_every_run_and_a_valid_header() {
        let token = token_of_len(1024);
        assert_eq!(token.len(), 1024);
        assert_eq!(token, token_of_len(1024));
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3, "{token}");
        assert!(parts.iter().all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        }));
        // Spread over the alphabet as a real token's characters are, not one repeated letter.
        let distinct: std::collections::BTreeSet<u8> = token.bytes().collect();
        assert!(
            distinct.len() > 50,
            "{} distinct characters",
            distinct.len()
        );
        assert!(hyper::header::HeaderValue::from_str(&format!("Bearer {token}")).is_ok());
        // A short token is one part, so that no part is empty.
        assert!(!token_of_len(8).contains('.'));
    }

    #[test]
    fn token_bytes_picks_the_runs_token_and_zero_is_refused() {
        let default = parse(&[]).expect("parses").expect("not help");
        assert_eq!(default.token(), TOKEN);
        let long = parse(&["--token-bytes", "1024"])
            .expect("parses")
            .expect("not help");
        assert_eq!(long.token(), token_of_len(1024));
        let inline = parse(&["--token-bytes=64"])
            .expect("parses")
            .expect("not help");
        assert_eq!(inline.token().len(), 64);
        assert!(parse(&["--token-bytes", "0"]).is_err());
        assert!(parse(&["--token-bytes", "many"]).is_err());
    }

    #[test]
    fn a_projection_from_one_size_measured_scales_it_from_the_origin() {
        let one = BTreeMap::from([(10_000, 100_000.0)]);
        assert_eq!(project(&one, 100_000), 1_000_000.0);
        let two = BTreeMap::from([(1_000, 60_000.0), (10_000, 100_000.0)]);
        assert!((project(&two, 100_000) - 500_000.0).abs() < 1.0);
        assert_eq!(project(&BTreeMap::new(), 1_000), 120_000.0);
    }

    #[test]
    fn only_languages_picks_the_languages_scenario_alone() {
        let options = parse(&["--only", "languages"])
            .expect("parses")
            .expect("not help");
        assert!(options.wants("languages"));
        assert!(!options.wants("decision") && !options.wants("create"));
        let err = parse(&["--only", "language"]).unwrap_err().to_string();
        assert!(err.contains("no scenario \"language\""), "{err}");
    }

    #[test]
    fn claim_rate_paces_runs_beside_the_bursts_and_zero_turns_them_off() {
        let rate = |args: &[&str]| parse(args).map(|o| o.and_then(|o| o.claim_rate));
        assert_eq!(rate(&[]).expect("parses"), Some(1_000.0));
        assert_eq!(rate(&["--claim-rate", "500"]).expect("parses"), Some(500.0));
        assert_eq!(rate(&["--claim-rate=0"]).expect("parses"), None);
        assert!(rate(&["--claim-rate", "-1"]).is_err());
        assert!(rate(&["--claim-rate", "inf"]).is_err());
        assert!(rate(&["--claim-rate", "fast"]).is_err());
    }
}
