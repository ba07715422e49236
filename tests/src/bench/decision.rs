//! One reconcile decision of the default policy through the wasm component and natively (the
//! same Rust called directly), on two inputs: a converged resync (no kube-client call) and a new
//! sandbox (5 calls). Through wasm twice: in a fresh Store (a module whose decision memo is off),
//! and as the controller calls it, whose converged resync, at a later `now` with another
//! credential each time, is answered from the module's memo. The table of
//! `cargo bench -p cubepod-tests --bench reconcile`, which also breaks the fresh Store's figure
//! down (store, instantiation, WASI context, host calls, the boundary's parse).
//!
//! Each path runs in a function of its own (`through_fresh_store`, `through_memo`, `natively`)
//! and each input in `case`, so that callgrind counts each apart:
//! `valgrind --tool=callgrind --dump-after='*bench::decision::case' cubepod-bench --only
//! decision --runs 1 --decision-runs 50 --guest-address-space compact --policy-cache DIR`
//! (after the same run outside valgrind filled DIR, so that valgrind does not compile).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::runtime::bindings::{self as host, ReconcileInput, ReconcileOutput};
use cubepod_policy_host::runtime::{
    CallContext, DEFAULT_POLICY, GuestCall, MemoBounds, PolicyEngine, PolicyModule, RuntimeConfig,
    RuntimeError,
};
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
    /// In a fresh Store: the module's memo off.
    pub wasm: Vec<Duration>,
    /// As the controller calls it, with the module's memo: empty for an input whose calls it
    /// never keeps (one that makes kube-client calls).
    pub memo: Vec<Duration>,
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

/// Both inputs, every path. `module` is the default policy; call from outside the tokio
/// runtime `handle` belongs to (the guest's host calls block on it).
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
    let fresh = PolicyEngine::new(RuntimeConfig {
        memo: MemoBounds {
            entries: 0,
            ..MemoBounds::default()
        },
        ..module.engine().config().clone()
    })?
    .load(DEFAULT_POLICY)?;
    let (new, converged) = native_inputs()?;
    // A new sandbox's calls: its two PVCs, Secret, NetworkPolicy and Pod.
    [("converged resync", converged, 0), ("new sandbox", new, 5)]
        .into_iter()
        .map(|(label, input, calls)| {
            case(
                label,
                &input,
                calls,
                (module, &fresh, &context),
                wasm_runs,
                native_runs,
            )
        })
        .collect()
}

/// One input through every path, after checking that they decide alike.
#[inline(never)]
fn case(
    label: &'static str,
    input: &guest::ReconcileInput,
    calls: u32,
    (module, fresh, context): (&PolicyModule, &PolicyModule, &CallContext),
    wasm_runs: usize,
    native_runs: usize,
) -> Result<Case> {
    let mut client = NullClient::default();
    let native = reconcile::reconcile(&mut client, input)
        .map_err(|e| anyhow::anyhow!("{label}: native reconcile: {e:?}"))?;
    let host = twin::reconcile_input(input);
    for (path, module) in [("a fresh Store", fresh), ("the memo", module)] {
        let call = module
            .reconcile_sandbox(context, host.clone())
            .context("the wasm call")?;
        let wasm = call
            .value
            .map_err(|e| anyhow::anyhow!("{label}: wasm reconcile: {e:?}"))?;
        if client.calls != calls
            || call.host_calls != calls
            || wasm.status != twin::sandbox_status(&native.status)
        {
            bail!(
                "{label}: the wasm ({path}) and native decisions differ: kube-client calls {} \
                 native, {} wasm, {calls} expected; status equal: {}",
                client.calls,
                call.host_calls,
                wasm.status == twin::sandbox_status(&native.status)
            );
        }
    }
    let native_times = time(native_runs, NullClient::default, |client| {
        natively(client, input);
    });
    let wasm_times = time(
        wasm_runs,
        || host.clone(),
        |input| {
            through_fresh_store(fresh, context, input);
        },
    );
    // A resync comes later than the call that converged, with another credential: the memo
    // answers it all the same, until the policy's requeue (none here).
    let mut resync = 0;
    let memo_times = if calls == 0 {
        time(
            wasm_runs,
            || {
                resync += 1;
                let mut input = host.clone();
                input.now += resync;
                input.fresh_token = format!("{:064x}", resync);
                input
            },
            |input| {
                through_memo(module, context, input);
            },
        )
    } else {
        Vec::new()
    };
    Ok(Case {
        label,
        calls,
        native: native_times,
        wasm: wasm_times,
        memo: memo_times,
    })
}

type Decision = Result<GuestCall<Result<ReconcileOutput, host::KubeError>>, RuntimeError>;

#[inline(never)]
fn natively(mut client: NullClient, input: &guest::ReconcileInput) {
    black_box(reconcile::reconcile(&mut client, black_box(input)).ok());
}

#[inline(never)]
fn through_fresh_store(module: &PolicyModule, context: &CallContext, input: ReconcileInput) {
    let decided: Decision = module.reconcile_sandbox(context, black_box(input));
    black_box(decided.ok());
}

#[inline(never)]
fn through_memo(module: &PolicyModule, context: &CallContext, input: ReconcileInput) {
    let decided: Decision = module.reconcile_sandbox(context, black_box(input));
    black_box(decided.ok());
}
