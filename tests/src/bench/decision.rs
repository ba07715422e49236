//! One reconcile decision of the default policy through the wasm component (a fresh Store per
//! call, as the controller makes it) and natively (the same Rust called directly), on two
//! inputs: a converged resync (no kube-client call) and a new sandbox (4 calls). The table of
//! `cargo bench -p cubepod-tests --bench reconcile`, which also breaks the wasm
//! figure down (store, instantiation, WASI context, host calls, the boundary's parse).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::runtime::{CallContext, PolicyModule};
use cubepod_policy_sdk::bindings as guest;
use cubepod_policy_sdk::fixtures;
use cubepod_policy_sdk::reconcile;
use cubepod_policy_sdk::recording::NullClient;

use super::instant::INSTANT_CLUSTER;
use super::twin;

#[derive(Clone, Debug)]
pub struct Case {
    pub label: &'static str,
    pub calls: u32,
    pub native: Vec<Duration>,
    pub wasm: Vec<Duration>,
}

/// The new sandbox's input, and the converged one: its children observed, the Pod ready.
pub fn native_inputs() -> Result<(guest::ReconcileInput, guest::ReconcileInput)> {
    fixtures::new_and_converged("bench")
        .map_err(|e| anyhow::anyhow!("a new sandbox does not reconcile: {e:?}"))
}

/// Times `run` `runs` times after a tenth as many to warm up; `setup` (untimed) makes each
/// run's argument.
pub fn time<S>(runs: usize, mut setup: impl FnMut() -> S, mut run: impl FnMut(S)) -> Vec<Duration> {
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
        Arc::new(INSTANT_CLUSTER),
        Arc::new(Boundary::new([fixtures::NAMESPACE])),
        handle,
    );
    let (new, converged) = native_inputs()?;
    let mut cases = Vec::new();
    // A new sandbox's calls: its two PVCs, Secret, NetworkPolicy and Pod.
    for (label, input, calls) in [("converged resync", converged, 0), ("new sandbox", new, 5)] {
        // Both paths decide the same before either is timed.
        let mut client = NullClient::default();
        let native = reconcile::reconcile(&mut client, &input)
            .map_err(|e| anyhow::anyhow!("{label}: native reconcile: {e:?}"))?;
        let call = module
            .reconcile_sandbox(&context, twin::reconcile_input(&input))
            .context("the wasm call")?;
        let wasm = call
            .value
            .map_err(|e| anyhow::anyhow!("{label}: wasm reconcile: {e:?}"))?;
        if client.calls != calls
            || call.host_calls != calls
            || wasm.status != twin::sandbox_status(&native.status)
        {
            bail!(
                "{label}: the wasm and native decisions differ: kube-client calls {} native, {} \
                 wasm, {calls} expected; status equal: {}",
                client.calls,
                call.host_calls,
                wasm.status == twin::sandbox_status(&native.status)
            );
        }
        let native_times = time(native_runs, NullClient::default, |mut client| {
            black_box(reconcile::reconcile(&mut client, black_box(&input)).ok());
        });
        let host = twin::reconcile_input(&input);
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
