//! A policy rollout's cost: sandboxes/s and the controller's CPU per sandbox while a
//! `PolicyRollout` holds its candidate in the shadow stage (run beside the stable module on
//! every sandbox reconcile, writing nothing) or in a canary step of 50% (half the sandboxes
//! reconciled by the candidate alone), against a plain run of the same binary. The three
//! alternate within each round, so that all see the same minutes of the shared machine. The
//! candidate is the default policy under another digest ([`super::swap::variant`]): the same
//! decisions, so a shadow that reports a difference, or a canary that leaves a sandbox not
//! Running, fails the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use base64::Engine as _;
use cubepod_apiserver::MemoryCluster;
use cubepod_kube::{Cluster, Resource};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

use super::create::{self, CreateRun, Setup};

/// The controller's own namespace (its `--lease-namespace` default), where rollouts live.
const SYSTEM: &str = "cubepod-system";
const ROLLOUT: &str = "bench-candidate";
/// The canary step's share of sandboxes, percent.
pub const CANARY_WEIGHT: u64 = 50;

/// What a run held the rollout at while the sandboxes were created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// No rollout.
    Plain,
    /// The shadow stage, on every reconcile (`share: 100`).
    Shadow,
    /// The first canary step, [`CANARY_WEIGHT`]%.
    Canary,
}

impl Stage {
    pub const ALL: [Stage; 3] = [Stage::Plain, Stage::Shadow, Stage::Canary];

    pub fn label(self) -> &'static str {
        match self {
            Stage::Plain => "no rollout",
            Stage::Shadow => "shadow stage (share 100%)",
            Stage::Canary => "canary step (weight 50%)",
        }
    }

    /// The rollout's spec: each stage held for an hour, far longer than the run.
    fn strategy(self) -> Option<Value> {
        match self {
            Stage::Plain => None,
            Stage::Shadow => Some(json!({
                "type": "Progressive",
                "shadow": {"duration": "1h", "share": 100},
                "canary": {"steps": [{"weight": 100, "duration": "1h"}]},
            })),
            Stage::Canary => Some(json!({
                "type": "Progressive",
                "canary": {"steps": [{"weight": CANARY_WEIGHT, "duration": "1h"}]},
            })),
        }
    }

    /// The phase the rollout holds in this stage.
    fn phase(self) -> &'static str {
        match self {
            Stage::Plain => "",
            Stage::Shadow => "Shadowing",
            Stage::Canary => "Canary",
        }
    }
}

/// One run at N sandboxes in one stage.
#[derive(Clone, Debug)]
pub struct StageRun {
    pub stage: Stage,
    pub run: CreateRun,
    /// Shadow: reconciles the candidate was compared on, and the differences it showed.
    pub compared: u64,
    pub differences: u64,
    /// Canary: objects the candidate reconciled.
    pub touched: u64,
}

/// The rollout put in place before the burst and read back once quiet.
struct Rollout {
    stage: Stage,
    status: Value,
}

fn status_of(runtime: &Runtime, cluster: &Arc<MemoryCluster>) -> Result<Value> {
    let object = runtime
        .block_on(cluster.get(Resource::PolicyRollout, SYSTEM, ROLLOUT))
        .map_err(|e| anyhow!("reading the rollout: {e}"))?;
    Ok(object["status"].clone())
}

fn compared(status: &Value) -> u64 {
    status["shadow"]["compared"].as_u64().unwrap_or(0)
}

impl create::Stage for Rollout {
    fn prepare(&mut self, runtime: &Runtime, cluster: &Arc<MemoryCluster>) -> Result<()> {
        let Some(strategy) = self.stage.strategy() else {
            return Ok(());
        };
        let module = base64::engine::general_purpose::STANDARD.encode(super::swap::variant(1));
        let map = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ROLLOUT, "namespace": SYSTEM},
            "binaryData": {"policy.wasm": module},
        });
        let rollout = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PolicyRollout",
            "metadata": {"name": ROLLOUT, "namespace": SYSTEM},
            "spec": {"module": {"configMap": ROLLOUT}, "strategy": strategy},
        });
        runtime.block_on(async {
            cluster
                .create(Resource::ConfigMap, SYSTEM, map)
                .await
                .map_err(|e| anyhow!("creating the module's ConfigMap: {e}"))?;
            cluster
                .create(Resource::PolicyRollout, SYSTEM, rollout)
                .await
                .map_err(|e| anyhow!("creating the rollout: {e}"))
        })?;
        // Admission compiles and self-tests the candidate before the stage starts.
        let started = Instant::now();
        loop {
            let status = status_of(runtime, cluster)?;
            if status["phase"] == self.stage.phase() {
                return Ok(());
            }
            if status["phase"] == "Refused" || started.elapsed() > Duration::from_secs(60) {
                bail!("the rollout did not reach {}: {status}", self.stage.phase());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn finish(&mut self, runtime: &Runtime, cluster: &Arc<MemoryCluster>) -> Result<()> {
        if self.stage == Stage::Plain {
            return Ok(());
        }
        // The controller writes the shadow's findings when they change, at most every 250 ms:
        // two reads a second apart that agree are the final count.
        let mut status = status_of(runtime, cluster)?;
        for _ in 0..30 {
            std::thread::sleep(Duration::from_secs(1));
            let now = status_of(runtime, cluster)?;
            let settled =
                compared(&now) == compared(&status) && now["touched"] == status["touched"];
            status = now;
            if settled {
                break;
            }
        }
        if status["phase"] != self.stage.phase() {
            bail!(
                "the rollout left {} during the run: {status}",
                self.stage.phase()
            );
        }
        self.status = status;
        Ok(())
    }
}

/// One run of N sandboxes with the rollout held at `stage`.
pub fn run(setup: &Setup<'_>, n: usize, stage: Stage) -> Result<StageRun> {
    let mut rollout = Rollout {
        stage,
        status: Value::Null,
    };
    let run = create::run_staged(setup, n, Some(&mut rollout))?;
    let status = rollout.status;
    let differences = status["shadow"]["differences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["count"].as_u64())
        .sum();
    if differences > 0 {
        bail!(
            "the shadowed candidate decides as the stable module does, yet {differences} \
             differences were reported: {}",
            status["shadow"]
        );
    }
    let result = StageRun {
        stage,
        compared: compared(&status),
        differences,
        touched: status["touched"].as_u64().unwrap_or(0),
        run,
    };
    if stage == Stage::Shadow && result.compared < n as u64 {
        bail!(
            "the shadow compared {} reconciles of {n} sandboxes at a share of 100%",
            result.compared
        );
    }
    if stage == Stage::Canary && result.touched == 0 {
        bail!("the candidate touched no sandbox at a weight of {CANARY_WEIGHT}%");
    }
    Ok(result)
}
