//! The controller-runtime and client-go metric families, from the real binary against the fake
//! API server: a known workload (one sandbox, one refused finalizer patch on the way), then
//! `/metrics` parsed as Prometheus text and held against what happened: reconciles per result,
//! the queue's adds and its depth back to 0, and every HTTP request per code and method as the
//! fake API server logged it. `/metrics` is scraped over HTTPS with a token: the reviews of the
//! token and of its access are requests of the controller's too, counted alike.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cubepod_kube::Resource;
use cubepod_kube::review::{SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS};
use cubepod_tests::Controller;
use cubepod_tests::apiserver::{DEFAULT_SEED, FaultAction, FaultRule, KubeconfigAuth};
use cubepod_tests::convergence::{TOKEN, create_sandbox, fake_server, running, until};
use hyper::Method;
use prometheus_parse::{Sample, Scrape, Value};

const PATIENCE: Duration = Duration::from_secs(60);
const CONTROLLERS: [&str; 2] = ["sandbox", "podwarmpool"];

/// controller-runtime's buckets of `controller_runtime_reconcile_time_seconds`.
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text format")
}

fn has(sample: &Sample, labels: &[(&str, &str)]) -> bool {
    labels.iter().all(|(k, v)| sample.labels.get(k) == Some(*v))
}

/// The sum of the samples of `name` carrying these labels (0 when none).
fn sum(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && has(s, labels))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

/// The one sample of `name` with exactly these labels.
fn one<'a>(scrape: &'a Scrape, name: &str, labels: &[(&str, &str)]) -> &'a Sample {
    let found: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && has(s, labels) && s.labels.len() == labels.len())
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0]
}

fn buckets(sample: &Sample) -> Vec<f64> {
    match &sample.value {
        Value::Histogram(counts) => counts
            .iter()
            .map(|c| c.less_than)
            .filter(|b| b.is_finite())
            .collect(),
        other => panic!("{} is not a histogram: {other:?}", sample.metric),
    }
}

#[test]
fn controller_runtime_families_count_what_the_loop_did() {
    let fake = fake_server(Duration::from_millis(50), DEFAULT_SEED);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    // The first finalizer patch is refused: that reconcile fails and the key is retried.
    fake.faults().add(
        FaultRule::new(FaultAction::status(403, "Forbidden"))
            .method(Method::PATCH)
            .resource(Resource::Sandbox)
            .times(1),
    );
    let controller = Controller::start_with_kubeconfig(&kubeconfig, &["--concurrency=3"]);
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    let cluster = fake.cluster();
    create_sandbox(&cluster, "a");
    until("a runs", PATIENCE, || running(&cluster) == 1);

    // Quiet: nothing queued, nothing in progress, every request the controller made counted.
    let host = fake.addr().to_string();
    let deadline = Instant::now() + PATIENCE;
    let (scrape, logged) = loop {
        let (_, body) = controller.get("/metrics").expect("/metrics");
        let scrape = parse(&body);
        let mut logged: BTreeMap<(String, String), f64> = BTreeMap::new();
        for request in fake.requests() {
            let code = request
                .status
                .map_or_else(|| "<error>".to_string(), |c| c.to_string());
            *logged
                .entry((code, request.method.to_string()))
                .or_default() += 1.0;
        }
        let mut counted: BTreeMap<(String, String), f64> = BTreeMap::new();
        for sample in scrape
            .samples
            .iter()
            .filter(|s| s.metric == "rest_client_requests_total")
        {
            assert_eq!(sample.labels.get("host"), Some(host.as_str()), "{sample:?}");
            let key = (
                sample.labels.get("code").unwrap_or_default().to_string(),
                sample.labels.get("method").unwrap_or_default().to_string(),
            );
            if let Value::Counter(v) = sample.value {
                *counted.entry(key).or_default() += v;
            }
        }
        let quiet = CONTROLLERS.iter().all(|c| {
            sum(&scrape, "workqueue_depth", &[("name", c)]) == 0.0
                && sum(
                    &scrape,
                    "controller_runtime_active_workers",
                    &[("controller", c)],
                ) == 0.0
        }) && sum(&scrape, "workqueue_adds_total", &[("name", "sandbox")])
            == sum(
                &scrape,
                "workqueue_work_duration_seconds_count",
                &[("name", "sandbox")],
            );
        if quiet && counted == logged {
            break (scrape, logged);
        }
        assert!(
            Instant::now() < deadline,
            "never quiet with the request log matched:\ncounted {counted:?}\nlogged  {logged:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // The refused patch: one 403 PATCH, counted by client-go's family and as one error.
    assert_eq!(
        logged.get(&("403".to_string(), "PATCH".to_string())),
        Some(&1.0)
    );
    assert!(logged.contains_key(&("201".to_string(), "POST".to_string())));
    // The scrapes' reviews, once each however many scrapes (kept for a minute and more).
    for review in [TOKEN_REVIEWS, SUBJECT_ACCESS_REVIEWS] {
        let asked = fake.requests().iter().filter(|r| r.path == review).count();
        assert_eq!(asked, 1, "{review}");
    }
    assert!(logged.contains_key(&("200".to_string(), "GET".to_string())));
    let total = |c: &str, r: &str| {
        sum(
            &scrape,
            "controller_runtime_reconcile_total",
            &[("controller", c), ("result", r)],
        )
    };
    assert_eq!(total("sandbox", "error"), 1.0);
    assert_eq!(
        sum(
            &scrape,
            "controller_runtime_reconcile_errors_total",
            &[("controller", "sandbox")]
        ),
        1.0
    );
    assert!(total("sandbox", "success") >= 1.0);
    assert_eq!(total("sandbox", "requeue"), 0.0);
    // Every result of every controller is exposed, at 0 when it never happened.
    for c in CONTROLLERS {
        for r in ["success", "error", "requeue", "requeue_after"] {
            one(
                &scrape,
                "controller_runtime_reconcile_total",
                &[("controller", c), ("result", r)],
            );
        }
        assert_eq!(
            one(
                &scrape,
                "controller_runtime_max_concurrent_reconciles",
                &[("controller", c)]
            )
            .value,
            Value::Gauge(3.0)
        );
        one(
            &scrape,
            "workqueue_depth",
            &[("name", c), ("controller", c), ("priority", "")],
        );
        for family in [
            "workqueue_adds_total",
            "workqueue_retries_total",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
        ] {
            one(&scrape, family, &[("name", c), ("controller", c)]);
        }
    }
    assert_eq!(
        total("podwarmpool", "success") + total("podwarmpool", "error"),
        0.0
    );

    // One reconcile per key taken off the queue, each timed once.
    let reconciles: f64 = ["success", "error", "requeue", "requeue_after"]
        .iter()
        .map(|r| total("sandbox", r))
        .sum();
    assert_eq!(
        sum(&scrape, "cubepod_reconciles_total", &[("kind", "sandbox")]),
        reconciles,
        "the same loop counts both families"
    );
    assert_eq!(
        sum(
            &scrape,
            "controller_runtime_reconcile_time_seconds_count",
            &[("controller", "sandbox")]
        ),
        reconciles
    );
    for family in [
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds_count",
        "workqueue_work_duration_seconds_count",
    ] {
        assert_eq!(
            sum(&scrape, family, &[("name", "sandbox")]),
            reconciles,
            "{family}"
        );
    }
    // The failed key was retried with backoff; a requeue-after would count too.
    assert!(
        sum(&scrape, "workqueue_retries_total", &[("name", "sandbox")])
            >= 1.0 + total("sandbox", "requeue_after")
    );
    assert_eq!(
        sum(
            &scrape,
            "workqueue_unfinished_work_seconds",
            &[("name", "sandbox")]
        ),
        0.0
    );

    // Buckets as controller-runtime defines them.
    let time = one(
        &scrape,
        "controller_runtime_reconcile_time_seconds",
        &[("controller", "sandbox")],
    );
    assert_eq!(buckets(time), RECONCILE_TIME_BUCKETS);
    let queue = one(
        &scrape,
        "workqueue_queue_duration_seconds",
        &[("name", "sandbox"), ("controller", "sandbox")],
    );
    let expected: Vec<f64> = (0..12).map(|i| 10e-9 * 10f64.powi(i)).collect();
    let got = buckets(queue);
    assert_eq!(got.len(), expected.len(), "{got:?}");
    for (g, e) in got.iter().zip(&expected) {
        assert!((g / e - 1.0).abs() < 1e-9, "{got:?} vs {expected:?}");
    }
}
