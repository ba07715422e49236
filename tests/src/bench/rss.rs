//! Controller RSS over N converged sandboxes: the fake API server is seeded with N sandboxes
//! and their children (see [`super::seed`]), the real binary starts over them, lists and
//! reconciles every one (a resync: it should write nothing), goes quiet, and its VmRSS is read.
//! A start over existing state is what a restart is: its peak (VmHWM) against the settled RSS
//! is the restart's peak, taken with a fake that pages lists by `limit` and with one that
//! answers each list whole, as the API server may from its watch cache.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::create::{QUIET, Setup, group};
use super::process::{ControllerProcess, Memory};
use super::seed::Template;
use crate::apiserver::{FakeApiServer, FakeOptions};
use cubepod_apiserver::MemoryClusterConfig;

/// How the fake answers the controller's lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lists {
    /// A page of `limit` items and a continue token, as the API server reads from etcd.
    Paged,
    /// Every list whole whatever its `limit`, as the API server may answer from its watch
    /// cache (`resourceVersion=0`).
    Whole,
}

impl Lists {
    pub const ALL: [Lists; 2] = [Lists::Paged, Lists::Whole];

    /// Its name in `--rss-lists`.
    pub fn flag(self) -> &'static str {
        match self {
            Lists::Paged => "paged",
            Lists::Whole => "whole",
        }
    }
}

#[derive(Clone, Debug)]
pub struct SeededRun {
    pub n: usize,
    pub lists: Lists,
    pub memory: Memory,
    /// After `mi_collect(true)` called in the controller by gdb (`--trim-probe`): what the
    /// allocator held but could give back.
    pub trimmed: Option<Memory>,
    /// Just after `/readyz` answered: every list read into the cache, few reconciles yet.
    pub ready_memory: Memory,
    /// Start to `/readyz` (every cache listed).
    pub ready: Duration,
    /// Start to every sandbox reconciled and quiet (the quiet window not counted).
    pub settled: Duration,
    pub resync_writes: BTreeMap<String, usize>,
    pub controller_cpu: Duration,
    /// This process (the fake API server holding the N sandboxes) at the same moment.
    pub bench_memory: Memory,
    pub warnings: Vec<String>,
}

/// Calls `mi_collect(true)` inside the controller through gdb, then reads its memory again.
fn trim(controller: &ControllerProcess) -> Result<Memory> {
    let status = std::process::Command::new("gdb")
        .args(["-p", &controller.pid().to_string(), "-batch", "-ex"])
        .arg("call (void) mi_collect(1)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("running gdb (--trim-probe needs it)")?;
    anyhow::ensure!(status.success(), "gdb could not call mi_collect: {status}");
    controller.memory()
}

/// A run that was not made because the machine could not hold it.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub n: usize,
    /// The controller's RSS at N on the line through the two largest N measured, MiB.
    pub projected_mib: f64,
    pub available_mib: f64,
}

/// `Err(Skipped)` when the controller, at `projected_kib`, and this process (which
/// serves its lists: about twice what it holds after seeding) would need more than 90% of the
/// memory the machine has available.
pub fn run(
    setup: &Setup<'_>,
    template: &Template,
    n: usize,
    projected_kib: f64,
    lists: Lists,
) -> Result<Result<SeededRun, Skipped>> {
    let fake = FakeApiServer::start(FakeOptions {
        token: Some(setup.token.to_string()),
        // Pods start at once: a seeded Pod keeps the status copied into it.
        cluster_config: MemoryClusterConfig::instant(),
        ignore_limit: lists == Lists::Whole,
        ..FakeOptions::default()
    })
    .context("starting the fake API server")?;
    let cluster = fake.cluster();
    template.seed(&cluster, 0, n)?;
    let seeded = super::process::memory_of(std::process::id())?;
    let needed_kib = projected_kib + 2.0 * seeded.rss_kib as f64;
    let available_kib =
        super::process::mem_available_kib().unwrap_or(0) as f64 + seeded.rss_kib as f64;
    if needed_kib > 0.9 * available_kib {
        return Ok(Err(Skipped {
            n,
            projected_mib: projected_kib / 1024.0,
            available_mib: available_kib / 1024.0,
        }));
    }
    let dir = tempfile::tempdir().context("temp dir")?;
    let kubeconfig = fake
        .write_kubeconfig(
            dir.path(),
            &crate::apiserver::KubeconfigAuth::Token(setup.token.to_string()),
        )
        .context("writing a kubeconfig")?;
    let started = Instant::now();
    let mut controller = ControllerProcess::start(setup.binary, &kubeconfig, &[])?;
    let ready = controller.wait_ready(Duration::from_secs(600))?;
    let ready_memory = controller.memory()?;
    controller.wait_quiet(n as f64, QUIET, Duration::from_secs(1800))?;
    let settled = started.elapsed().saturating_sub(QUIET);
    let memory = controller.memory()?;
    let controller_cpu = controller.cpu()?;
    let bench_memory = super::process::memory_of(std::process::id())?;
    let trimmed = if setup.trim_probe {
        Some(trim(&controller)?)
    } else {
        None
    };
    let resync_writes = group(&cluster.writes(), false);
    let (_, warnings) = controller.log_levels();
    controller.stop(Duration::from_secs(15));
    Ok(Ok(SeededRun {
        n,
        lists,
        memory,
        trimmed,
        ready_memory,
        ready,
        settled,
        resync_writes,
        controller_cpu,
        bench_memory,
        warnings,
    }))
}
