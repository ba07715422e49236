//! A policy hot swap, from the file's change to the new module serving and to its first
//! decision:
//! `cargo bench -p cubepod-tests --bench swap`. The swap is `cubepod_tests::bench::swap::run`,
//! the same that `cubepod-bench` times: a controller on the in-memory cluster with a watcher
//! on the policy file; each swap a new module (the default policy with another custom section),
//! so each compiles, is checked against the contract and self-tested, as a real new policy.

use std::time::Duration;

use cubepod_policy_host::runtime::Compile;
use cubepod_tests::bench::swap;

const SWAPS: usize = 15;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // `CUBEPOD_SWAP_COMPILE=optimised`: Cranelift alone, as before the tiered compile, in
    // the same build.
    let (compile, label) = match std::env::var("CUBEPOD_SWAP_COMPILE").as_deref() {
        Ok("optimised") => (Compile::Optimised, "Cranelift alone"),
        _ => (Compile::Tiered, "tiered, Winch first"),
    };
    let swaps = runtime
        .block_on(swap::run(SWAPS, compile))
        .unwrap_or_else(|e| panic!("the swap bench failed: {e:#}"));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let optimised: Vec<Duration> = swaps.iter().filter_map(|s| s.optimised).collect();
    let optimised = (!optimised.is_empty())
        .then_some(("file change to its optimised build serving", optimised));
    for (what, mut samples) in [
        (
            "file change to the new module serving",
            swaps.iter().map(|s| s.serving).collect::<Vec<_>>(),
        ),
        (
            "file change to its first decision",
            swaps.iter().map(|s| s.decided).collect(),
        ),
        (
            "of that, its compile",
            swaps.iter().map(|s| s.compile).collect(),
        ),
        (
            "of that, its check (contract, pre-instantiation, describe)",
            swaps.iter().map(|s| s.check).collect(),
        ),
        (
            "of that, its self-test",
            swaps.iter().map(|s| s.self_test).collect(),
        ),
    ]
    .into_iter()
    .chain(optimised)
    {
        samples.sort();
        println!(
            "hot swap ({label}), {what}, {SWAPS} swaps of the default policy: \
             p50 {:.1} ms, min {:.1} ms, max {:.1} ms",
            ms(samples[samples.len() / 2]),
            ms(samples[0]),
            ms(samples[samples.len() - 1])
        );
    }
}
