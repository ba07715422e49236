//! A policy that traps, loops or allocates without bound on some sandboxes fails only their
//! reconciles: the others converge, `/healthz` stays healthy, and every failure is counted. A
//! write outside the allowed namespaces is refused at the boundary and counted.

use std::time::Duration;

use cubepod_tests::{Controller, FAULTY_SEED, faulty_policy, metric, sandbox_traps, seed_file};

const SETTLE: Duration = Duration::from_secs(90);

/// The faulty policy's sandboxes, and one whose write it sends out of the namespace.
const ESCAPE: &str = r#"---
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: escape-a, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0}
"#;

#[test]
fn misbehaving_reconciles_fail_alone_and_the_controller_lives_on() {
    let dir = tempfile::tempdir().unwrap();
    let seed = seed_file(dir.path(), &format!("{FAULTY_SEED}{ESCAPE}"));
    let policy = format!("--policy={}", faulty_policy().display());
    let seed = format!("--seed={}", seed.display());
    let controller = Controller::start(&[
        &policy,
        &seed,
        "--guest-deadline=200ms",
        "--guest-memory-mib=16",
    ]);
    let ready = controller.wait_for("/readyz", SETTLE, |status, _| status == 200);
    assert!(ready.contains("policy: cubepod-faulty"), "{ready}");

    // Each fault is met, counted under its own reason, and retried.
    let body = controller.wait_for("/metrics", SETTLE, |_, body| {
        sandbox_traps(body, "trap") >= 2.0
            && sandbox_traps(body, "timeout") >= 2.0
            && sandbox_traps(body, "memory") >= 2.0
    });
    let refusals = metric(
        &body,
        "cubepod_boundary_refusals_total",
        &[
            ("verb", "create"),
            ("resource", "secrets"),
            ("rule", "namespace"),
        ],
    );
    assert!(
        refusals.unwrap_or(0.0) >= 1.0,
        "no refusal counted:\n{body}"
    );

    // Meanwhile every well-behaved sandbox converged as with the default policy.
    let (running, paused) = cubepod_tests::seeded_running_and_paused();
    controller.wait_for("/metrics", SETTLE, |_, body| {
        metric(body, "cubepod_active_sandboxes", &[]) == Some(running)
            && metric(body, "cubepod_paused_sandboxes", &[]) == Some(paused)
    });
    for _ in 0..5 {
        let (status, body) = controller.get("/healthz").unwrap();
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        std::thread::sleep(Duration::from_millis(200));
    }
}
