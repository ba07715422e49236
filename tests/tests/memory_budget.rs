//! The memory budget of all policy calls in flight (`--calls-memory-budget`), on the real
//! binary against the fake API server: 50 sandboxes of the hostile policy's `memory-fill`
//! case fill their call's memory near its bound at every reconcile (every second), beside
//! sandboxes the policy treats as the default does. The controller's peak RSS stays under the
//! Deployment's memory limit with margin, and every sandbox still reaches Running: the budget
//! delays calls, it does not starve them.

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
