//! The command line: `cubepod-controller run` and its flags, each also an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cubepod-controller",
    version,
    about = "Runs Kata-isolated sandboxes on Kubernetes; the reconcile policy is a wasm component."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller. With no kubeconfig and no in-cluster environment it runs against an
    /// embedded in-memory cluster seeded with the examples of deploy/examples/.
    Run(RunArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Policy module (a wasm component of the cubepod:controller world). Default: the
    /// built-in default policy.
    #[arg(long, env = "CUBEPOD_POLICY")]
    pub policy: Option<PathBuf>,

    /// Namespaces whose Sandboxes and PodWarmPools are reconciled; the policy may write only
    /// there. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_NAMESPACES",
        value_delimiter = ',',
        default_value = "cubepod-workloads"
    )]
    pub namespaces: Vec<String>,

    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "CUBEPOD_LISTEN", default_value = "0.0.0.0:8081")]
    pub listen: SocketAddr,

    /// How often the idle reaper runs.
    #[arg(long, env = "CUBEPOD_REAP_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub reap_interval: Duration,

    /// How often every warm pool is reconciled, besides on changes.
    #[arg(long, env = "CUBEPOD_POOL_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub pool_interval: Duration,

    /// Time bound of one call into the policy (epoch deadline).
    #[arg(long, env = "CUBEPOD_GUEST_DEADLINE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub guest_deadline: Duration,

    /// Memory bound of one call into the policy, in MiB.
    #[arg(long, env = "CUBEPOD_GUEST_MEMORY_MIB", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub guest_memory_mib: u32,

    /// Time bound of one Kubernetes request made for the policy.
    #[arg(long, env = "CUBEPOD_HOST_CALL_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub host_call_timeout: Duration,

    /// Reconciles run at once.
    #[arg(long, env = "CUBEPOD_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,

    /// Upper bound on a PodWarmPool's replicas; a pool above it is capped and told so.
    #[arg(long, env = "CUBEPOD_MAX_POOL_REPLICAS", default_value_t = 100)]
    pub max_pool_replicas: u32,

    /// How long shutdown waits for in-flight reconciles.
    #[arg(long, env = "CUBEPOD_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,

    /// Where compiled policy modules are cached, keyed by digest. Default: a folder in the
    /// system's temporary directory.
    #[arg(long, env = "CUBEPOD_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Run against the embedded in-memory cluster even if a kubeconfig is found.
    #[arg(long, env = "CUBEPOD_EMBEDDED")]
    pub embedded: bool,

    /// Embedded cluster: more objects to create at start, besides deploy/examples: YAML files
    /// or folders of them (Sandboxes and PodWarmPools). Repeatable.
    #[arg(long = "seed", env = "CUBEPOD_SEED", value_delimiter = ',')]
    pub seeds: Vec<PathBuf>,

    /// Embedded cluster: how long a created Pod takes to turn Running and Ready.
    #[arg(long, env = "CUBEPOD_POD_START_DELAY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub pod_start_delay: Duration,

    /// Log format: text or json.
    #[arg(long, env = "CUBEPOD_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

impl RunArgs {
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("cubepod-controller-cache"))
    }
}
