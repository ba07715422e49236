//! Shared setup of the integration tests: start the real `cubepod-controller` binary, talk to
//! its `:8081` server, read its metrics.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binary `cargo test --workspace` built beside this test executable.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = target_dir.join("cubepod-controller");
    if !binary.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "cubepod-host", "--bin", "cubepod-controller"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building cubepod-controller failed");
    }
    binary
}

mod wasm_build {
    include!("../../host/wasm_build.rs");
}

/// The workspace root.
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
}

/// `tests/policies/faulty` built as a component (once per test run): a policy that traps,
/// loops, hogs memory or writes outside its namespaces for sandboxes named `trap-`, `loop-`,
/// `oom-`, `escape-`, and behaves as the default policy otherwise.
pub fn faulty_policy() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        wasm_build::build_policy_component(
            workspace(),
            "cubepod-faulty-policy",
            "cubepod_faulty_policy",
        )
        .unwrap_or_else(|why| panic!("{why}"))
    })
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
    pub addr: SocketAddr,
    _cache: tempfile::TempDir,
}

impl Controller {
    /// Starts `cubepod-controller run --embedded` on a free loopback port with fast ticks,
    /// plus `extra` flags.
    pub fn start(extra: &[&str]) -> Controller {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        let cache = tempfile::tempdir().expect("temp dir");
        let mut args: Vec<String> = vec![
            "run".into(),
            "--embedded".into(),
            format!("--listen={addr}"),
            "--pod-start-delay=100ms".into(),
            "--reap-interval=1s".into(),
            "--pool-interval=1s".into(),
            format!("--cache-dir={}", cache.path().display()),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(binary())
            .args(&args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start cubepod-controller");
        let controller = Controller {
            child,
            addr,
            _cache: cache,
        };
        controller.wait_for("/healthz", Duration::from_secs(60), |status, _| {
            status == 200
        });
        controller
    }

    /// GETs `path`: (status, body). Plain HTTP/1.1 over loopback is all the server needs.
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
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
