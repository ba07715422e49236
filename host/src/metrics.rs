//! Prometheus metrics, all `cubepod_`-prefixed, served on `/metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub active_sandboxes: IntGauge,
    pub paused_sandboxes: IntGauge,
    pub warmpool_ready: IntGaugeVec,
    pub reconciles: IntCounterVec,
    pub reconcile_duration: HistogramVec,
    pub kube_requests: IntCounterVec,
    pub kube_request_duration: HistogramVec,
    pub reaps: IntCounter,
    pub reap_ticks: IntCounter,
    pub reap_tick_duration: Histogram,
    pub pool_ticks: IntCounter,
    pub guest_traps: IntCounterVec,
    pub guest_call_duration: HistogramVec,
    pub boundary_refusals: IntCounterVec,
    pub policy_swaps: IntCounterVec,
    pub policy_info: IntGaugeVec,
    pub queue_depth: IntGauge,
}

/// Buckets from 100 µs to 10 s: a guest call is microseconds, an API call milliseconds.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        macro_rules! register {
            ($metric:expr) => {{
                let metric = $metric;
                // Names are fixed and distinct, so registering cannot collide.
                registry
                    .register(Box::new(metric.clone()))
                    .expect("metric names are unique");
                metric
            }};
        }
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()),
                labels,
            )
            .expect("valid histogram")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter")
        };
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid gauge");
        Self {
            active_sandboxes: register!(gauge(
                "cubepod_active_sandboxes",
                "Sandboxes whose phase is Running."
            )),
            paused_sandboxes: register!(gauge(
                "cubepod_paused_sandboxes",
                "Sandboxes whose phase is Paused."
            )),
            warmpool_ready: register!(
                IntGaugeVec::new(
                    Opts::new(
                        "cubepod_warmpool_ready",
                        "Ready, unclaimed members per warm pool."
                    ),
                    &["namespace", "pool"],
                )
                .expect("valid gauge")
            ),
            reconciles: register!(counter(
                "cubepod_reconciles_total",
                "Reconciles by kind of object and result.",
                &["kind", "result"]
            )),
            reconcile_duration: register!(histogram(
                "cubepod_reconcile_duration_seconds",
                "Time of one reconcile, API calls included.",
                &["kind", "result"]
            )),
            kube_requests: register!(counter(
                "cubepod_kube_requests_total",
                "Kubernetes API requests by verb, resource and result.",
                &["verb", "resource", "result"]
            )),
            kube_request_duration: register!(histogram(
                "cubepod_kube_request_duration_seconds",
                "Time of one Kubernetes API request.",
                &["verb", "resource"]
            )),
            reaps: register!(
                IntCounter::new(
                    "cubepod_reaps_total",
                    "Sandboxes paused by the idle reaper."
                )
                .expect("valid counter")
            ),
            reap_ticks: register!(
                IntCounter::new("cubepod_reap_ticks_total", "Idle reaper ticks run.")
                    .expect("valid counter")
            ),
            reap_tick_duration: register!(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "cubepod_reap_tick_duration_seconds",
                        "Time of one reaper decision over every sandbox."
                    )
                    .buckets(BUCKETS.to_vec())
                )
                .expect("valid histogram")
            ),
            pool_ticks: register!(
                IntCounter::new("cubepod_warmpool_ticks_total", "Warm-pool ticks run.")
                    .expect("valid counter")
            ),
            guest_traps: register!(counter(
                "cubepod_guest_traps_total",
                "Guest calls that trapped, ran out of time or of memory.",
                &["export", "reason"]
            )),
            guest_call_duration: register!(histogram(
                "cubepod_guest_call_duration_seconds",
                "Time of one call into the policy component, fresh Store included.",
                &["export"]
            )),
            boundary_refusals: register!(counter(
                "cubepod_boundary_refusals_total",
                "kube-client calls of the guest refused at the boundary, by the rule that refused.",
                &["verb", "resource", "rule"]
            )),
            policy_swaps: register!(counter(
                "cubepod_policy_swaps_total",
                "New policy modules, by result: applied, or the reason of the refusal.",
                &["result"]
            )),
            policy_info: register!(
                IntGaugeVec::new(
                    Opts::new("cubepod_policy_info", "The active policy module (value 1)."),
                    &["name", "version", "digest"],
                )
                .expect("valid gauge")
            ),
            queue_depth: register!(gauge(
                "cubepod_queue_depth",
                "Keys waiting in the work queue."
            )),
            registry,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail on I/O; a bad metric would be a bug caught in tests.
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(%error, "encoding metrics failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
