//! One reconcile decision, natively: `cargo bench -p cubepod-policy-sdk --bench decision`.
//! Prints p50 and p99 over many runs of the two hot decisions (a converged resync and a new
//! sandbox's creation), each against a null client that accepts every call at no cost, so
//! that the numbers are the policy's own (decision and manifest serialization), not a test
//! double's.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cubepod_policy_sdk::bindings::SandboxPhase;
use cubepod_policy_sdk::recording::NullClient;
use cubepod_policy_sdk::{fixtures, reconcile};

const RUNS: usize = 20_000;

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

fn measure(name: &str, mut run: impl FnMut()) {
    for _ in 0..RUNS / 10 {
        run();
    }
    let samples: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .collect();
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<28} p50 {:>8.2} µs   p99 {:>8.2} µs",
        micros(p50),
        micros(p99)
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // The inputs every decision benchmark uses (`cubepod-bench`'s wasm rows too).
    let (new, converged) = fixtures::new_and_converged("bench").expect("a new sandbox reconciles");
    let mut client = NullClient::default();
    reconcile::reconcile(&mut client, &new).expect("a new sandbox reconciles");
    assert!(client.calls > 0, "a new sandbox makes kube-client calls");
    let mut client = NullClient::default();
    let out =
        reconcile::reconcile(&mut client, &converged).expect("a converged sandbox reconciles");
    assert_eq!(client.calls, 0, "a converged sandbox makes no calls");
    assert_eq!(out.status.phase, SandboxPhase::Running);

    measure("native: new sandbox", || {
        let mut client = NullClient::default();
        black_box(reconcile::reconcile(&mut client, black_box(&new)).ok());
        black_box(client.calls);
    });
    measure("native: converged resync", || {
        let mut client = NullClient::default();
        black_box(reconcile::reconcile(&mut client, black_box(&converged)).ok());
        black_box(client.calls);
    });
}
