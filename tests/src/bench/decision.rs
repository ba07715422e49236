//! One reconcile decision of the default policy through the wasm component and natively (the
//! same Rust called directly), on two inputs: a converged resync (no kube-client call) and a new
//! sandbox (5 calls). Through wasm twice: in a fresh Store (the module loaded again with its
//! decision memo off, so that every call instantiates it), and as the controller calls it, whose
//! converged resync, at a later `now` with another credential each time, is answered from the
//! module's memo. Both are loaded from the same bytes ([`Subject`]), and each is checked to be
//! the module named (its digest, the name its `describe` gives) before it is timed. The table of
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
    CallContext, GuestCall, MemoBounds, PolicyEngine, PolicyModule, RuntimeConfig, RuntimeError,
};
use cubepod_policy_sdk::bindings as guest;
use cubepod_policy_sdk::fixtures;
use cubepod_policy_sdk::reconcile;
use cubepod_policy_sdk::recording::NullClient;
use sha2::{Digest, Sha256};

use super::instant::INSTANT_CLUSTER;
use super::twin;

/// The name the built-in default policy gives in `describe` (`guest/src/lib.rs`).
pub const DEFAULT_POLICY_NAME: &str = "cubepod-default";

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

/// The policy whose decisions are timed: one component, loaded twice from its bytes on the same
/// engine settings.
pub struct Subject {
    /// As the controller runs it: with its decision memo.
    pub module: PolicyModule,
    /// With its memo off: every call instantiates it in a fresh Store.
    pub fresh: PolicyModule,
    /// The name its `describe` must give.
    name: String,
    /// The sha256 of its bytes, lower-case hex.
    digest: String,
}

impl Subject {
    /// Loads `bytes` with `config` (and once more with the memo off), and checks that both are
    /// the policy named `name`.
    pub fn load(config: &RuntimeConfig, bytes: &[u8], name: &str) -> Result<Self> {
        let module = PolicyEngine::new(config.clone())
            .context("engine")?
            .load(bytes)
            .with_context(|| format!("loading {name}"))?;
        let fresh = PolicyEngine::new(RuntimeConfig {
            memo: MemoBounds {
                entries: 0,
                ..config.memo
            },
            ..config.clone()
        })
        .context("engine")?
        .load(bytes)
        .with_context(|| format!("loading {name} (its memo off)"))?;
        let subject = Self {
            module,
            fresh,
            name: name.to_string(),
            digest: hex::encode(Sha256::digest(bytes)),
        };
        subject.check(&subject.module)?;
        subject.check(&subject.fresh)?;
        Ok(subject)
    }

    /// Fails unless `module` is this subject's component and the policy it runs, asked now,
    /// says it is the one named: so that no figure is another module's.
    fn check(&self, module: &PolicyModule) -> Result<()> {
        let said = module
            .describe()
            .with_context(|| format!("{}: describe", self.name))?
            .name;
        if module.digest() != self.digest || said != self.name {
            bail!(
                "the module timed is not {}: it describes itself as {said} and its digest is \
                 {}, against {} for the bytes given",
                self.name,
                module.digest(),
                self.digest
            );
        }
        Ok(())
    }
}

/// Both inputs, every path. Call from outside the tokio runtime `handle` belongs to (the
/// guest's host calls block on it).
pub fn run(
    subject: &Subject,
    handle: tokio::runtime::Handle,
    wasm_runs: usize,
    native_runs: usize,
) -> Result<Vec<Case>> {
    let boundary = Arc::new(Boundary::new([fixtures::NAMESPACE]));
    // A context per call: each call of a new sandbox then has the write allowance of a sandbox
    // that wrote nothing in the last minute (`--max-write-bytes-per-minute`), as a new sandbox
    // has, rather than being deferred at its first write once the calls before it spent it.
    let context = || CallContext::new(Arc::new(INSTANT_CLUSTER), boundary.clone(), handle.clone());
    let (new, converged) = native_inputs()?;
    // A new sandbox's calls: its two PVCs, Secret, NetworkPolicy and Pod.
    [("converged resync", converged, 0), ("new sandbox", new, 5)]
        .into_iter()
        .map(|(label, input, calls)| {
            case(
                label,
                &input,
                calls,
                (subject, &context),
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
    (subject, context): (&Subject, &dyn Fn() -> CallContext),
    wasm_runs: usize,
    native_runs: usize,
) -> Result<Case> {
    let (module, fresh) = (&subject.module, &subject.fresh);
    let mut client = NullClient::default();
    let native = reconcile::reconcile(&mut client, input)
        .map_err(|e| anyhow::anyhow!("{label}: native reconcile: {e:?}"))?;
    if client.calls != calls {
        bail!(
            "{label}: the native decision made {} kube-client calls, {calls} expected",
            client.calls
        );
    }
    let status = twin::sandbox_status(&native.status);
    // Every wasm call, timed or not, must have decided as the native one did, through all its
    // kube-client calls: a call refused or cut short is not the decision the row names.
    let decided_alike = |path: &str, decided: Decision| -> Result<()> {
        let call = decided.map_err(|e| anyhow::anyhow!("{label}: the wasm call ({path}): {e}"))?;
        let wasm = call
            .value
            .map_err(|e| anyhow::anyhow!("{label}: wasm reconcile ({path}): {e:?}"))?;
        if call.host_calls != calls || wasm.status != status {
            bail!(
                "{label}: the wasm ({path}) and native decisions differ: {} kube-client calls \
                 through wasm, {calls} natively; status equal: {}",
                call.host_calls,
                wasm.status == status
            );
        }
        Ok(())
    };
    let host = twin::reconcile_input(input);
    for (path, module) in [("a fresh Store", fresh), ("the memo", module)] {
        decided_alike(path, module.reconcile_sandbox(&context(), host.clone()))?;
    }
    let native_times = time(native_runs, NullClient::default, |client| {
        natively(client, input);
    });
    // The calls' answers (and contexts) are dropped after the timing, and checked then.
    let mut decided = Vec::with_capacity(wasm_runs + wasm_runs / 10);
    let wasm_times = time(
        wasm_runs,
        || (host.clone(), context()),
        |(input, context)| {
            decided.push((through_fresh_store(fresh, &context, input), context));
        },
    );
    for (decision, _) in decided {
        decided_alike("a fresh Store", decision)?;
    }
    // A resync comes later than the call that converged, with another credential: the memo
    // answers it all the same, until the policy's requeue (none here).
    let mut resync = 0;
    let memo_context = context();
    let mut decided = Vec::with_capacity(wasm_runs + wasm_runs / 10);
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
                decided.push(through_memo(module, &memo_context, input));
            },
        )
    } else {
        Vec::new()
    };
    for decision in decided {
        decided_alike("the memo", decision)?;
    }
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
fn through_fresh_store(
    module: &PolicyModule,
    context: &CallContext,
    input: ReconcileInput,
) -> Decision {
    black_box(module.reconcile_sandbox(context, black_box(input)))
}

#[inline(never)]
fn through_memo(module: &PolicyModule, context: &CallContext, input: ReconcileInput) -> Decision {
    black_box(module.reconcile_sandbox(context, black_box(input)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_policy_host::runtime::DEFAULT_POLICY;

    #[test]
    fn a_module_that_is_not_the_one_named_is_not_timed() {
        let config = RuntimeConfig::default();
        let refused = Subject::load(&config, DEFAULT_POLICY, "cubepod-default-python")
            .err()
            .expect("the Rust default is not the Python one");
        let said = format!("{refused:#}");
        assert!(
            said.contains("the module timed is not cubepod-default-python")
                && said.contains("describes itself as cubepod-default "),
            "{said}"
        );
        let subject = Subject::load(&config, DEFAULT_POLICY, DEFAULT_POLICY_NAME)
            .expect("the default is the default");
        assert_eq!(subject.fresh.digest(), subject.module.digest());
    }

    /// Enough new sandboxes to spend a sandbox's write allowance many times over: every timed
    /// call must still make its five writes (a call deferred at its first write is no decision).
    #[test]
    fn every_timed_call_is_a_whole_decision_by_the_module() {
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        let subject = Subject::load(
            &RuntimeConfig::default(),
            DEFAULT_POLICY,
            DEFAULT_POLICY_NAME,
        )
        .expect("the default policy");
        let cases = run(&subject, runtime.handle().clone(), 300, 20)
            .unwrap_or_else(|e| panic!("the decisions: {e:#}"));
        assert_eq!(cases.iter().map(|c| c.wasm.len()).sum::<usize>(), 600);
        // Every call of the per-call path ran the module: its memo answered none.
        assert_eq!(subject.fresh.memo_stats().hits, 0);
        // The memo path's converged resyncs were answered from the memo.
        assert!(
            subject.module.memo_stats().hits >= 300,
            "{:?}",
            subject.module.memo_stats()
        );
    }
}
