//! The command line: `cubepod-controller run` and its flags, each also an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};

use cubepod_policy_host::containment::{
    self, Containment, KeyAllowlist, KeyKind, OutputBudget, PodBounds, PodSecurity,
    WIDENABLE_POD_FIELDS,
};
use cubepod_policy_host::model::network;
use cubepod_policy_host::runtime::bindings::ClusterNetwork;
use cubepod_policy_host::runtime::{AddressSpace, Compile, DEFAULT_MEMORY_MIB, RuntimeConfig};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "cubepod-controller",
    version,
    about = "Runs Kata-isolated sandboxes on Kubernetes; the reconcile policy is a wasm component."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per process: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller. With no kubeconfig and no in-cluster environment it runs against an
    /// embedded in-memory cluster seeded with the examples of deploy/examples/.
    Run(RunArgs),
    /// Test or inspect a policy module without a cluster.
    Policy(PolicyArgs),
    /// Run the sandbox router: HTTP to each sandbox's Pod by host name or X-Sandbox-* headers,
    /// guarded by the cluster's tokens and RBAC, waking a sandbox paused for idleness.
    Router(RouterArgs),
}

/// The router's flags, shared by `router` and by `run` with the embedded cluster.
#[derive(Debug, Clone, Args)]
pub struct RouterFlags {
    /// The domain of sandbox host names: a request for `<port>-<sandbox>.<namespace>.<domain>`
    /// goes to that sandbox's Pod on that port.
    #[arg(
        long,
        env = "CUBEPOD_ROUTER_DOMAIN",
        default_value = "sandboxes.localhost"
    )]
    pub(crate) router_domain: String,

    /// How long a request is held while its sandbox wakes or starts; then 503 with
    /// Retry-After.
    #[arg(long, env = "CUBEPOD_WAKE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) wake_timeout: Duration,

    /// How many requests per sandbox may be held while it wakes, and in all while the router's
    /// cache loads; past it, 503 with Retry-After.
    #[arg(long, env = "CUBEPOD_MAX_HELD_REQUESTS", default_value_t = 1000)]
    pub(crate) max_held_requests: usize,

    /// At most one `cubepod.io/last-activity` write per sandbox per this interval, however
    /// many requests pass.
    #[arg(long, env = "CUBEPOD_ACTIVITY_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) activity_interval: Duration,

    /// How long a sandbox's Pod may take to accept a connection and answer a request's head;
    /// then 504.
    #[arg(long, env = "CUBEPOD_UPSTREAM_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) upstream_timeout: Duration,

    /// The router's certificate (PEM, its chain after it): served over TLS with ALPN h2 and
    /// http/1.1, read again when the file changes. Default: none, plain HTTP/1.1 and h2c.
    #[arg(
        long,
        env = "CUBEPOD_ROUTER_TLS_CERT",
        value_name = "FILE",
        requires = "router_tls_key"
    )]
    pub(crate) router_tls_cert: Option<PathBuf>,

    /// The private key of --router-tls-cert (PEM).
    #[arg(
        long,
        env = "CUBEPOD_ROUTER_TLS_KEY",
        value_name = "FILE",
        requires = "router_tls_cert"
    )]
    pub(crate) router_tls_key: Option<PathBuf>,
}

impl RouterFlags {
    /// The certificate and key files, when both are given (clap requires one with the other).
    pub(crate) fn tls_files(&self) -> Option<(PathBuf, PathBuf)> {
        self.router_tls_cert
            .clone()
            .zip(self.router_tls_key.clone())
    }

    /// The router's configuration for `namespaces`.
    pub(crate) fn config(&self, namespaces: &[String]) -> crate::router::RouterConfig {
        crate::router::RouterConfig {
            domain: self.router_domain.clone(),
            namespaces: namespaces.to_vec(),
            wake_timeout: self.wake_timeout,
            max_held_requests: self.max_held_requests,
            activity_interval: self.activity_interval,
            upstream_timeout: self.upstream_timeout,
        }
    }
}

/// `router`'s flags.
#[derive(Debug, Clone, Args)]
pub struct RouterArgs {
    /// Address the router serves on (HTTP/1.1 and HTTP/2; TLS with --router-tls-cert);
    /// `/healthz`, `/readyz` and `/metrics` (to a bearer token allowed `get` on it) answer there
    /// for a request that names no sandbox.
    #[arg(long, env = "CUBEPOD_ROUTER_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    /// Namespaces whose sandboxes it routes to. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_NAMESPACES",
        value_delimiter = ',',
        default_value = "cubepod-workloads"
    )]
    pub namespaces: Vec<String>,

    #[command(flatten)]
    pub(crate) flags: RouterFlags,

    /// Log format: text or json.
    #[arg(long, env = "CUBEPOD_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// `run`'s flags.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Policy module (a wasm component of the cubepod:controller world). Default: the
    /// built-in default policy.
    #[arg(long, env = "CUBEPOD_POLICY")]
    pub(crate) policy: Option<PathBuf>,

    /// Public key (PEM, ECDSA P-256 or Ed25519) that policy modules must be signed with: a module
    /// loads, at start or in a swap, only with a valid signature beside it (`<module>.sig`, as
    /// `cosign sign-blob --key` or `policy sign` writes it). Repeatable; any key that verifies
    /// admits. Without one, modules are not verified.
    #[arg(
        long = "policy-verify-key",
        env = "CUBEPOD_POLICY_VERIFY_KEY",
        value_delimiter = ',',
        value_name = "PATH"
    )]
    pub(crate) policy_verify_keys: Vec<PathBuf>,

    /// The most a policy module may hold, in bytes, decompressed when it is gzip: a larger one
    /// (or anything but a regular file) is refused (reason `file`). A ConfigMap holds at most
    /// 1 MiB.
    #[arg(long, env = "CUBEPOD_MAX_POLICY_BYTES", default_value_t = crate::admission::DEFAULT_MAX_MODULE_BYTES, value_parser = clap::value_parser!(u64).range(1024..=(1 << 30)))]
    pub(crate) max_policy_bytes: u64,

    /// How often the policy file is checked for a new module, besides on file events.
    #[arg(long, env = "CUBEPOD_POLICY_POLL_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) policy_poll_interval: Duration,

    /// Namespaces whose Sandboxes and PodWarmPools are reconciled; the policy may write only
    /// there. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_NAMESPACES",
        value_delimiter = ',',
        default_value = "cubepod-workloads"
    )]
    pub(crate) namespaces: Vec<String>,

    /// Address of /healthz and /readyz, plain HTTP for the kubelet (and of /metrics with
    /// --metrics-secure=false). Default: 0.0.0.0:8081; with the embedded cluster 127.0.0.1:8081.
    #[arg(long, env = "CUBEPOD_LISTEN")]
    pub(crate) listen: Option<SocketAddr>,

    /// Address of /metrics over HTTPS: each request's bearer token is reviewed by the cluster
    /// (TokenReview), then its user must be allowed `get` on the non-resource URL /metrics
    /// (SubjectAccessReview); 401 without a token the cluster authenticates, 403 when not
    /// allowed. Answers are kept a minute (tokens), five minutes (allowed), 30 s (denied).
    #[arg(long, env = "CUBEPOD_METRICS_LISTEN", default_value = "0.0.0.0:8443")]
    pub(crate) metrics_listen: SocketAddr,

    /// Serve /metrics over HTTPS with authentication and authorization (--metrics-listen);
    /// `false`: plain HTTP beside the probes (--listen), with no authentication, allowed only
    /// on a loopback address. Default: true; with the embedded cluster false.
    #[arg(
        long,
        env = "CUBEPOD_METRICS_SECURE",
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub(crate) metrics_secure: Option<bool>,

    /// Folder of the metrics server's certificate and key (PEM; e.g. a mounted cert-manager
    /// Secret), read again when they change. Default: none, a self-signed certificate made at
    /// start.
    #[arg(long, env = "CUBEPOD_METRICS_CERT_PATH", value_name = "DIR")]
    pub(crate) metrics_cert_path: Option<PathBuf>,

    /// File name of the certificate (and its chain) in --metrics-cert-path.
    #[arg(long, env = "CUBEPOD_METRICS_CERT_NAME", default_value = "tls.crt")]
    pub(crate) metrics_cert_name: String,

    /// File name of the private key in --metrics-cert-path.
    #[arg(long, env = "CUBEPOD_METRICS_CERT_KEY", default_value = "tls.key")]
    pub(crate) metrics_cert_key: String,

    /// How often the idle reaper runs.
    #[arg(long, env = "CUBEPOD_REAP_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) reap_interval: Duration,

    /// How often every warm pool is reconciled, besides on changes.
    #[arg(long, env = "CUBEPOD_POOL_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) pool_interval: Duration,

    #[command(flatten)]
    pub(crate) guest: GuestArgs,

    /// Memory all policy calls in flight may hold together (a Kubernetes quantity): each
    /// charges twice its guest memory (the guest's pages and the host's copy of what it
    /// passes) and 8 times each manifest it sends, and fails (reason `memory`, retried) past
    /// it. Sized for the Deployment's 512Mi limit (docs/architecture.md, "Host memory across
    /// calls"); it must hold one call at its bounds.
    #[arg(long, env = "CUBEPOD_CALLS_MEMORY_BUDGET", default_value = "256Mi", value_parser = volume_size)]
    pub(crate) calls_memory_budget: u128,

    /// What the controller may keep of the objects and statuses policies write, across
    /// sandboxes (a Kubernetes quantity): each sandbox's records past their first 4 KiB (a
    /// sandbox's ordinary record) count. A write or status that would go past it is deferred
    /// or cut, and the Sandbox told (`PolicyObjectsBounded`). Sized with --calls-memory-budget
    /// for the Deployment's 512Mi limit (docs/architecture.md, "Host memory across objects").
    #[arg(long, env = "CUBEPOD_MAX_POLICY_OBJECT_BYTES", default_value = "16Mi", value_parser = volume_size)]
    pub(crate) max_policy_object_bytes: u128,

    /// What the controller may keep of one sandbox's objects and status (a Kubernetes
    /// quantity): past it, the sandbox's writes are deferred and its status cut.
    #[arg(long, env = "CUBEPOD_MAX_POLICY_OBJECT_BYTES_PER_SANDBOX", default_value = "128Ki", value_parser = volume_size)]
    pub(crate) max_policy_object_bytes_per_sandbox: u128,

    /// How a policy call's linear memory sits in the address space: `guarded` reserves 4 GiB
    /// and a guard region per memory slot, so the compiled code checks no bounds (about 4 GiB
    /// of address space per slot, two slots per concurrent call); `compact` reserves only the
    /// memory bound, and the code checks each access (slower policy code, the same answers):
    /// for a host that caps the address space (`ulimit -v`), or a tool such as valgrind.
    #[arg(long, env = "CUBEPOD_GUEST_ADDRESS_SPACE", value_enum, default_value_t = AddressSpace::Guarded)]
    pub(crate) guest_address_space: AddressSpace,

    /// Time bound of one Kubernetes request made for the policy.
    #[arg(long, env = "CUBEPOD_HOST_CALL_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) host_call_timeout: Duration,

    #[command(flatten)]
    pub(crate) containment: ContainmentArgs,

    #[command(flatten)]
    pub(crate) network: NetworkArgs,

    /// Reconciles run at once. A reconcile mostly waits on its API requests (a new sandbox's
    /// are four in a row), so this is what keeps the API busy; each is one request in flight.
    #[arg(long, env = "CUBEPOD_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) concurrency: u32,

    /// Threads that run the reconciles, their policy calls, the watches and the servers.
    /// One keeps a reconcile, its guest and its requests on one thread, with no hand-off
    /// between threads: on 2 cores shared with the API server, 2 threads cost 13-56% more CPU
    /// per sandbox and were no faster (docs/performance.md). Raise it when the controller is
    /// CPU-bound on cores of its own. Module compiles never run on these threads.
    #[arg(long, env = "CUBEPOD_WORKER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub worker_threads: u16,

    /// Upper bound on a PodWarmPool's replicas; a pool above it is capped and told so.
    #[arg(long, env = "CUBEPOD_MAX_POOL_REPLICAS", default_value_t = 100)]
    pub(crate) max_pool_replicas: u32,

    /// How long shutdown waits for in-flight reconciles.
    #[arg(long, env = "CUBEPOD_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) shutdown_timeout: Duration,

    /// Where compiled policy modules are cached, keyed by digest and engine. Created private
    /// (0700); not used (modules are compiled in memory) when it is a symlink, owned by another
    /// user, or writable by its group or others. Default: a folder in the system's temporary
    /// directory.
    #[arg(long, env = "CUBEPOD_CACHE_DIR")]
    pub(crate) cache_dir: Option<PathBuf>,

    /// Run against the embedded in-memory cluster even if a kubeconfig is found.
    #[arg(long, env = "CUBEPOD_EMBEDDED")]
    pub(crate) embedded: bool,

    /// Embedded cluster: more objects to create at start, besides deploy/examples: YAML files
    /// or folders of them (Sandboxes and PodWarmPools). Repeatable.
    #[arg(long = "seed", env = "CUBEPOD_SEED", value_delimiter = ',')]
    pub(crate) seeds: Vec<PathBuf>,

    /// Embedded cluster: the loopback address its Kubernetes API is served on, for kubectl
    /// (HTTPS, a CA and a token made at start). Port 0: a free one.
    #[arg(
        long,
        env = "CUBEPOD_EMBEDDED_API_LISTEN",
        default_value = "127.0.0.1:0"
    )]
    pub(crate) embedded_api_listen: std::net::SocketAddr,

    /// Embedded cluster: where the kubeconfig for its API is written (mode 0600). Default:
    /// `$XDG_STATE_HOME/cubepod-controller/kubeconfig` (`~/.local/state/...`), or the temp dir.
    #[arg(long, env = "CUBEPOD_EMBEDDED_KUBECONFIG")]
    pub(crate) embedded_kubeconfig: Option<PathBuf>,

    /// Embedded cluster: the loopback address its sandbox router is served on (see `router`'s
    /// flags). Port 0: a free one, printed in the log.
    #[arg(long, env = "CUBEPOD_ROUTER_LISTEN", default_value = "127.0.0.1:0")]
    pub(crate) router_listen: SocketAddr,

    #[command(flatten)]
    pub(crate) router: RouterFlags,

    /// Embedded cluster: how long a created Pod takes to turn Running and Ready.
    #[arg(long, env = "CUBEPOD_POD_START_DELAY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) pod_start_delay: Duration,

    /// How long a just-started sandbox may wait for its Pod to be Ready before its Pending
    /// status is written (0: write every change at once). Saves a status write per sandbox.
    #[arg(long, env = "CUBEPOD_STATUS_COALESCE", default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) status_coalesce: Duration,

    /// Post Normal Events (Created, Paused, Reset, Claimed, ...), as `kubectl describe` shows
    /// them; `--normal-events=false` posts Warnings only.
    #[arg(
        long,
        env = "CUBEPOD_NORMAL_EVENTS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub(crate) normal_events: bool,

    /// Elect a leader among replicas with a coordination.k8s.io Lease; only the leader
    /// reconciles.
    #[arg(long, env = "CUBEPOD_LEADER_ELECT")]
    pub(crate) leader_elect: bool,

    /// Namespace of the leader Lease (the controller's own).
    #[arg(long, env = "POD_NAMESPACE", default_value = "cubepod-system")]
    pub(crate) lease_namespace: String,

    /// Name of the leader Lease.
    #[arg(long, env = "CUBEPOD_LEASE_NAME", default_value = "cubepod-controller")]
    pub(crate) lease_name: String,

    /// This replica's identity in the Lease. Default: the Pod's name, else host name and PID.
    #[arg(long, env = "POD_NAME")]
    pub(crate) identity: Option<String>,

    /// How long a Lease holds without renewal before another replica may take it.
    #[arg(long, env = "CUBEPOD_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub(crate) lease_duration: Duration,

    /// How long a leader keeps reconciling while it fails to renew.
    #[arg(long, env = "CUBEPOD_LEASE_RENEW_DEADLINE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) lease_renew_deadline: Duration,

    /// How often the Lease is renewed or tried.
    #[arg(long, env = "CUBEPOD_LEASE_RETRY_PERIOD", default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) lease_retry_period: Duration,

    /// Log format: text or json.
    #[arg(long, env = "CUBEPOD_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

impl RunArgs {
    pub(crate) fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "cubepod-controller".to_string());
            format!("{host}-{}", std::process::id())
        })
    }

    /// Where the embedded cluster's kubeconfig goes: the flag, else the user's state dir, else
    /// a per-user folder of the temp dir.
    pub(crate) fn embedded_kubeconfig(&self) -> PathBuf {
        if let Some(path) = &self.embedded_kubeconfig {
            return path.clone();
        }
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|home| home.join(".local/state"))
            });
        match state {
            Some(dir) => dir.join("cubepod-controller/kubeconfig"),
            None => std::env::temp_dir()
                .join(format!("cubepod-controller-{}", users_id()))
                .join("kubeconfig"),
        }
    }

    /// The probes' address: the flag, else every interface for the kubelet, or loopback only
    /// for the embedded cluster (served on loopback only itself).
    pub(crate) fn listen(&self, embedded: bool) -> SocketAddr {
        self.listen.unwrap_or(if embedded {
            SocketAddr::from(([127, 0, 0, 1], 8081))
        } else {
            SocketAddr::from(([0, 0, 0, 0], 8081))
        })
    }

    /// Whether /metrics is served over HTTPS with authentication: the flag, else for a
    /// Kubernetes API but not for the embedded cluster (whose README reads it with plain curl).
    pub(crate) fn metrics_secure(&self, embedded: bool) -> bool {
        self.metrics_secure.unwrap_or(!embedded)
    }

    /// The metrics server's certificate and key files, when --metrics-cert-path names a folder.
    pub(crate) fn metrics_cert_files(&self) -> Option<(PathBuf, PathBuf)> {
        self.metrics_cert_path.as_ref().map(|dir| {
            (
                dir.join(&self.metrics_cert_name),
                dir.join(&self.metrics_cert_key),
            )
        })
    }

    pub(crate) fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("cubepod-controller-cache"))
    }
}

/// The user's id, to keep users' files apart in a shared temp dir.
#[allow(unsafe_code)] // getuid: who the controller runs as.
fn users_id() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// `policy`'s subcommand.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Which `policy` subcommand.
    #[command(subcommand)]
    pub command: PolicyCommand,
}

/// The `policy` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// Check a policy module as the controller admits it, then run scenario files against it,
    /// with no cluster.
    ///
    /// First the checks `run` makes before it runs a module, with the same flags: it loads
    /// (compile, contract, describe) and passes the built-in conformance cases
    /// (`--no-conformance` leaves those out). Then each scenario runs on a scratch in-memory
    /// cluster, through the same sandboxed runtime and limits as the controller. Prints PASS or
    /// FAIL per case and scenario (with a diff), then "N passed, M failed"; exits 1 if any
    /// failed, 2 if it could not run. The scenario format is described in
    /// tests/scenarios/README.md.
    Test(PolicyTestArgs),
    /// Show what a policy module is, and whether it fits the contract.
    ///
    /// Prints its name, version, contract version, digest, size, imports and exports; a
    /// module that does not fit the contract (or fails the conformance self-test) is named as
    /// such, with why, and the exit code is 1.
    Inspect(PolicyInspectArgs),
    /// Show what a candidate module would do differently from the stable one, object by
    /// object, without writing anything.
    ///
    /// Both modules go through the admission `run` gives a module (signature with
    /// --verify-key, compile, contract, self-test). Then each runs over every Sandbox and
    /// PodWarmPool of the objects given: the initial objects of scenario files (SCENARIO), or,
    /// without any, those of a live cluster, found as `run` finds it (kubeconfig or in-cluster;
    /// only read, never written). Each object is reconciled once per module on a scratch
    /// in-memory cluster holding its namespace's objects, through the controller's own
    /// reconcile core; what differs (calls, status written, Events, requeue, claim, pool
    /// changes, errors) is printed under the object. Exits 0 when nothing differs, 1 when
    /// something does, 2 when it cannot run (a module unreadable or refused, no cluster).
    Diff(PolicyDiffArgs),
    /// Sign a policy module for `run --policy-verify-key`.
    ///
    /// Writes the signature beside the module (`<module>.sig`), in the format of `cosign
    /// sign-blob --key`: base64 of an ECDSA P-256/SHA-256 (DER) or Ed25519 signature over the
    /// module's bytes. The key is an unencrypted PEM PKCS#8 private key (`openssl genpkey
    /// -algorithm EC -pkeyopt ec_paramgen_curve:P-256`, or `-algorithm ed25519`); for a cosign
    /// key, use `cosign sign-blob` itself.
    Sign(PolicySignArgs),
    /// Write a policy module to a file: `policy export builtin:default -o policy.wasm`.
    ///
    /// The bytes are the module's, unchanged: the built-in default policy as this binary runs
    /// it, to inspect, sign or ship as a file.
    Export(PolicyExportArgs),
    /// Create a policy crate: the default decisions, one overridden as an example.
    ///
    /// Writes a Rust crate (outside this workspace) on the SDK, `cubepod-policy-sdk`: a policy
    /// that caps every warm pool at two members, native unit tests, `scenarios/`
    /// that `policy test` passes, and a CI workflow (`.github/workflows/policy.yml`). The SDK
    /// comes from the checkout this binary was built from unless `--sdk-path` or `--sdk-git`
    /// names another. Refuses a directory that is not empty.
    New(PolicyNewArgs),
}

/// `policy export`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct PolicyExportArgs {
    /// The module: `builtin:default` (the policy built into this binary) or a file.
    pub(crate) module: PathBuf,

    /// Where to write it.
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: PathBuf,
}

/// `policy new`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct PolicyNewArgs {
    /// The policy's name: the crate's, and the one `describe` reports (lowercase letters,
    /// digits and hyphens).
    pub(crate) name: String,

    /// The directory to create. Default: NAME, in the current directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) path: Option<PathBuf>,

    /// A cubepod-controller checkout whose `sdk/` the crate depends on by path. Default: the
    /// checkout this binary was built from, if it is still there.
    #[arg(long, value_name = "CHECKOUT", conflicts_with = "sdk_git")]
    pub(crate) sdk_path: Option<PathBuf>,

    /// A cubepod-controller git repository the crate takes the SDK from (for CI on any
    /// machine).
    #[arg(long, value_name = "URL")]
    pub(crate) sdk_git: Option<String>,

    /// With --sdk-git: the commit (a hash, or a full ref such as `refs/pull/1/head`).
    #[arg(long, value_name = "REV", requires = "sdk_git", conflicts_with_all = ["sdk_tag", "sdk_branch"])]
    pub(crate) sdk_rev: Option<String>,

    /// With --sdk-git: the tag.
    #[arg(
        long,
        value_name = "TAG",
        requires = "sdk_git",
        conflicts_with = "sdk_branch"
    )]
    pub(crate) sdk_tag: Option<String>,

    /// With --sdk-git: the branch (default: the repository's default branch).
    #[arg(long, value_name = "BRANCH", requires = "sdk_git")]
    pub(crate) sdk_branch: Option<String>,

    /// The policy's language: `rust` (a crate on `sdk/`), `python` (a project on `sdk/python/`,
    /// built with componentize-py) or `js` (an npm project on `sdk/js/`, built with
    /// componentize-js).
    #[arg(long, value_enum, default_value_t = PolicyLang::Rust)]
    pub(crate) lang: PolicyLang,
}

/// The languages `policy new` scaffolds a policy in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyLang {
    /// A crate on the Rust SDK (`sdk/`), built with cargo.
    Rust,
    /// A project on the Python SDK (`sdk/python/`), built with componentize-py.
    Python,
    /// An npm project on the JavaScript SDK (`sdk/js/`), built with esbuild and componentize-js.
    Js,
}

/// `policy diff`'s arguments.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("guest_deadline", |a| a.help(
        "Time bound of one call into a policy, as `run --guest-deadline`"
    )),
    mut_arg("guest_memory_mib", |a| a.help(
        "Memory bound of one call into a policy, in MiB, as `run --guest-memory-mib`"
    ))
)]
pub struct PolicyDiffArgs {
    /// The module that runs now: a wasm component file, or `builtin:default`.
    pub(crate) stable: PathBuf,

    /// The module to compare with it: a wasm component file, or `builtin:default`.
    pub(crate) candidate: PathBuf,

    /// Scenario files (YAML), or folders searched for *.yaml and *.yml, whose `objects` are
    /// the cluster to compare on. Without any: the live cluster.
    #[arg(value_name = "SCENARIO")]
    pub(crate) scenarios: Vec<PathBuf>,

    /// Live cluster: the namespaces whose Sandboxes and PodWarmPools are compared, as `run
    /// --namespaces`. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_NAMESPACES",
        value_delimiter = ',',
        default_value = "cubepod-workloads"
    )]
    pub(crate) namespaces: Vec<String>,

    /// Also write a JUnit XML report here, one testcase per object (failed when the modules
    /// differ on it).
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,

    /// Check each module's signature (`<module>.sig`) as `run --policy-verify-key PATH`
    /// would; a module it would refuse stops the comparison (exit 2). Repeatable.
    #[arg(long = "verify-key", value_delimiter = ',', value_name = "PATH")]
    pub(crate) verify_keys: Vec<PathBuf>,

    /// Upper bound on a PodWarmPool's replicas, as `run --max-pool-replicas` (a scenario's
    /// own `maxPoolReplicas` wins for its objects).
    #[arg(long, env = "CUBEPOD_MAX_POOL_REPLICAS", default_value_t = 100)]
    pub(crate) max_pool_replicas: u32,

    #[command(flatten)]
    pub(crate) guest: GuestArgs,

    /// The containment rules, as `run` has them: the same flags give the same refusals.
    #[command(flatten)]
    pub(crate) containment: ContainmentArgs,
}

/// `policy sign`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct PolicySignArgs {
    /// The private key: PEM PKCS#8 ("PRIVATE KEY"), ECDSA P-256 or Ed25519, unencrypted.
    #[arg(long, value_name = "PATH")]
    pub(crate) key: PathBuf,

    /// The policy module to sign.
    pub(crate) module: PathBuf,

    /// Where to write the signature. Default: the module's path with `.sig` appended.
    #[arg(long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// `policy test`'s arguments.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("guest_deadline", |a| a.help(
        "Time bound of one call into the policy (epoch deadline), as `run --guest-deadline`"
    )),
    mut_arg("guest_memory_mib", |a| a.help(
        "Memory bound of one call into the policy, in MiB, as `run --guest-memory-mib`"
    ))
)]
pub struct PolicyTestArgs {
    /// The policy: a wasm component file, or `builtin:default` for the policy built into
    /// this binary.
    pub(crate) module: PathBuf,

    /// Scenario files (YAML), or folders searched for *.yaml and *.yml.
    #[arg(value_name = "SCENARIO")]
    pub(crate) scenarios: Vec<PathBuf>,

    /// Also write a JUnit XML report here, for CI systems.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,

    /// Leave out the conformance self-test that `run` gives every module before it runs it:
    /// the scenarios alone. Without it, a module `run` would refuse fails here too.
    #[arg(long)]
    pub(crate) no_conformance: bool,

    #[command(flatten)]
    pub(crate) guest: GuestArgs,

    /// The containment rules, as `run` has them: the same flags give the same refusals.
    #[command(flatten)]
    pub(crate) containment: ContainmentArgs,
}

/// `policy inspect`'s arguments.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("guest_deadline", |a| a.help(
        "Time bound of one policy call during the conformance self-test"
    )),
    mut_arg("guest_memory_mib", |a| a.help(
        "Memory bound of one policy call during the conformance self-test, in MiB"
    ))
)]
pub struct PolicyInspectArgs {
    /// The policy: a wasm component file, or `builtin:default` for the policy built into
    /// this binary.
    pub(crate) module: PathBuf,

    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// Also check the module's signature (`<module>.sig`) as `run --policy-verify-key PATH`
    /// would; a module it would refuse exits 1. Repeatable.
    #[arg(long = "verify-key", value_delimiter = ',', value_name = "PATH")]
    pub(crate) verify_keys: Vec<PathBuf>,

    #[command(flatten)]
    pub(crate) guest: GuestArgs,

    /// The containment rules of the conformance self-test, as `run` has them.
    #[command(flatten)]
    pub(crate) containment: ContainmentArgs,
}

/// The bounds of one policy call: one set of flags for `run`, `policy test` and `policy
/// inspect` (each `policy` subcommand words their help for itself).
#[derive(Debug, Clone, Args)]
pub(crate) struct GuestArgs {
    /// Time bound of one call into the policy (epoch deadline).
    #[arg(long, env = "CUBEPOD_GUEST_DEADLINE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) guest_deadline: Duration,

    /// Memory bound of one call into the policy, in MiB.
    #[arg(long, env = "CUBEPOD_GUEST_MEMORY_MIB", default_value_t = DEFAULT_MEMORY_MIB, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) guest_memory_mib: u32,
}

/// The policy engine's flags: `run`'s, or those of a `policy` subcommand (`test`, `inspect`).
pub(crate) enum EngineFlags<'a> {
    /// `run`'s: the controller's engine.
    Run(&'a RunArgs),
    /// A `policy` subcommand's: the call bounds and containment rules, as `run` has them.
    Policy {
        /// The bounds of one call.
        guest: &'a GuestArgs,
        /// The containment rules.
        containment: &'a ContainmentArgs,
    },
}

impl EngineFlags<'_> {
    /// The engine's configuration. `run` and a `policy` subcommand bound each call and contain
    /// it alike, so that CI refuses what production would; they differ in how they call it.
    pub(crate) fn runtime_config(&self) -> RuntimeConfig {
        let (guest, containment) = match self {
            EngineFlags::Run(args) => (&args.guest, &args.containment),
            EngineFlags::Policy { guest, containment } => (*guest, *containment),
        };
        let config = RuntimeConfig {
            call_deadline: guest.guest_deadline,
            memory_limit_bytes: guest.guest_memory_mib as usize * 1024 * 1024,
            containment: Arc::new(containment.containment()),
            ..RuntimeConfig::default()
        };
        match self {
            // Many calls at once, within `run`'s bounds on them, and compiled modules cached.
            EngineFlags::Run(args) => RuntimeConfig {
                host_call_timeout: args.host_call_timeout,
                cache_dir: Some(args.cache_dir()),
                // The workers, the reap and pool ticks, and a hot swap's self-test.
                max_concurrent_calls: args.concurrency.saturating_add(8),
                address_space: args.guest_address_space,
                calls_memory_budget_bytes: usize::try_from(args.calls_memory_budget)
                    .unwrap_or(usize::MAX),
                // A new module serves Winch's build while Cranelift's compiles behind it.
                compile: Compile::Tiered,
                ..config
            },
            // One call at a time: the budget of calls in flight only has to hold it. No
            // compilation cache: a test run should not depend on, or fill, the controller's.
            EngineFlags::Policy { .. } => RuntimeConfig {
                calls_memory_budget_bytes: config
                    .calls_memory_budget_bytes
                    .max(config.call_charge_bound()),
                cache_dir: None,
                ..config
            },
        }
    }
}

/// What a policy's `kube-client` calls may write, and their per-call budgets: one set of
/// flags for `run`, `policy test` and `policy inspect`, so that CI refuses what production
/// would (see docs/policy-authoring.md, "What a policy may do").
#[derive(Debug, Clone, Args)]
pub(crate) struct ContainmentArgs {
    /// RuntimeClasses a sandbox's Pod may name; it must name one. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_ALLOWED_RUNTIME_CLASSES",
        value_delimiter = ',',
        default_value = "kata-qemu"
    )]
    pub(crate) allowed_runtime_classes: Vec<String>,

    /// The Pod Security Standards level a sandbox's Pod must meet.
    #[arg(long, env = "CUBEPOD_POD_SECURITY", value_enum, default_value_t = PodSecurity::Baseline)]
    pub(crate) pod_security: PodSecurity,

    /// The only service account a sandbox's Pod may run as (always without a token).
    #[arg(
        long,
        env = "CUBEPOD_SANDBOX_SERVICE_ACCOUNT",
        default_value = "default"
    )]
    pub(crate) sandbox_service_account: String,

    /// Pod spec fields besides the sandbox profile that a policy may set. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_ALLOW_POD_FIELD",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(WIDENABLE_POD_FIELDS)
    )]
    pub(crate) allow_pod_field: Vec<String>,

    /// Labels besides the host's that a policy may put on a sandbox's Pod: keys (`team`) or
    /// prefixes ending in `/` (`example.com/`). Never the host's own (the managed-by label,
    /// anything under `cubepod.io/`). A label can make the Pod match a selector of another
    /// workload's Service or NetworkPolicy: allow keys no such selector grants access by.
    /// Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_ALLOW_POD_LABEL",
        value_delimiter = ',',
        value_name = "KEY",
        value_parser = pod_label
    )]
    pub(crate) allow_pod_label: Vec<String>,

    /// Annotations a policy may put on a sandbox's Pod, as keys or prefixes ending in `/`.
    /// Never the host's (under `cubepod.io/`), nor those the container runtime reads
    /// (`io.katacontainers.*`, `io.kubernetes.cri-o.*`, the AppArmor and seccomp ones).
    /// Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_ALLOW_POD_ANNOTATION",
        value_delimiter = ',',
        value_name = "KEY",
        value_parser = pod_annotation
    )]
    pub(crate) allow_pod_annotation: Vec<String>,

    /// Secrets besides the sandbox's own that a Pod may reference (env, volumes, image pull
    /// secrets). Comma-separated.
    #[arg(long, env = "CUBEPOD_ALLOWED_SECRET_REFS", value_delimiter = ',')]
    pub(crate) allowed_secret_refs: Vec<String>,

    /// ConfigMaps a Pod may reference. Comma-separated.
    #[arg(long, env = "CUBEPOD_ALLOWED_CONFIG_MAP_REFS", value_delimiter = ',')]
    pub(crate) allowed_config_map_refs: Vec<String>,

    /// PriorityClasses a sandbox's Pod may name, where `--allow-pod-field=priorityClassName`
    /// lets it name one; none by default. A priority class decides whose Pods this one preempts:
    /// list `system-*` classes only knowing that. Comma-separated.
    #[arg(long, env = "CUBEPOD_ALLOWED_PRIORITY_CLASSES", value_delimiter = ',')]
    pub(crate) allowed_priority_classes: Vec<String>,

    /// Schedulers a sandbox's Pod may name, where `--allow-pod-field=schedulerName` lets it.
    /// Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_ALLOWED_SCHEDULERS",
        value_delimiter = ',',
        default_value = containment::DEFAULT_SCHEDULER
    )]
    pub(crate) allowed_schedulers: Vec<String>,

    /// Node keys a sandbox's Pod may tolerate (as taints) and select nodes by (in
    /// `nodeSelector` and node affinity), where `--allow-pod-field` lets it set those: the
    /// control plane's (`node-role.kubernetes.io/control-plane`, `.../master`), a cordoned
    /// node's (`node.kubernetes.io/unschedulable`), a node's name (`kubernetes.io/hostname`,
    /// and `matchFields`). None by default; a toleration of every taint (no key) is never
    /// allowed. Comma-separated.
    #[arg(
        long,
        env = "CUBEPOD_ALLOW_NODE_KEY",
        value_delimiter = ',',
        value_name = "KEY",
        value_parser = PossibleValuesParser::new(containment::RESERVED_NODE_KEYS)
    )]
    pub(crate) allow_node_key: Vec<String>,

    /// The longest `terminationGracePeriodSeconds` a sandbox's Pod (or a probe) may have:
    /// pause, reset, reap and delete wait this long on a VM that ignores SIGTERM.
    #[arg(long, env = "CUBEPOD_MAX_TERMINATION_GRACE_PERIOD", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) max_termination_grace_period: Duration,

    /// The longest `activeDeadlineSeconds` a sandbox's Pod may have (none is no deadline).
    #[arg(long, env = "CUBEPOD_MAX_ACTIVE_DEADLINE", default_value = "30days", value_parser = humantime::parse_duration)]
    pub(crate) max_active_deadline: Duration,

    /// The most CPU a sandbox may ask for (a Kubernetes quantity): each request and limit of
    /// its Pod's containers, the Pod's sum as the scheduler counts it, and the Sandbox's (or a
    /// pool template's) `spec.resources.cpu`, which past it gets `SpecValid=False`.
    #[arg(long, env = "CUBEPOD_MAX_SANDBOX_CPU", default_value = "16", value_parser = cpu_quantity)]
    pub(crate) max_sandbox_cpu: u128,

    /// The most memory a sandbox may ask for, as `--max-sandbox-cpu` bounds CPU.
    #[arg(long, env = "CUBEPOD_MAX_SANDBOX_MEMORY", default_value = "64Gi", value_parser = volume_size)]
    pub(crate) max_sandbox_memory: u128,

    /// The most ephemeral storage a sandbox's Pod may ask for (its containers' and the Pod's
    /// sum).
    #[arg(long, env = "CUBEPOD_MAX_SANDBOX_EPHEMERAL_STORAGE", default_value = "100Gi", value_parser = volume_size)]
    pub(crate) max_sandbox_ephemeral_storage: u128,

    /// The largest storage a PVC may request (a Kubernetes quantity).
    #[arg(long, env = "CUBEPOD_MAX_VOLUME_SIZE", default_value = "1Ti", value_parser = volume_size)]
    pub(crate) max_volume_size: u128,

    /// kube-client calls one policy call may make; past it the call fails (reason budget).
    #[arg(long, env = "CUBEPOD_MAX_KUBE_CALLS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) max_kube_calls: u32,

    /// Bytes of one manifest a policy sends, checked before it is parsed.
    #[arg(long, env = "CUBEPOD_MAX_MANIFEST_BYTES", default_value_t = 512 << 10, value_parser = clap::value_parser!(u64).range(1024..=(64 << 20)))]
    pub(crate) max_manifest_bytes: u64,

    /// Addresses a sandbox may reach although the host protects them: the cloud metadata
    /// service and link-local, the cluster's ranges (`--cluster-cidr`) and the API server, in
    /// any IPv4, IPv4-mapped or NAT64 form. CIDRs, comma-separated; default none.
    #[arg(
        long,
        env = "CUBEPOD_ALLOWED_EGRESS_CIDRS",
        value_delimiter = ',',
        value_parser = cidr
    )]
    pub(crate) allowed_egress_cidrs: Vec<String>,

    /// Bytes of the status one policy call returns, as written.
    #[arg(long, env = "CUBEPOD_MAX_STATUS_BYTES", default_value_t = 64 << 10, value_parser = clap::value_parser!(u64).range(1024..=(1 << 20)))]
    pub(crate) max_status_bytes: u64,

    /// Conditions one status may hold.
    #[arg(long, env = "CUBEPOD_MAX_CONDITIONS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) max_conditions: u32,

    /// Events one policy call may ask for.
    #[arg(long, env = "CUBEPOD_MAX_EVENTS_PER_CALL", default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=256))]
    pub(crate) max_events_per_call: u32,

    /// Bytes of one Event's message.
    #[arg(long, env = "CUBEPOD_MAX_EVENT_MESSAGE_BYTES", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(64..=(32 << 10)))]
    pub(crate) max_event_message_bytes: u32,

    /// Bytes of manifests a policy may have written for one Sandbox per minute (and at once):
    /// a write past it is not sent but deferred until the rate allows, counted
    /// (`cubepod_policy_writes_deferred_total`) and told once on the Sandbox.
    #[arg(long, env = "CUBEPOD_MAX_WRITE_BYTES_PER_MINUTE", default_value_t = containment::rates::DEFAULT_WRITE_BYTES_PER_MINUTE, value_parser = clap::value_parser!(u64).range(1024..))]
    pub(crate) max_write_bytes_per_minute: u64,

    /// Events one object may get at once (new or counted repeats, the policy's and the
    /// controller's each), then one per 5 minutes; the rest are counted, not written, and the
    /// first of them told once.
    #[arg(long, env = "CUBEPOD_EVENT_BURST", default_value_t = containment::rates::DEFAULT_EVENT_BURST, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) event_burst: u32,
}

impl ContainmentArgs {
    pub(crate) fn containment(&self) -> Containment {
        Containment {
            runtime_classes: self.allowed_runtime_classes.iter().cloned().collect(),
            pod_security: self.pod_security,
            service_account: self.sandbox_service_account.clone(),
            extra_pod_fields: self.allow_pod_field.iter().cloned().collect(),
            pod_labels: KeyAllowlist::new(KeyKind::Label, self.allow_pod_label.iter().cloned()),
            pod_annotations: KeyAllowlist::new(
                KeyKind::Annotation,
                self.allow_pod_annotation.iter().cloned(),
            ),
            secret_refs: self.allowed_secret_refs.iter().cloned().collect(),
            config_map_refs: self.allowed_config_map_refs.iter().cloned().collect(),
            priority_classes: self.allowed_priority_classes.iter().cloned().collect(),
            schedulers: self.allowed_schedulers.iter().cloned().collect(),
            node_keys: self.allow_node_key.iter().cloned().collect(),
            pod_bounds: PodBounds {
                termination_grace_seconds: self.max_termination_grace_period.as_secs(),
                active_deadline_seconds: self.max_active_deadline.as_secs(),
                cpu_milli: self.max_sandbox_cpu,
                memory_bytes: self.max_sandbox_memory,
                ephemeral_storage_bytes: self.max_sandbox_ephemeral_storage,
            },
            max_volume_bytes: self.max_volume_size,
            max_kube_calls: self.max_kube_calls,
            max_manifest_bytes: usize::try_from(self.max_manifest_bytes).unwrap_or(usize::MAX),
            // Each parsed by the flag's own parser already.
            allowed_egress: self
                .allowed_egress_cidrs
                .iter()
                .filter_map(|c| containment::ipset::Cidr::parse(c).ok())
                .fold(containment::ipset::IpSet::default(), |set, c| {
                    set.union(&containment::ipset::IpSet::of(c))
                }),
            output: OutputBudget {
                status_bytes: usize::try_from(self.max_status_bytes).unwrap_or(usize::MAX),
                conditions: self.max_conditions as usize,
                events: self.max_events_per_call as usize,
                event_message_bytes: self.max_event_message_bytes as usize,
            },
            rates: containment::rates::Rates::new(
                self.max_write_bytes_per_minute,
                self.event_burst,
            ),
        }
    }
}

/// The cluster network (`model::network`): what a sandbox's NetworkPolicy blocks, allows for
/// DNS and lets in; handed to the policy and held against what it writes.
#[derive(Debug, Clone, Args)]
pub(crate) struct NetworkArgs {
    /// The cluster's pod and service ranges: blocked for `egress: internet`, allowed for
    /// `egress: cluster`. Repeatable or comma-separated.
    #[arg(
        long = "cluster-cidr",
        env = "CUBEPOD_CLUSTER_CIDR",
        value_delimiter = ',',
        default_value = "10.244.0.0/16,10.96.0.0/12",
        value_parser = cidr
    )]
    pub(crate) cluster_cidrs: Vec<String>,

    /// The namespace of the cluster's DNS pods (port 53 is allowed to them).
    #[arg(long, env = "CUBEPOD_DNS_NAMESPACE", default_value = network::DEFAULT_DNS_NAMESPACE)]
    pub(crate) dns_namespace: String,

    /// The labels of the cluster's DNS pods: `k=v[,k=v]`.
    #[arg(long, env = "CUBEPOD_DNS_SELECTOR", default_value = network::DEFAULT_DNS_SELECTOR, value_parser = selector)]
    pub(crate) dns_selector: Labels,

    /// The labels (`k=v[,k=v]`) of pods, in any namespace, that may connect to a sandbox's
    /// Service ports. Default: none, no ingress at all.
    #[arg(long, env = "CUBEPOD_INGRESS_FROM", value_parser = selector)]
    pub(crate) ingress_from: Option<Labels>,

    /// The cluster's DNS domain: a sandbox's Service is `<name>.<namespace>.svc.<domain>`.
    #[arg(long, env = "CUBEPOD_CLUSTER_DOMAIN", default_value = network::DEFAULT_CLUSTER_DOMAIN)]
    pub(crate) cluster_domain: String,
}

/// A label selector of equalities, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Labels(pub(crate) Vec<(String, String)>);

impl NetworkArgs {
    pub(crate) fn cluster_network(&self) -> ClusterNetwork {
        ClusterNetwork {
            cluster_cidrs: self.cluster_cidrs.clone(),
            dns_namespace: self.dns_namespace.clone(),
            dns_pod_labels: self.dns_selector.0.clone(),
            ingress_from: self
                .ingress_from
                .as_ref()
                .map(|l| l.0.clone())
                .unwrap_or_default(),
            cluster_domain: self.cluster_domain.clone(),
        }
    }
}

fn cidr(text: &str) -> Result<String, String> {
    containment::ipset::Cidr::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

/// `k=v[,k=v]`: keys and values as Kubernetes labels have them (no empty key, no `=` or `,`).
fn selector(text: &str) -> Result<Labels, String> {
    let mut labels = Vec::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not key=value"))?;
        let (key, value) = (key.trim(), value.trim());
        let label_char = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
        if key.is_empty() || !key.chars().all(label_char) || !value.chars().all(label_char) {
            return Err(format!("{pair:?} is not a label key=value"));
        }
        if labels.iter().any(|(k, _)| k == key) {
            return Err(format!("{key:?} is given twice"));
        }
        labels.push((key.to_string(), value.to_string()));
    }
    if labels.is_empty() {
        return Err("no key=value".to_string());
    }
    Ok(Labels(labels))
}

fn pod_label(text: &str) -> Result<String, String> {
    containment::keys::parse_entry(KeyKind::Label, text)
}

fn pod_annotation(text: &str) -> Result<String, String> {
    containment::keys::parse_entry(KeyKind::Annotation, text)
}

fn volume_size(text: &str) -> Result<u128, String> {
    containment::quantity_value(text).map_err(|e| format!("{text:?} {e}"))
}

/// CPU in millicores.
fn cpu_quantity(text: &str) -> Result<u128, String> {
    containment::quantity_milli(text).map_err(|e| format!("{text:?} {e}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_network_flags_default_to_the_default_cluster_network() {
        let cli = Cli::try_parse_from(["cubepod-controller", "run"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("run");
        };
        assert_eq!(
            args.network.cluster_network(),
            network::default_cluster_network()
        );
    }

    /// The `run` subcommand's arguments parsed from `flags`.
    pub(crate) fn run(flags: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["cubepod-controller", "run"].iter().chain(flags))
            .expect("flags parse");
        let Command::Run(args) = cli.command else {
            panic!("run");
        };
        args
    }

    #[test]
    fn metrics_are_secure_against_a_cluster_and_plain_on_loopback_when_embedded() {
        let defaults = run(&[]);
        assert!(defaults.metrics_secure(false));
        assert!(!defaults.metrics_secure(true));
        assert_eq!(defaults.listen(false).to_string(), "0.0.0.0:8081");
        assert_eq!(defaults.listen(true).to_string(), "127.0.0.1:8081");
        assert_eq!(defaults.metrics_listen.to_string(), "0.0.0.0:8443");
        assert_eq!(defaults.metrics_cert_files(), None);
        for (flag, secure) in [
            ("--metrics-secure", true),
            ("--metrics-secure=true", true),
            ("--metrics-secure=false", false),
        ] {
            let args = run(&[flag]);
            assert_eq!(args.metrics_secure(true), secure, "{flag}");
            assert_eq!(args.metrics_secure(false), secure, "{flag}");
        }
        let files = run(&["--metrics-cert-path=/certs", "--metrics-cert-key=key.pem"]);
        assert_eq!(
            files.metrics_cert_files(),
            Some(("/certs/tls.crt".into(), "/certs/key.pem".into()))
        );
        assert!(
            Cli::try_parse_from(["cubepod-controller", "run", "--metrics-secure=maybe"]).is_err()
        );
    }

    #[test]
    fn the_network_flags_parse_lists_and_selectors() {
        let cli = Cli::try_parse_from([
            "cubepod-controller",
            "run",
            "--cluster-cidr",
            "10.0.0.0/16,fd00::/48",
            "--cluster-cidr",
            "172.20.0.0/16",
            "--dns-selector",
            "k8s-app=coredns,tier=dns",
            "--ingress-from",
            "app=gateway",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("run");
        };
        let net = args.network.cluster_network();
        assert_eq!(
            net.cluster_cidrs,
            ["10.0.0.0/16", "fd00::/48", "172.20.0.0/16"]
        );
        assert_eq!(
            net.dns_pod_labels,
            [
                ("k8s-app".to_string(), "coredns".to_string()),
                ("tier".to_string(), "dns".to_string())
            ]
        );
        assert_eq!(
            net.ingress_from,
            [("app".to_string(), "gateway".to_string())]
        );
        for bad in [
            ["--cluster-cidr", "10.0.0.0"],
            ["--dns-selector", "k8s-app"],
            ["--ingress-from", "a=b,a=c"],
        ] {
            let parsed = Cli::try_parse_from(["cubepod-controller", "run", bad[0], bad[1]]);
            assert!(parsed.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_pod_label_and_annotation_flags_widen_run_and_policy_test_alike() {
        let flags = [
            "--allow-pod-label",
            "team,example.com/",
            "--allow-pod-annotation=example.com/owner",
        ];
        let run =
            Cli::try_parse_from([&["cubepod-controller", "run"][..], &flags[..]].concat()).unwrap();
        let test = Cli::try_parse_from(
            [
                &["cubepod-controller", "policy", "test", "m.wasm"][..],
                &flags[..],
            ]
            .concat(),
        )
        .unwrap();
        let Command::Run(run) = run.command else {
            panic!("run");
        };
        let Command::Policy(PolicyArgs {
            command: PolicyCommand::Test(test),
        }) = test.command
        else {
            panic!("policy test");
        };
        for rules in [
            run.containment.containment(),
            test.containment.containment(),
        ] {
            assert!(rules.pod_labels.admits("team"));
            assert!(rules.pod_labels.admits("example.com/cost-center"));
            assert!(!rules.pod_labels.admits("cost-center"));
            assert!(rules.pod_annotations.admits("example.com/owner"));
            assert!(!rules.pod_annotations.admits("team"));
        }
        let defaults = Containment::default();
        assert!(!defaults.pod_labels.admits("team"));
        for bad in [
            "--allow-pod-label=cubepod.io/sandbox",
            "--allow-pod-label=cubepod.io/",
            "--allow-pod-label=app.kubernetes.io/managed-by",
            "--allow-pod-label=team!",
            "--allow-pod-annotation=io.katacontainers.config.hypervisor.path",
        ] {
            let parsed = Cli::try_parse_from(["cubepod-controller", "run", bad]);
            assert!(parsed.is_err(), "{bad}");
        }
    }

    #[test]
    fn the_pod_bound_flags_default_to_the_rules_defaults_and_widen_them() {
        assert_eq!(run(&[]).containment.containment(), Containment::default());
        let rules = run(&[
            "--allowed-priority-classes=sandbox-low",
            "--allowed-schedulers=default-scheduler,kata-scheduler",
            "--allow-node-key=node-role.kubernetes.io/control-plane",
            "--max-termination-grace-period=2m",
            "--max-active-deadline=1h",
            "--max-sandbox-cpu=1500m",
            "--max-sandbox-memory=8Gi",
            "--max-sandbox-ephemeral-storage=1Ti",
        ])
        .containment
        .containment();
        assert!(rules.priority_classes.contains("sandbox-low"));
        assert!(rules.schedulers.contains("kata-scheduler"));
        assert!(
            rules
                .node_keys
                .contains("node-role.kubernetes.io/control-plane")
        );
        assert_eq!(
            rules.pod_bounds,
            PodBounds {
                termination_grace_seconds: 120,
                active_deadline_seconds: 3600,
                cpu_milli: 1500,
                memory_bytes: 8 << 30,
                ephemeral_storage_bytes: 1 << 40,
            }
        );
        for bad in [
            "--allow-node-key=example.com/dedicated",
            "--max-sandbox-cpu=lots",
            "--max-sandbox-memory=-1Gi",
        ] {
            let parsed = Cli::try_parse_from(["cubepod-controller", "run", bad]);
            assert!(parsed.is_err(), "{bad}");
        }
    }

    /// `policy test` and `policy inspect` bound and contain each call as `run` does with the
    /// same flags, so that CI refuses what production would; they call one at a time, and
    /// neither read nor fill the controller's compilation cache.
    #[test]
    fn the_policy_subcommands_engines_bound_and_contain_calls_as_runs_does() {
        let flags = [
            "--guest-deadline=250ms",
            "--guest-memory-mib=64",
            "--max-kube-calls=7",
            "--allowed-runtime-classes=kata-fc",
        ];
        let run_args = run(&flags);
        let controller = EngineFlags::Run(&run_args).runtime_config();
        assert_eq!(controller.call_deadline, Duration::from_millis(250));
        assert_eq!(controller.memory_limit_bytes, 64 << 20);
        assert_eq!(controller.containment.max_kube_calls, 7);
        assert!(controller.cache_dir.is_some());
        for subcommand in ["test", "inspect"] {
            let cli = Cli::try_parse_from(
                [
                    "cubepod-controller",
                    "policy",
                    subcommand,
                    "builtin:default",
                ]
                .iter()
                .chain(&flags),
            )
            .expect("flags parse");
            let Command::Policy(PolicyArgs { command }) = cli.command else {
                panic!("policy");
            };
            let (guest, containment) = match &command {
                PolicyCommand::Test(args) => (&args.guest, &args.containment),
                PolicyCommand::Inspect(args) => (&args.guest, &args.containment),
                _ => panic!("{subcommand}"),
            };
            let config = EngineFlags::Policy { guest, containment }.runtime_config();
            assert_eq!(
                config.call_deadline, controller.call_deadline,
                "{subcommand}"
            );
            assert_eq!(config.memory_limit_bytes, controller.memory_limit_bytes);
            assert_eq!(config.containment, controller.containment, "{subcommand}");
            assert_eq!(config.cache_dir, None, "{subcommand}");
            assert!(config.calls_memory_budget_bytes >= config.call_charge_bound());
        }
    }
}
