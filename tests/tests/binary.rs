//! The real binary, started on an ephemeral port against its embedded cluster.

use std::time::Duration;

use cubepod_policy_host::runtime::DEFAULT_POLICY;
use cubepod_tests::bench::report::TARGET_COMPONENT_KIB;
use cubepod_tests::{Controller, metric, seeded_running_and_paused};

const SETTLE: Duration = Duration::from_secs(60);

#[test]
fn seeded_cluster_converges_and_metrics_say_so() {
    let controller = Controller::start(&[]);
    let ready = controller.wait_for("/readyz", SETTLE, |status, _| status == 200);
    assert!(ready.contains("policy: cubepod-default"), "{ready}");
    assert!(ready.contains("cache: synced"), "{ready}");

    // Seeded: dev-alice, its fork and workshop-42 run, dev-bob is paused, ci-runner-7 is idle
    // past its timeout and gets reaped, the pools fill to 3 and 2 running members.
    let (running, paused) = seeded_running_and_paused();
    let metrics = controller.wait_for("/metrics", SETTLE, |_, body| {
        metric(body, "cubepod_active_sandboxes", &[]) == Some(running)
            && metric(body, "cubepod_paused_sandboxes", &[]) == Some(paused)
            && metric(
                body,
                "cubepod_warmpool_ready",
                &[("namespace", "cubepod-workloads"), ("pool", "python-pool")],
            ) == Some(3.0)
    });
    assert!(metric(&metrics, "cubepod_reaps_total", &[]).unwrap_or(0.0) >= 1.0);
    assert!(
        metric(
            &metrics,
            "cubepod_reconciles_total",
            &[("kind", "sandbox"), ("result", "ok")]
        )
        .unwrap_or(0.0)
            > 0.0
    );
    let pvc_creates = metric(
        &metrics,
        "cubepod_kube_requests_total",
        &[
            ("verb", "create"),
            ("resource", "persistentvolumeclaims"),
            ("result", "ok"),
        ],
    );
    // Two PVCs for each of the 10 sandboxes that ever started (5 pool members, 3 running, the
    // reaped one, and dev-bob, paused but with its volumes), none twice.
    assert_eq!(pvc_creates, Some(20.0));
    assert_eq!(metric(&metrics, "cubepod_guest_traps_total", &[]), None);

    let (status, body) = controller.get("/healthz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, _) = controller.get("/nope").unwrap();
    assert_eq!(status, 404);
}

#[test]
fn sigterm_exits_zero_promptly() {
    let mut controller = Controller::start(&[]);
    controller.wait_for("/readyz", SETTLE, |status, _| status == 200);
    let status = controller
        .terminate(Duration::from_secs(15))
        .expect("exited after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}

/// A host that caps the address space (`ulimit -v`) below what the guarded instance pool
/// reserves (about 4 GiB per memory slot): the default refuses to start and names the flag that
/// fits; with it, the controller runs its policy as before.
#[test]
fn under_a_capped_address_space_compact_guest_memory_runs_and_guarded_names_it() {
    const CAP: u64 = 16 << 30;
    let mut guarded = Controller::start_capped(CAP, &[]);
    let status = guarded
        .wait_exit(Duration::from_secs(30))
        .expect("the guarded pool does not fit under the cap: the controller exits");
    assert!(!status.success(), "exit status {status:?}");
    let said = guarded.stderr();
    assert!(
        said.contains("cannot set up the wasm engine")
            && said.contains("--guest-address-space=compact"),
        "{said}"
    );

    let mut compact = Controller::start_capped(CAP, &["--guest-address-space=compact"]);
    let (running, paused) = seeded_running_and_paused();
    let metrics = compact.wait_for("/metrics", SETTLE, |status, body| {
        status == 200
            && metric(body, "cubepod_active_sandboxes", &[]) == Some(running)
            && metric(body, "cubepod_paused_sandboxes", &[]) == Some(paused)
    });
    assert_eq!(metric(&metrics, "cubepod_guest_traps_total", &[]), None);
    let status = compact
        .terminate(Duration::from_secs(15))
        .expect("exited after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}

/// The component the binary embeds, and ships in the policy ConfigMap, is compiled at every
/// load and hot swap: it stays under its size target. Checked here, on the very bytes embedded,
/// so that growth shows in the test run of the change that causes it (an LTO-inlined allocator
/// once took it from 263 to 321 KiB unnoticed).
#[test]
fn the_embedded_policy_component_is_under_its_size_target() {
    let kib = DEFAULT_POLICY.len() as f64 / 1024.0;
    assert!(
        kib < TARGET_COMPONENT_KIB,
        "the embedded policy component is {kib:.1} KiB ({} bytes), past the {TARGET_COMPONENT_KIB} \
         KiB target",
        DEFAULT_POLICY.len()
    );
}

/// The conformance self-test reconciles scratch objects (`conformance-gone`, `conformance-pool`)
/// through the same core as the cluster's: at INFO the start's log names only the cluster's.
#[test]
fn the_start_log_at_info_names_no_self_test_object() {
    let controller = Controller::start(&[]);
    controller.wait_for_log(SETTLE, |fields| fields["conformance"].as_u64() > Some(0));
    controller.wait_for_log(SETTLE, |fields| {
        fields.to_string().contains("cubepod-workloads/dev-alice") || fields["name"] == "dev-alice"
    });
    let named: Vec<String> = controller
        .logs()
        .iter()
        .filter(|line| line["level"] == "INFO")
        .map(|line| line["fields"].to_string())
        .filter(|fields| fields.contains("conformance-"))
        .collect();
    assert!(named.is_empty(), "{named:#?}");
}
