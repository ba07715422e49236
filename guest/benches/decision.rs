//! One reconcile decision, natively: `cargo bench -p cubepod-guest --bench decision`.
//! Prints p50 and p99 over many runs of the two hot decisions (a converged resync and a new
//! sandbox's creation), each with a fresh recording client.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cubepod_guest::fixtures::{observe, sandbox};
use cubepod_guest::reconcile;
use cubepod_guest::recording::RecordingClient;

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
    let new = sandbox("bench").input();
    measure("native: new sandbox", || {
        let mut client = RecordingClient::default();
        black_box(reconcile::reconcile(&mut client, black_box(&new)).ok());
    });

    let mut converged = sandbox("bench").input();
    let mut client = RecordingClient {
        pod_ip: Some("10.0.0.1".into()),
        ..Default::default()
    };
    if let Ok(out) = reconcile::reconcile(&mut client, &converged) {
        converged.sandbox.status = out.status;
    }
    converged.observed = observe(&client, "bench", true);
    measure("native: converged resync", || {
        let mut client = RecordingClient::default();
        black_box(reconcile::reconcile(&mut client, black_box(&converged)).ok());
    });
}
