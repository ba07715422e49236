//! One reconcile decision of the default policy through the wasm component (a fresh Store per
//! call, as the controller makes it) and natively (the same Rust called directly), on two
//! inputs: a converged resync (no kube-client call) and a new sandbox (4 calls). The short
//! version of `cargo bench -p cubepod-host --bench reconcile`, which also breaks the wasm
//! figure down (store, instantiation, WASI context, host calls, the boundary's parse).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_guest::bindings as guest;
use cubepod_guest::client::{KubeClient, KubeResult};
use cubepod_guest::{fixtures, names, reconcile};
use cubepod_host::kube::boundary::Boundary;
use cubepod_host::kube::{
    ApiError, ApiResult, BoxFuture, Cluster, ObjectList, Resource, Scope, WatchEvent,
};
use cubepod_host::runtime::bindings as host;
use cubepod_host::runtime::{CallContext, PolicyModule};
use serde_json::Value;
use tokio::sync::mpsc;

#[derive(Clone, Debug)]
pub struct Case {
    pub label: &'static str,
    pub calls: u32,
    pub native: Vec<Duration>,
    pub wasm: Vec<Duration>,
}

/// Accepts every call at no cost; `ensure-pod` answers with no IP yet.
#[derive(Default)]
struct NullClient {
    calls: u32,
}

impl NullClient {
    fn call(&mut self) -> KubeResult<()> {
        self.calls += 1;
        Ok(())
    }
}

impl KubeClient for NullClient {
    fn ensure_pvc(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn delete_pvc(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn ensure_pod(&mut self, _: &str, _: &str, _: &str) -> KubeResult<Option<String>> {
        self.call().map(|()| None)
    }
    fn delete_pod(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn ensure_secret(&mut self, _: &str, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
    fn delete_secret(&mut self, _: &str, _: &str) -> KubeResult<()> {
        self.call()
    }
}

/// The wasm path's cluster: every request completes at once, as the native path's client.
struct InstantCluster;

impl Cluster for InstantCluster {
    fn create(&self, _: Resource, _: &str, object: Value) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async move { Ok(object) })
    }
    fn get(&self, resource: Resource, ns: &str, name: &str) -> BoxFuture<'_, ApiResult<Value>> {
        let missing = ApiError::not_found(resource, ns, name);
        Box::pin(async move { Err(missing) })
    }
    fn delete(&self, _: Resource, _: &str, _: &str) -> BoxFuture<'_, ApiResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn patch(&self, _: Resource, _: &str, _: &str, p: Value) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async move { Ok(p) })
    }
    fn patch_status(
        &self,
        _: Resource,
        _: &str,
        _: &str,
        p: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async move { Ok(p) })
    }
    fn list(&self, _: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        Box::pin(async { Ok(ObjectList::default()) })
    }
    fn watch(
        &self,
        _: &Scope,
        _: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        let (_, events) = mpsc::channel(1);
        Box::pin(async move { Ok(events) })
    }
}

/// The new sandbox's input, and the converged one: its children observed, the Pod ready.
fn native_inputs() -> Result<(guest::ReconcileInput, guest::ReconcileInput)> {
    let name = "bench";
    let new = fixtures::sandbox(name).input();
    let created = reconcile::reconcile(&mut NullClient::default(), &new)
        .map_err(|e| anyhow::anyhow!("a new sandbox does not reconcile: {e:?}"))?;
    let mut converged = new.clone();
    converged.sandbox.status = created.status;
    let generation = converged.sandbox.spec.rootfs_generation;
    let pvc = |name: String| guest::ObservedPvc {
        name,
        deleting: false,
    };
    converged.observed = guest::ObservedChildren {
        pvcs: vec![
            pvc(names::workspace_pvc(name)),
            pvc(names::rootfs_pvc(name, generation)),
        ],
        pod: Some(guest::ObservedPod {
            name: names::pod(name),
            deleting: false,
            ip: Some("10.0.0.1".to_string()),
            ready: true,
            rootfs_generation: Some(generation),
        }),
        secret: true,
    };
    Ok((new, converged))
}

// ---- the same input, as the host's bindings type it ----

fn host_input(input: &guest::ReconcileInput) -> host::ReconcileInput {
    let observed = &input.observed;
    host::ReconcileInput {
        now: input.now,
        sandbox: host_sandbox(&input.sandbox),
        observed: host::ObservedChildren {
            pvcs: observed
                .pvcs
                .iter()
                .map(|p| host::ObservedPvc {
                    name: p.name.clone(),
                    deleting: p.deleting,
                })
                .collect(),
            pod: observed.pod.as_ref().map(|p| host::ObservedPod {
                name: p.name.clone(),
                deleting: p.deleting,
                ip: p.ip.clone(),
                ready: p.ready,
                rootfs_generation: p.rootfs_generation,
            }),
            secret: observed.secret,
        },
        fork_source: input.fork_source.as_ref().map(host_sandbox),
        pool_candidates: input.pool_candidates.clone(),
        claimed_member: input.claimed_member.as_ref().map(host_sandbox),
        fresh_token: input.fresh_token.clone(),
    }
}

fn host_sandbox(s: &guest::Sandbox) -> host::Sandbox {
    let spec = &s.spec;
    host::Sandbox {
        namespace: s.namespace.clone(),
        name: s.name.clone(),
        uid: s.uid.clone(),
        generation: s.generation,
        deleting: s.deleting,
        last_activity: s.last_activity,
        pool: s.pool.clone(),
        claimed_by: s.claimed_by.clone(),
        spec: host::SandboxSpec {
            image: spec.image.clone(),
            desired_state: match spec.desired_state {
                guest::DesiredState::Running => host::DesiredState::Running,
                guest::DesiredState::Paused => host::DesiredState::Paused,
            },
            rootfs_generation: spec.rootfs_generation,
            fork_from: spec.fork_from.clone(),
            idle_timeout_seconds: spec.idle_timeout_seconds,
            cpu: spec.cpu.clone(),
            memory: spec.memory.clone(),
            storage_class: spec.storage_class.clone(),
            rootfs_size: spec.rootfs_size.clone(),
            workspace_size: spec.workspace_size.clone(),
            runtime_class: spec.runtime_class.clone(),
            warm_pool: spec.warm_pool.clone(),
        },
        status: host_status(&s.status),
    }
}

fn host_status(s: &guest::SandboxStatus) -> host::SandboxStatus {
    host::SandboxStatus {
        phase: match s.phase {
            guest::SandboxPhase::Pending => host::SandboxPhase::Pending,
            guest::SandboxPhase::Running => host::SandboxPhase::Running,
            guest::SandboxPhase::Paused => host::SandboxPhase::Paused,
            guest::SandboxPhase::Terminating => host::SandboxPhase::Terminating,
            guest::SandboxPhase::Failed => host::SandboxPhase::Failed,
        },
        pod_ip: s.pod_ip.clone(),
        rootfs_pvc: s.rootfs_pvc.clone(),
        workspace_pvc: s.workspace_pvc.clone(),
        observed_generation: s.observed_generation,
        conditions: s
            .conditions
            .iter()
            .map(|c| host::Condition {
                kind: c.kind.clone(),
                status: match c.status {
                    guest::ConditionStatus::True => host::ConditionStatus::True,
                    guest::ConditionStatus::False => host::ConditionStatus::False,
                    guest::ConditionStatus::Unknown => host::ConditionStatus::Unknown,
                },
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time,
            })
            .collect(),
        started_at: s.started_at,
        idle_paused_at: s.idle_paused_at,
        claimed_member: s.claimed_member.clone(),
    }
}

/// Times `run` `runs` times after a tenth as many to warm up; `setup` (untimed) makes each
/// run's argument.
fn time<S>(runs: usize, mut setup: impl FnMut() -> S, mut run: impl FnMut(S)) -> Vec<Duration> {
    for _ in 0..runs / 10 {
        run(setup());
    }
    (0..runs)
        .map(|_| {
            let argument = setup();
            let started = Instant::now();
            run(argument);
            started.elapsed()
        })
        .collect()
}

/// Both inputs, both paths. Call from outside the tokio runtime `handle` belongs to (the
/// guest's host calls block on it).
pub fn run(
    module: &PolicyModule,
    handle: tokio::runtime::Handle,
    wasm_runs: usize,
    native_runs: usize,
) -> Result<Vec<Case>> {
    let context = CallContext::new(
        Arc::new(InstantCluster),
        Arc::new(Boundary::new([fixtures::NAMESPACE])),
        handle,
    );
    let (new, converged) = native_inputs()?;
    let mut cases = Vec::new();
    for (label, input, calls) in [("converged resync", converged, 0), ("new sandbox", new, 4)] {
        // Both paths decide the same before either is timed.
        let mut client = NullClient::default();
        let native = reconcile::reconcile(&mut client, &input)
            .map_err(|e| anyhow::anyhow!("{label}: native reconcile: {e:?}"))?;
        let call = module
            .reconcile_sandbox(&context, host_input(&input))
            .context("the wasm call")?;
        let wasm = call
            .value
            .map_err(|e| anyhow::anyhow!("{label}: wasm reconcile: {e:?}"))?;
        if client.calls != calls
            || call.host_calls != calls
            || wasm.status != host_status(&native.status)
        {
            bail!("{label}: the wasm and native decisions differ");
        }
        let native_times = time(native_runs, NullClient::default, |mut client| {
            black_box(reconcile::reconcile(&mut client, black_box(&input)).ok());
        });
        let host = host_input(&input);
        let wasm_times = time(
            wasm_runs,
            || host.clone(),
            |input| {
                black_box(module.reconcile_sandbox(&context, black_box(input)).ok());
            },
        );
        cases.push(Case {
            label,
            calls,
            native: native_times,
            wasm: wasm_times,
        });
    }
    Ok(cases)
}
