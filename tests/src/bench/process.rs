//! The real `cubepod-controller` binary as a subprocess against the fake API server: start it
//! with a kubeconfig, read its `/metrics` (plain, on loopback), its RSS and CPU time from
//! `/proc`, stop it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// `target/release/cubepod-controller` beside this binary, refused when older than its
/// sources (build it with `cargo build --release -p cubepod-host`).
pub fn controller_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let exe = std::env::current_exe().context("this executable's path")?;
    let binary = exe
        .parent()
        .context("this executable's folder")?
        .join("cubepod-controller");
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .with_context(|| {
            format!(
                "{} is missing: build it with `cargo build --release -p cubepod-host`",
                binary.display()
            )
        })?;
    if crate::newest_source().is_some_and(|source| source > built) {
        bail!(
            "{} is older than its sources: rebuild it with `cargo build --release -p cubepod-host`",
            binary.display()
        );
    }
    Ok(binary)
}

pub struct ControllerProcess {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// A scrape of `/metrics`, by metric name: every label set's value.
pub struct Scrape(Vec<prometheus_parse::Sample>);

impl Scrape {
    /// The sum over every label set of `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    }

    /// `name_sum / name_count` of a histogram (over matching label sets), seconds.
    pub fn mean(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let count = self.sum(&format!("{name}_count"), labels);
        (count > 0.0).then(|| self.sum(&format!("{name}_sum"), labels) / count)
    }

    /// Every value of label `label` that `name` carries.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut values: Vec<String> = self
            .0
            .iter()
            .filter(|s| s.metric == name)
            .filter_map(|s| s.labels.get(label).map(str::to_string))
            .collect();
        values.sort();
        values.dedup();
        values
    }
}

/// Resident and peak resident memory of a process, KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl ControllerProcess {
    /// Starts `binary run` with `KUBECONFIG=kubeconfig`, listening on a free loopback port,
    /// plus `extra` flags; logs (JSON, at the default level) go to a file.
    pub fn start(binary: &Path, kubeconfig: &Path, extra: &[String]) -> Result<Self> {
        Self::start_under(&[], binary, kubeconfig, extra)
    }

    /// [`Self::start`] with the controller run by `wrapper` (a command and its flags, the
    /// controller's command line after them), one that becomes the controller's process
    /// (`exec`s it, or runs it in its own process as valgrind does): its PID is the controller's.
    pub fn start_under(
        wrapper: &[String],
        binary: &Path,
        kubeconfig: &Path,
        extra: &[String],
    ) -> Result<Self> {
        let port = crate::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().context("address")?;
        let dir = tempfile::tempdir().context("temp dir")?;
        let log = std::fs::File::create(dir.path().join("controller.log")).context("log file")?;
        let errors = std::fs::File::create(dir.path().join("stderr.log")).context("stderr")?;
        let mut args = vec![
            "run".to_string(),
            format!("--listen={addr}"),
            // Scraped plain on loopback: the figures are the controller's work, not the TLS
            // handshakes of the bench's own frequent scrapes.
            "--metrics-secure=false".to_string(),
            format!("--cache-dir={}", dir.path().join("cache").display()),
            "--log-format=json".to_string(),
        ];
        args.extend(extra.iter().cloned());
        let mut command = match wrapper.split_first() {
            Some((program, flags)) => {
                let mut command = Command::new(program);
                command.args(flags).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        // The controller's allocator as deployed, whatever this process runs with.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("MIMALLOC_") {
                command.env_remove(name);
            }
        }
        let child = command
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("RUST_LOG")
            .env_remove("GLIBC_TUNABLES")
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(errors))
            .spawn()
            .with_context(|| match wrapper.first() {
                Some(program) => format!("starting {} under {program}", binary.display()),
                None => format!("starting {}", binary.display()),
            })?;
        // If the machine runs out of memory, this controller goes first, not a neighbour's
        // process.
        let _ = std::fs::write(format!("/proc/{}/oom_score_adj", child.id()), "1000");
        Ok(Self { child, addr, dir })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GETs `path` from the controller's server: (status, body).
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        crate::http_get(self.addr, path)
    }

    pub fn scrape(&self) -> Result<Scrape> {
        let (status, body) = self.get("/metrics").context("GET /metrics")?;
        if status != 200 {
            bail!("GET /metrics answered {status}");
        }
        let lines = body.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).context("Prometheus text")?;
        Ok(Scrape(scrape.samples))
    }

    /// Waits for `/readyz` to answer 200 (every cache listed once).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = self.get("/readyz") {
                return Ok(started.elapsed());
            }
            if let Some(status) = self.child.try_wait().context("controller status")? {
                bail!("the controller exited ({status}): {}", self.stderr());
            }
            if started.elapsed() > timeout {
                bail!("the controller was not ready within {timeout:?}");
            }
            check_headroom()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the controller has gone quiet: its queue empty and no reconcile or API
    /// request for `window`, after at least `min_reconciles` Sandbox reconciles.
    pub fn wait_quiet(
        &mut self,
        min_reconciles: f64,
        window: Duration,
        timeout: Duration,
    ) -> Result<Scrape> {
        let started = Instant::now();
        let mut last = (f64::NAN, f64::NAN);
        let mut still_since = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().context("controller status")? {
                bail!("the controller exited ({status}): {}", self.stderr());
            }
            check_headroom()?;
            let scrape = self.scrape()?;
            let reconciles = scrape.sum("cubepod_reconciles_total", &[]);
            let requests = scrape.sum("cubepod_kube_requests_total", &[]);
            let depth = scrape.sum("cubepod_queue_depth", &[]);
            let sandboxes = scrape.sum("cubepod_reconciles_total", &[("kind", "sandbox")]);
            if (reconciles, requests) != last || depth > 0.0 || sandboxes < min_reconciles {
                last = (reconciles, requests);
                still_since = Instant::now();
            } else if still_since.elapsed() >= window {
                return Ok(scrape);
            }
            if started.elapsed() > timeout {
                bail!(
                    "the controller did not go quiet within {timeout:?} \
                     ({sandboxes} sandbox reconciles, queue depth {depth})"
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn memory(&self) -> Result<Memory> {
        memory_of(self.pid())
    }

    /// User + system CPU time so far.
    pub fn cpu(&self) -> Result<Duration> {
        cpu_of(&format!("/proc/{}/stat", self.pid()))
    }

    /// Log lines by level (`WARN`, `ERROR`, ...), and the first few warnings' messages.
    pub fn log_levels(&self) -> (BTreeMap<String, usize>, Vec<String>) {
        let text =
            std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default();
        let mut levels = BTreeMap::new();
        let mut warnings = Vec::new();
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let level = value["level"].as_str().unwrap_or("?").to_string();
            if level != "INFO" && level != "DEBUG" && warnings.len() < 5 {
                warnings.push(value["fields"]["message"].to_string());
            }
            *levels.entry(level).or_insert(0) += 1;
        }
        (levels, warnings)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// SIGTERM, then waits for the exit (SIGKILL after `timeout`).
    pub fn stop(mut self, timeout: Duration) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // For a look at what the controller said: CUBEPOD_BENCH_KEEP_LOGS=DIR.
        if let Some(dir) = std::env::var_os("CUBEPOD_BENCH_KEEP_LOGS") {
            let to = Path::new(&dir).join(format!("controller-{}.log", self.child.id()));
            let _ = std::fs::copy(self.dir.path().join("controller.log"), to);
        }
    }
}

/// `MemAvailable` of the machine, KiB.
pub fn mem_available_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Below this much available memory a run is stopped (the controller is killed when the
/// error drops it) rather than let the machine, which others share, run out.
const HEADROOM_KIB: u64 = 1536 * 1024;

fn check_headroom() -> Result<()> {
    match mem_available_kib() {
        Some(available) if available < HEADROOM_KIB => bail!(
            "stopped: the machine is down to {} MiB of available memory",
            available / 1024
        ),
        _ => Ok(()),
    }
}

/// VmRSS and VmHWM of process `pid`.
pub fn memory_of(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
    };
    Ok(Memory {
        rss_kib: field("VmRSS:").context("VmRSS")?,
        hwm_kib: field("VmHWM:").context("VmHWM")?,
    })
}

/// User + system CPU time of the process whose `stat` file is `path`.
pub fn cpu_of(path: &str) -> Result<Duration> {
    let stat = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let (_, fields) = stat.rsplit_once(')').context("stat format")?;
    let fields: Vec<&str> = fields.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: 12 and 13 after the command name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// CPU time of this process and its waited-for children (the controllers, once stopped).
pub fn own_cpu_with_children() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    let (_, fields) = stat.rsplit_once(')').context("stat format")?;
    let fields: Vec<&str> = fields.split_whitespace().collect();
    // utime, stime, cutime, cstime.
    let ticks: u64 = [11, 12, 13, 14]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// Busy CPU time of the whole machine so far (`/proc/stat`: all but idle and iowait).
pub fn machine_busy() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat.lines().next().context("/proc/stat is empty")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = fields
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, v)| v)
        .sum();
    Ok(Duration::from_secs_f64(busy as f64 / clock_ticks() as f64))
}

/// `getconf CLK_TCK`, 100 where it cannot be asked.
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}
