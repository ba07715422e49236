//! The memory budget of all policy calls in flight (`--calls-memory-budget`), on the real
//! binary against the fake API server: 50 sandboxes of the hostile policy's `memory-fill`
//! case fill their call's memory near its bound at every reconcile (every second), beside
//! sandboxes the policy treats as the default does. The controller's peak RSS stays under the
//! Deployment's memory limit with margin, and every sandbox still reaches Running: the budget
//! delays calls, it does not starve them. And the bound of what the host keeps of the objects
//! policies write (`--max-policy-object-bytes`), against the hostile policy's `inflate` case.

use std::time::{Duration, Instant};

use cubepod_kube::Resource;
use cubepod_tests::apiserver::{DEFAULT_SEED, KubeconfigAuth};
use cubepod_tests::bench::process::memory_of;
use cubepod_tests::convergence::{NS, TOKEN, fake_server, metric_sum, sandbox_manifest, until};
use cubepod_tests::{Controller, hostile_policy, metric};

const PATIENCE: Duration = Duration::from_secs(300);

/// Sandboxes of the `memory-fill` case.
const FILLERS: usize = 50;

/// Sandboxes the hostile policy reconciles as the default policy does.
const ORDINARY: usize = 5;

/// The Deployment's memory limit (`deploy/`: 512Mi) less a margin.
const PEAK_RSS_KIB: u64 = 448 << 10;

/// How long the fillers keep reconciling once all run, the RSS watched.
const UNDER_LOAD: Duration = Duration::from_secs(20);

#[test]
fn fifty_sandboxes_filling_their_memory_stay_under_the_deployment_limit_and_converge() {
    let fake = fake_server(Duration::from_millis(50), DEFAULT_SEED);
    let cluster = fake.cluster();
    let names: Vec<String> = (0..FILLERS)
        .map(|i| format!("memory-fill-{i}"))
        .chain((0..ORDINARY).map(|i| format!("ordinary-{i}")))
        .collect();
    for name in &names {
        cluster
            .insert(
                Resource::Sandbox,
                sandbox_manifest(name, serde_json::json!({})),
            )
            .expect("seed a sandbox");
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let controller = Controller::start_with_kubeconfig(
        &kubeconfig,
        &[
            &format!("--policy={}", hostile_policy().display()),
            &format!("--namespaces={NS}"),
        ],
    );
    let pid = controller.child.id();

    let running = |prefix: &str| {
        cluster
            .objects(Resource::Sandbox)
            .iter()
            .filter(|s| {
                s["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
                    && s["status"]["phase"] == "Running"
            })
            .count()
    };
    until("the ordinary sandboxes run", PATIENCE, || {
        running("ordinary-") == ORDINARY
    });
    until("every memory-fill sandbox runs", PATIENCE, || {
        running("memory-fill-") == FILLERS
    });
    // They go on filling their memory every second.
    let until_time = Instant::now() + UNDER_LOAD;
    let mut most_charged = 0.0f64;
    while Instant::now() < until_time {
        let (_, body) = controller.get("/metrics").expect("GET /metrics");
        let charged = metric(&body, "cubepod_calls_memory_charged_bytes", &[]).unwrap_or(0.0);
        most_charged = most_charged.max(charged);
        std::thread::sleep(Duration::from_millis(200));
    }
    let memory = memory_of(pid).expect("the controller's memory");
    let (_, body) = controller.get("/metrics").expect("GET /metrics");
    let refused = metric_sum(&body, "cubepod_guest_traps_total", &[("reason", "memory")]);
    let reconciles = metric_sum(&body, "cubepod_reconciles_total", &[]);
    eprintln!(
        "peak RSS {} MiB (now {} MiB); most charged {:.0} MiB; memory failures {refused}; \
         reconciles {reconciles}",
        memory.hwm_kib >> 10,
        memory.rss_kib >> 10,
        most_charged / (1 << 20) as f64,
    );
    assert!(
        memory.hwm_kib < PEAK_RSS_KIB,
        "the controller's peak RSS was {} MiB, past {} MiB",
        memory.hwm_kib >> 10,
        PEAK_RSS_KIB >> 10
    );
    assert!(
        most_charged <= (256 << 20) as f64,
        "charged {most_charged} bytes, past the default budget"
    );
    assert!(
        running("ordinary-") == ORDINARY && running("memory-fill-") == FILLERS,
        "every sandbox still runs"
    );
}

/// Sandboxes of the hostile policy's `inflate` case.
const INFLATERS: usize = 24;

/// The test's `--max-policy-object-bytes`: less than the inflaters' statuses (40 KiB each) take
/// together, so that the total's bound is met too, not only each sandbox's.
const OBJECT_BOUND: u64 = 512 << 10;

/// What the host keeps of policy-written objects across sandboxes (`--max-policy-object-bytes`,
/// `--max-policy-object-bytes-per-sandbox`): `inflate` sandboxes, each writing within every bound
/// of a call and of its write rate, a NetworkPolicy whose spec digest is 384 KiB and a status of
/// 40 KiB, beside sandboxes the policy treats as the default does. The inflated NetworkPolicy
/// is never written (deferred: past the per-sandbox bound), the statuses past the total are
/// cut, the controller's account stays under its bound throughout, each inflater says why on
/// its status and in an Event, and the ordinary sandboxes run.
#[test]
fn inflating_sandboxes_are_held_to_the_object_bound_and_the_others_run() {
    let fake = fake_server(Duration::from_millis(50), DEFAULT_SEED);
    let cluster = fake.cluster();
    let names: Vec<String> = (0..INFLATERS)
        .map(|i| format!("inflate-{i}"))
        .chain((0..ORDINARY).map(|i| format!("ordinary-{i}")))
        .collect();
    for name in &names {
        cluster
            .insert(
                Resource::Sandbox,
                sandbox_manifest(name, serde_json::json!({})),
            )
            .expect("seed a sandbox");
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let controller = Controller::start_with_kubeconfig(
        &kubeconfig,
        &[
            &format!("--policy={}", hostile_policy().display()),
            &format!("--namespaces={NS}"),
            &format!("--max-policy-object-bytes={OBJECT_BOUND}"),
        ],
    );
    let sandboxes = || cluster.objects(Resource::Sandbox);
    let bounded = |s: &serde_json::Value| {
        s["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["type"] == "PolicyObjectsBounded"
                    && c["status"] == "True"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("--max-policy-object-bytes"))
            })
        })
    };
    let named = |prefix: &str| {
        sandboxes()
            .into_iter()
            .filter(|s| {
                s["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .collect::<Vec<_>>()
    };
    let most_charged = std::cell::Cell::new(0.0f64);
    let watch_charge = || {
        if let Ok((_, body)) = controller.get("/metrics") {
            let charged =
                metric(&body, "cubepod_policy_object_bytes", &[("part", "charged")]).unwrap_or(0.0);
            most_charged.set(most_charged.get().max(charged));
        }
    };
    until("the ordinary sandboxes run", PATIENCE, || {
        watch_charge();
        named("ordinary-")
            .iter()
            .filter(|s| s["status"]["phase"] == "Running")
            .count()
            == ORDINARY
    });
    until(
        "every inflating sandbox says it was held back",
        PATIENCE,
        || {
            watch_charge();
            named("inflate-").iter().filter(|s| bounded(s)).count() == INFLATERS
        },
    );
    // They go on asking every 2 seconds.
    let until_time = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until_time {
        watch_charge();
        std::thread::sleep(Duration::from_millis(250));
    }
    let (_, body) = controller.get("/metrics").expect("GET /metrics");
    let charged = metric(&body, "cubepod_policy_object_bytes", &[("part", "charged")]);
    let held_back = metric_sum(&body, "cubepod_policy_objects_bounded_total", &[]);
    eprintln!(
        "charged {charged:?} bytes (most {:.0}) of {OBJECT_BOUND}; held back {held_back}",
        most_charged.get()
    );
    assert!(charged.is_some(), "the charge is exposed");
    assert!(
        most_charged.get() <= OBJECT_BOUND as f64,
        "the controller held {} bytes of policy-written objects, past its bound of {OBJECT_BOUND}",
        most_charged.get()
    );
    assert!(held_back > 0.0, "what was held back is counted");
    // The inflated NetworkPolicies were never written: no object carries a digest that long.
    let longest = cluster
        .objects(Resource::NetworkPolicy)
        .iter()
        .filter_map(|p| p["metadata"]["annotations"]["cubepod.io/spec-hash"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        longest < 1024,
        "a spec digest of {longest} bytes was written"
    );
    // Each inflater is told once by an Event naming the bound and its flag.
    let events = cluster.objects(Resource::Event);
    let told = events
        .iter()
        .filter(|e| {
            e["reason"] == "PolicyObjectsBounded"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("--max-policy-object-bytes"))
        })
        .count();
    assert!(told >= INFLATERS, "{told} PolicyObjectsBounded Events");
    assert!(
        named("ordinary-")
            .iter()
            .all(|s| s["status"]["phase"] == "Running" && !bounded(s)),
        "the ordinary sandboxes run, untouched by the bound"
    );
}
