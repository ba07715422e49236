//! Shared setup of the integration tests: start the real `cubepod-controller` binary, talk to
//! its probes (plain, `--listen`) and read its metrics (over HTTPS with a bearer token, or plain
//! where it serves them so).
// The harness of the integration tests and the benchmark, read beside the tests that use
// it; its items are not an API, so they are not all documented.
#![allow(missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binary `cargo test --workspace` built beside this test executable. Running only this
/// package's tests does not rebuild it, so a binary older than its sources is refused rather
/// than silently tested.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("cubepod-controller");
    let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    match (built, newest_source()) {
        (Some(built), Some(source)) if built >= source => binary,
        (Some(_), None) => binary,
        _ => panic!(
            "{} is missing or older than its sources: run the tests with \
             `cargo test --workspace`, or `cargo build -p cubepod-host` first",
            binary.display()
        ),
    }
}

/// The latest modification time of the controller's sources (the crates under `host/`, the
/// default policy's `guest/src` and `sdk/src`, `wit`): a binary older than this was not built
/// from them.
pub fn newest_source() -> Option<std::time::SystemTime> {
    [
        "host/src",
        "host/kube/src",
        "host/apiserver/src",
        "host/policy/src",
        "guest/src",
        "sdk/src",
        "wit",
    ]
    .iter()
    .filter_map(|dir| newest_file(&workspace().join(dir)))
    .max()
}

/// The latest modification time of any file under `dir`.
fn newest_file(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                newest_file(&path)
            } else {
                entry.metadata().and_then(|m| m.modified()).ok()
            }
        })
        .max()
}

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../../host/policy/wasm_build.rs");
}
/// Cargo inside the tests' cargo, and the workspace's target dir (for crates built outside the
/// workspace, such as `policy new`'s).
pub use wasm_build::{WASM_TARGET, nested_cargo, target_root};

/// The `code` spans of a Markdown table cell, in order (the README's tables name flags,
/// variables and metric families that way).
pub fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The contents of a Markdown document's ```` ```sh ```` blocks, in order: the commands a doc
/// tells its reader to run, for the tests that run them.
pub fn shell_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut current, fence) {
            (None, true) if line.trim() == "```sh" => current = Some(String::new()),
            (Some(block), false) => {
                block.push_str(line);
                block.push('\n');
            }
            (Some(_), true) => blocks.extend(current.take()),
            (None, _) => {}
        }
    }
    blocks
}

/// The workspace root.
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
}

/// A variant of the faulty policy with one cargo feature on (`always-trap`, `always-loop`,
/// `nonconforming`), built once per test run.
pub fn faulty_policy_variant(feature: &'static str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(&'static str, PathBuf)>> =
        std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = built.iter().find(|(f, _)| *f == feature) {
        return path.clone();
    }
    let path = wasm_build::build_policy_variant(
        workspace(),
        "cubepod-faulty-policy",
        "cubepod_faulty_policy",
        Some(feature),
    )
    .unwrap_or_else(|why| panic!("{why}"));
    built.push((feature, path.clone()));
    path
}

/// `tests/policies/faulty` built as a component (once per test run): a policy that traps,
/// loops, hogs memory or writes outside its namespaces for sandboxes named `trap-`, `loop-`,
/// `oom-`, `escape-`, and behaves as the default policy otherwise.
pub fn faulty_policy() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    built_once(&PATH, "cubepod-faulty-policy", "cubepod_faulty_policy")
}

/// A seed file's Sandboxes on which [`faulty_policy`] traps, loops and runs out of memory,
/// one each; a test appends its own after a `---`.
pub const FAULTY_SEED: &str = r#"
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: trap-a, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0}
---
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: loop-a, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0}
---
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: oom-a, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0}
"#;

/// `examples/policies/image-allowlist` built as a component (once per test run): the default
/// decisions, but a sandbox whose image is outside its list is declined (`SpecValid=False`,
/// reason `ImageNotAllowed`).
pub fn image_allowlist_policy() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    built_once(
        &PATH,
        "cubepod-policy-image-allowlist",
        "cubepod_policy_image_allowlist",
    )
}

/// `tests/policies/hostile` built as a component (once per test run): a well-formed policy
/// that attacks one containment rule per case, picked by the sandbox's, pool's or reap
/// candidate's name, and behaves as the default policy otherwise.
pub fn hostile_policy() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    built_once(&PATH, "cubepod-hostile-policy", "cubepod_hostile_policy")
}

/// The test policy `package` (library `lib`) built as a component, the first time asked.
fn built_once(cell: &'static OnceLock<PathBuf>, package: &str, lib: &str) -> &'static Path {
    cell.get_or_init(|| {
        wasm_build::build_policy_component(workspace(), package, lib)
            .unwrap_or_else(|why| panic!("{why}"))
    })
}

/// Replaces the policy file as a ConfigMap update does: write beside it, then rename over it.
pub fn replace_file(path: &Path, bytes: &[u8]) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, bytes).expect("write the staged file");
    std::fs::rename(&staged, path).expect("rename it over the file");
}

/// An ECDSA P-256 key pair made by openssl in `dir` (`.ci/run` installs it where missing):
/// (private PKCS#8 PEM, public SPKI PEM), the kinds `cosign generate-key-pair` and `policy sign`
/// use.
pub fn p256_key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub"));
    let openssl = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl runs (install it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let arg = std::ffi::OsStr::new;
    openssl(&[
        arg("genpkey"),
        arg("-algorithm"),
        arg("EC"),
        arg("-pkeyopt"),
        arg("ec_paramgen_curve:P-256"),
        arg("-out"),
        private.as_os_str(),
    ]);
    openssl(&[
        arg("pkey"),
        arg("-pubout"),
        arg("-in"),
        private.as_os_str(),
        arg("-out"),
        public.as_os_str(),
    ]);
    (private, public)
}

/// Writes `yaml` to a file in `dir` and returns its path, for `--seed`.
pub fn seed_file(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("seed.yaml");
    std::fs::write(&path, yaml).expect("write seed file");
    path
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

pub struct Controller {
    pub child: Child,
    /// The probes' address (`--listen`), and `/metrics` when served plain.
    pub addr: SocketAddr,
    /// How `/metrics` is read.
    pub metrics: MetricsAccess,
    /// Holds the policy cache and the log file.
    dir: tempfile::TempDir,
}

/// Where and how a controller serves `/metrics`.
#[derive(Clone, Debug)]
pub enum MetricsAccess {
    /// Plain, beside the probes (`--metrics-secure=false`, the embedded cluster's default).
    Plain,
    /// Over HTTPS at `addr` (`--metrics-listen`), to `token`: the fake API server's
    /// [`apiserver::PROMETHEUS_TOKEN`] for a controller on it; `None` for the embedded
    /// cluster's own, read from the kubeconfig it writes.
    Secure {
        addr: SocketAddr,
        token: Option<String>,
    },
}

impl Controller {
    /// Starts `cubepod-controller run --embedded` on a free loopback port with fast ticks,
    /// plus `extra` flags.
    pub fn start(extra: &[&str]) -> Controller {
        let controller = Controller::spawn(&["--embedded"], extra, None, None);
        controller.wait_for("/healthz", Duration::from_secs(60), |status, _| {
            status == 200
        });
        controller
    }

    /// Starts `cubepod-controller run` against the Kubernetes API that `kubeconfig` names
    /// (through `KUBECONFIG`), plus `extra` flags. Does not wait: the process may exit at
    /// start (see [`Controller::wait_exit`]).
    pub fn start_with_kubeconfig(kubeconfig: &Path, extra: &[&str]) -> Controller {
        Controller::spawn(&[], extra, Some(kubeconfig), None)
    }

    /// Starts `cubepod-controller run --embedded` as [`Controller::start`] does, in a process
    /// whose address space is capped at `bytes` (`RLIMIT_AS`, as `ulimit -v` sets it). Does not
    /// wait: the process may exit at start.
    pub fn start_capped(bytes: u64, extra: &[&str]) -> Controller {
        Controller::spawn(&["--embedded"], extra, None, Some(bytes))
    }

    fn spawn(
        mode: &[&str],
        extra: &[&str],
        kubeconfig: Option<&Path>,
        address_space: Option<u64>,
    ) -> Controller {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("address");
        // As `run` decides: secure against an API server unless turned off, plain for the
        // embedded cluster unless turned on.
        let given = |flag: &str| extra.contains(&flag);
        let metrics = match kubeconfig {
            Some(_) if !given("--metrics-secure=false") => MetricsAccess::Secure {
                addr: metrics_addr,
                token: Some(apiserver::PROMETHEUS_TOKEN.to_string()),
            },
            None if given("--metrics-secure") || given("--metrics-secure=true") => {
                MetricsAccess::Secure {
                    addr: metrics_addr,
                    token: None,
                }
            }
            _ => MetricsAccess::Plain,
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = dir.path().join("cache");
        let log = std::fs::File::create(dir.path().join("controller.log")).expect("log file");
        let errors = std::fs::File::create(dir.path().join("stderr.log")).expect("stderr file");
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(mode.iter().map(|s| s.to_string()));
        args.extend([
            format!("--listen={addr}"),
            format!("--metrics-listen={metrics_addr}"),
            "--reap-interval=1s".into(),
            "--pool-interval=1s".into(),
            format!("--cache-dir={}", cache.display()),
            "--log-format=json".into(),
        ]);
        // A test may ask for a slower kubelet; a flag is given once.
        if !extra.iter().any(|a| a.starts_with("--pod-start-delay")) {
            args.push("--pod-start-delay=100ms".into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut command = Command::new(binary());
        command
            .args(&args)
            .env("RUST_LOG", "info")
            // Never the developer's own cluster: only what the test names.
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(errors));
        if let Some(kubeconfig) = kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        if let Some(bytes) = address_space {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: runs in the child between fork and exec, and calls only setrlimit, which
            // is async-signal-safe; `limit` is a plain value copied into the closure.
            #[allow(unsafe_code)] // pre_exec: a limit set in the child before exec.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = command.spawn().expect("start cubepod-controller");
        Controller {
            child,
            addr,
            metrics,
            dir,
        }
    }

    /// The embedded cluster's kubeconfig, as `run` writes it (under the process's `HOME`).
    pub fn embedded_kubeconfig(&self) -> PathBuf {
        self.dir
            .path()
            .join(".local/state/cubepod-controller/kubeconfig")
    }

    /// The embedded cluster's own token (its administrator's), from its kubeconfig.
    pub fn embedded_token(&self) -> Option<String> {
        let kubeconfig = std::fs::read_to_string(self.embedded_kubeconfig()).ok()?;
        kubeconfig
            .lines()
            .find_map(|line| line.trim().strip_prefix("token: "))
            .map(|token| token.trim().to_string())
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Kills the process at once (SIGKILL), as a node failure would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The controller's log so far: one JSON object per line.
    pub fn logs(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("controller.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Waits until a log line's fields satisfy `matches`; returns it.
    pub fn wait_for_log(
        &self,
        timeout: Duration,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.logs().into_iter().find(|l| matches(&l["fields"])) {
                return line;
            }
            assert!(Instant::now() < deadline, "no such log line in time");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// GETs `path`: (status, body). `/metrics` is read where and as the controller serves it:
    /// plain beside the probes, or over HTTPS with a token allowed to get it.
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        match &self.metrics {
            MetricsAccess::Secure { addr, token } if path.starts_with("/metrics") => {
                let token = token.clone().or_else(|| self.embedded_token());
                scrape::https_get(*addr, path, token.as_deref())
            }
            _ => http_get(self.addr, path),
        }
    }

    /// The address of `/metrics` over HTTPS (`--metrics-listen`), whether served there or not.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        match &self.metrics {
            MetricsAccess::Secure { addr, .. } => Some(*addr),
            MetricsAccess::Plain => None,
        }
    }

    /// Polls `path` until `done(status, body)` holds; panics with the last answer on timeout.
    pub fn wait_for(
        &self,
        path: &str,
        timeout: Duration,
        done: impl Fn(u16, &str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = (0, String::new());
        while Instant::now() < deadline {
            if let Ok((status, body)) = self.get(path) {
                if done(status, &body) {
                    return body;
                }
                last = (status, body);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{path} never met the condition; last answer {}: {}",
            last.0, last.1
        );
    }

    /// Sends SIGTERM and waits for the exit, up to `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of metric `name` with exactly these labels, from Prometheus text; panics if the
/// text does not parse as the exposition format.
/// `cubepod_guest_traps_total` of `reconcile-sandbox` for `reason` (`trap`, `timeout`,
/// `memory`) in a scrape: 0 when not there yet.
pub fn sandbox_traps(text: &str, reason: &str) -> f64 {
    metric(
        text,
        "cubepod_guest_traps_total",
        &[("export", "reconcile-sandbox"), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

/// `cubepod_active_sandboxes` and `cubepod_paused_sandboxes` once the embedded cluster's
/// examples converged: dev-alice, its fork, workshop-42 and the five members of the two pools
/// run; dev-bob is paused and ci-runner-7 reaped. workshop-42 is paused for good from its
/// `shutdownTime`, 2027-01-01T18:00:00Z, on.
pub fn seeded_running_and_paused() -> (f64, f64) {
    const WORKSHOP_SHUTDOWN: u64 = 1_798_826_400;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now < WORKSHOP_SHUTDOWN {
        (8.0, 2.0)
    } else {
        (7.0, 3.0)
    }
}

pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    scrape.samples.iter().find_map(|sample| {
        let matches =
            sample.metric == name && labels.iter().all(|(k, v)| sample.labels.get(k) == Some(*v));
        match (&sample.value, matches) {
            (prometheus_parse::Value::Counter(v), true)
            | (prometheus_parse::Value::Gauge(v), true)
            | (prometheus_parse::Value::Untyped(v), true) => Some(*v),
            _ => None,
        }
    })
}
pub mod apiserver;
pub mod bench;
pub mod convergence;
pub mod faults;
pub mod kubectl;
pub mod refusals;
pub mod router;
pub mod scrape;

/// GETs `path` from a controller's server at `addr`: (status, body). Plain HTTP/1.1 over
/// loopback is all the server needs.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(parse_response(&response))
}

/// An HTTP/1.1 response with a `Content-Length` body: (status, body).
fn parse_response(response: &str) -> (u16, String) {
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
