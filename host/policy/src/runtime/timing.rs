//! Where a call's time goes, for a module given by path: the instantiation alone (a fresh
//! store and the module's pre-instance), `describe` (the same and a call that does nothing),
//! and the reconcile of a new sandbox against a cluster that answers at once, each the median
//! and the fastest of N, and the page faults of a reconcile. An ignored test, run by hand
//! against a release build; on a shared machine the fastest says best what a call costs, as
//! a call of milliseconds is far likelier to be preempted than one of microseconds.
//!
//! ```text
//! CUBEPOD_TIMING_MODULE=$PWD/target/polyglot/js-default-qjs.wasm CUBEPOD_TIMING_CALLS=200 \
//!   cargo test --release -p cubepod-policy-host --lib timing -- --ignored --nocapture
//! ```
//!
//! No module: the built-in default. The compiled modules are kept in `CUBEPOD_TIMING_CACHE`
//! (`/tmp/cubepod-timing-cache`). Under `perf record`, `CUBEPOD_PERFMAP=1` has the engine write
//! a perf map, so that the guest's functions are named (give it a cache directory of its own:
//! the map is written when a module is compiled), and `CUBEPOD_TIMING_ONLY=reconcile` times the
//! reconciles alone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cubepod_kube::Discarding;
use wasmtime::Store;

use super::contract::ModulePre;
use super::host::HostState;
use super::{CallContext, Compile, MemoBounds, PolicyEngine, RuntimeConfig};
use crate::containment::Boundary;
use crate::fixtures;

/// The median and the fastest.
fn shown(mut times: Vec<Duration>) -> String {
    times.sort();
    format!("p50 {:?}, fastest {:?}", times[times.len() / 2], times[0])
}

/// The minor page faults this process has taken so far.
#[allow(unsafe_code)] // getrusage of this process, into a zeroed struct it fills.
fn minor_faults() -> i64 {
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF needs nothing else.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage.ru_minflt
    }
}

/// Runs `call` `calls` times after a tenth as many to warm up.
fn timed(calls: usize, mut call: impl FnMut() -> Duration) -> Vec<Duration> {
    for _ in 0..calls / 10 {
        call();
    }
    (0..calls).map(|_| call()).collect()
}

#[test]
#[ignore = "a measurement, run by hand"]
fn per_call_time_of_a_module() {
    let path = std::env::var("CUBEPOD_TIMING_MODULE").unwrap_or_default();
    let calls: usize = std::env::var("CUBEPOD_TIMING_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
        .max(1);
    let cache = std::env::var("CUBEPOD_TIMING_CACHE").unwrap_or("/tmp/cubepod-timing-cache".into());
    // `CUBEPOD_TIMING_TIER=baseline`: Winch's build, the one a tiered swap serves first.
    let baseline = std::env::var("CUBEPOD_TIMING_TIER").is_ok_and(|tier| tier == "baseline");
    let engine = PolicyEngine::new(RuntimeConfig {
        cache_dir: Some(PathBuf::from(cache)),
        compile: if baseline {
            Compile::Baseline
        } else {
            Compile::Optimised
        },
        // Every call instantiates the module, as a call the memo cannot answer does.
        memo: MemoBounds {
            entries: 0,
            ..MemoBounds::default()
        },
        ..RuntimeConfig::default()
    })
    .expect("an engine");
    let module = if path.is_empty() {
        engine.load(super::DEFAULT_POLICY).expect("the default")
    } else {
        engine.load_file(path.as_ref()).expect("the module")
    };
    eprintln!(
        "{}: loaded in {:?}, {} build",
        module.info().name,
        module.loaded_in(),
        module.tier().describe()
    );

    let config = engine.config();
    let build = module.build();
    let instantiate = || {
        let mut store = Store::new(
            build.engine.engine(),
            HostState::new(None, None, config, engine.memory_budget().clone()),
        );
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(u64::MAX / 2);
        let pre = match &build.pre {
            ModulePre::V0_2(pre) => pre.bindings.instance_pre(),
            ModulePre::V0_1(pre) => pre.instance_pre(),
        };
        let started = Instant::now();
        futures_executor::block_on(pre.instantiate_async(&mut store)).expect("instantiated");
        started.elapsed()
    };
    // `CUBEPOD_TIMING_ONLY=reconcile`: the reconciles alone, for a profile of them.
    let all = std::env::var("CUBEPOD_TIMING_ONLY").is_err();
    if all {
        eprintln!("instantiation: {}", shown(timed(calls, instantiate)));
    }
    let describe = || {
        let started = Instant::now();
        module.describe().expect("described");
        started.elapsed()
    };
    if all {
        eprintln!(
            "describe (store, instance, call): {}",
            shown(timed(calls, describe))
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let boundary = Arc::new(Boundary::new(["timing"]));
    let reconcile = || {
        let ctx = CallContext::new(
            Arc::new(Discarding::new()),
            boundary.clone(),
            runtime.handle().clone(),
        );
        let input = fixtures::new_sandbox_input("timing", "box", 1_000);
        let started = Instant::now();
        let call = module.reconcile_sandbox(&ctx, input).expect("reconciled");
        let took = started.elapsed();
        let decided = call.value.expect("a decision, not a kube-error");
        assert_eq!(
            call.host_calls, 5,
            "a new sandbox's two PVCs, Secret, NetworkPolicy and Pod"
        );
        assert!(!decided.status.conditions.is_empty());
        took
    };
    let faults = minor_faults();
    let times = timed(calls, reconcile);
    let faults = (minor_faults() - faults) as f64 / (calls + calls / 10) as f64;
    eprintln!(
        "reconcile of a new sandbox: {}, {faults:.0} minor page faults a call",
        shown(times)
    );
}
