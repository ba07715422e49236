//! Prometheus metrics served on `/metrics`: ours, `cubepod_`-prefixed, and beside them the
//! families every controller-runtime operator exposes (`controller_runtime_*`, `workqueue_*`,
//! client-go's `rest_client_requests_total`), with their names, labels and buckets, so that
//! the dashboards and alerts written for those work here too.

use cubepod_kube::rest::RestClientRequests;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The controller's Prometheus metrics, in their own registry.
pub struct Metrics {
    registry: Registry,
    pub(crate) active_sandboxes: IntGauge,
    pub(crate) paused_sandboxes: IntGauge,
    pub(crate) warmpool_ready: IntGaugeVec,
    /// Reconciles, by `kind` of object and `result`.
    pub reconciles: IntCounterVec,
    /// The time of one reconcile, API calls included, by `kind` and `result`.
    pub reconcile_duration: HistogramVec,
    pub(crate) kube_requests: IntCounterVec,
    pub(crate) kube_request_duration: HistogramVec,
    pub(crate) reaps: IntCounter,
    /// Sandboxes shut down at `spec.shutdownTime`, by `action` (`delete`, `pause`).
    pub(crate) shutdowns: IntCounterVec,
    /// From a Sandbox's creation to the status write that first reports it Ready, by
    /// `launch` (`warm`: a claim from a pool, `cold`: started on its own).
    pub(crate) sandbox_startup: HistogramVec,
    /// From the controller first seeing a claim to the write that adopted its pool member.
    pub(crate) sandbox_claim: Histogram,
    pub(crate) reap_ticks: IntCounter,
    pub(crate) reap_tick_duration: Histogram,
    pub(crate) pool_ticks: IntCounter,
    /// Policy calls that trapped or ran out of time or memory, by `export` and `reason`.
    pub guest_traps: IntCounterVec,
    pub(crate) guest_call_duration: HistogramVec,
    /// The policy's kube-client calls refused at the boundary, by `verb`, `resource` and `rule`.
    pub boundary_refusals: IntCounterVec,
    /// Events recorded, by `type` and what was written: a new Event, a repeat counted on an
    /// earlier one, one past its object's rate, or a write that failed.
    pub events: IntCounterVec,
    /// The policy's writes not sent because their Sandbox was past its write rate, by
    /// `resource`.
    pub policy_writes_deferred: IntCounterVec,
    /// A policy's writes and statuses the controller did not keep whole because it would hold
    /// past its bound of what policies wrote, by `what` (`write`, `status`).
    pub policy_objects_bounded: IntCounterVec,
    /// What the cache holds of what policies wrote, by `part`: `charged` (past each sandbox's
    /// allowance: what `--max-policy-object-bytes` bounds) and `held` (all of it).
    pub(crate) policy_object_bytes: IntGaugeVec,
    /// New policy modules, by `result`: applied, or the reason of the refusal.
    pub policy_swaps: IntCounterVec,
    /// How long each step of a module's admission took, by `step`: `compile`, `check` (the
    /// contract, the pre-instantiation, `describe`) and `self_test`.
    pub policy_admission_duration: HistogramVec,
    /// Reads of the policy file by `run --policy`, by `trigger` (`event`: a file event in its
    /// folder, `poll`: the poll interval).
    pub(crate) policy_file_checks: IntCounterVec,
    /// What a rollout's shadowed candidate did differently from the stable module, by
    /// `export` and `kind`.
    pub(crate) policy_shadow_differences: IntCounterVec,
    pub(crate) policy_info: IntGaugeVec,
    pub(crate) queue_depth: IntGauge,
    /// What the policy calls in flight hold of `--calls-memory-budget`, in bytes.
    pub(crate) calls_memory_charged: IntGauge,
    pub(crate) controller: ControllerMetrics,
    pub(crate) workqueue: WorkqueueMetrics,
    pub(crate) rest_client_requests: RestClientRequests,
    /// client-go's `leader_election_master_status{name}`: 1 while this replica holds the Lease
    /// `name`, 0 while it follows; only with `--leader-elect`.
    pub(crate) leader_election_master_status: IntGaugeVec,
}

/// controller-runtime's `pkg/internal/controller/metrics`, by controller name (`sandbox`,
/// `podwarmpool`: the lowercased kind, as controller-runtime names a controller).
pub(crate) struct ControllerMetrics {
    /// `result`: `success`, `error`, `requeue` or `requeue_after`.
    pub(crate) reconcile_total: IntCounterVec,
    pub(crate) reconcile_errors: IntCounterVec,
    pub(crate) reconcile_time: HistogramVec,
    pub(crate) max_concurrent_reconciles: IntGaugeVec,
    pub(crate) active_workers: IntGaugeVec,
}

/// controller-runtime's `pkg/metrics/workqueue.go`: `name` and `controller` are both the
/// controller's name; `depth` has a `priority` label, empty without a priority queue.
pub(crate) struct WorkqueueMetrics {
    pub(crate) depth: IntGaugeVec,
    pub(crate) adds: IntCounterVec,
    pub(crate) queue_duration: HistogramVec,
    pub(crate) work_duration: HistogramVec,
    pub(crate) unfinished_work: GaugeVec,
    pub(crate) longest_running_processor: GaugeVec,
    pub(crate) retries: IntCounterVec,
}

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
const RECONCILE_TIME_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// The workqueue histograms' buckets: `prometheus.ExponentialBuckets(10e-9, 10, 12)`, 10 ns
/// to 1000 s.
fn workqueue_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(10e-9, 10.0, 12).expect("valid buckets")
}

/// Start-up buckets, 250 ms to 10 min: a warm claim is a second or two, a cold start pulls an
/// image and boots a VM, minutes in a bad case.
/// A claim is served in milliseconds, with no Pod to start; a claim that waits for a member
/// in a burst, seconds.
const CLAIM_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

const STARTUP_BUCKETS: &[f64] = &[
    0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0,
    300.0, 600.0,
];

/// Buckets from 100 µs to 10 s: a guest call is microseconds, an API call milliseconds.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

impl Metrics {
    /// Every metric, registered in a new registry.
    pub fn new() -> Self {
        let metrics = Self::unset();
        // Every label value known in advance has its series from the start, at zero: a rate
        // over them is defined before the first shutdown or start, and the families are there
        // for dashboards to find.
        for action in ["delete", "pause"] {
            metrics.shutdowns.with_label_values(&[action]);
        }
        for what in ["write", "status"] {
            metrics.policy_objects_bounded.with_label_values(&[what]);
        }
        for launch in ["warm", "cold"] {
            metrics.sandbox_startup.with_label_values(&[launch]);
        }
        metrics
    }

    fn unset() -> Self {
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
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge")
        };
        let float_gauges = |name: &str, help: &str, labels: &[&str]| {
            GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge")
        };
        let histogram_with = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .expect("valid histogram")
        };
        let queue = &["name", "controller"];
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
            shutdowns: register!(counter(
                "cubepod_sandbox_shutdowns_total",
                "Sandboxes shut down by the reaper at spec.shutdownTime, by action.",
                &["action"]
            )),
            sandbox_startup: register!(histogram_with(
                "cubepod_sandbox_startup_seconds",
                "From a Sandbox's creation to the status that first reports it Ready, by launch \
                 (warm: a claim from a pool, cold: started on its own).",
                &["launch"],
                STARTUP_BUCKETS.to_vec()
            )),
            sandbox_claim: register!(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "cubepod_sandbox_claim_seconds",
                        "From the controller first seeing a claim to the adoption of its pool \
                         member."
                    )
                    .buckets(CLAIM_BUCKETS.to_vec())
                )
                .expect("valid histogram")
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
            events: register!(counter(
                "cubepod_events_total",
                "Events recorded on Sandboxes and PodWarmPools, by type and result: created, \
                 aggregated (a repeat counted on an earlier Event), rate_limited, failed, dropped (the \
                 queue of Events to write was full).",
                &["type", "result"]
            )),
            policy_objects_bounded: register!(counter(
                "cubepod_policy_objects_bounded_total",
                "A policy's writes deferred and statuses cut because the controller would hold \
                 more of what policies wrote than its bound (--max-policy-object-bytes, \
                 --max-policy-object-bytes-per-sandbox), by what: write, status.",
                &["what"]
            )),
            policy_object_bytes: register!(
                IntGaugeVec::new(
                    Opts::new(
                        "cubepod_policy_object_bytes",
                        "Bytes the controller's cache holds of what policies wrote (children's \
                         records, statuses), by part: charged (past each sandbox's allowance, \
                         bounded by --max-policy-object-bytes) and held (all of it)."
                    ),
                    &["part"],
                )
                .expect("valid gauge")
            ),
            policy_writes_deferred: register!(counter(
                "cubepod_policy_writes_deferred_total",
                "A policy's kube-client writes not sent because their Sandbox was past its \
                 write rate (--max-write-bytes-per-minute), by resource: each is retried when \
                 the rate allows.",
                &["resource"]
            )),
            policy_swaps: register!(counter(
                "cubepod_policy_swaps_total",
                "New policy modules, by result: applied, or the reason of the refusal.",
                &["result"]
            )),
            policy_admission_duration: register!(histogram(
                "cubepod_policy_admission_duration_seconds",
                "How long each step of an admitted policy module's admission took, by step: \
                 compile (or the read of its compiled code from --cache-dir), check (the \
                 contract, the pre-instantiation, describe) and self_test.",
                &["step"]
            )),
            policy_shadow_differences: register!(counter(
                "cubepod_policy_shadow_differences_total",
                "What a rollout's shadowed candidate did differently from the stable module on \
                 the same input, by export and kind (calls, status, events, claim, requeue, \
                 error, trap).",
                &["export", "kind"]
            )),
            policy_file_checks: register!(counter(
                "cubepod_policy_file_checks_total",
                "Reads of the policy file for a new module, by trigger: a file event in its \
                 folder, or the poll interval.",
                &["trigger"]
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
            calls_memory_charged: register!(gauge(
                "cubepod_calls_memory_charged_bytes",
                "Bytes the policy calls in flight hold of --calls-memory-budget."
            )),
            controller: ControllerMetrics {
                reconcile_total: register!(counter(
                    "controller_runtime_reconcile_total",
                    "Total number of reconciliations per controller",
                    &["controller", "result"]
                )),
                reconcile_errors: register!(counter(
                    "controller_runtime_reconcile_errors_total",
                    "Total number of reconciliation errors per controller",
                    &["controller"]
                )),
                reconcile_time: register!(histogram_with(
                    "controller_runtime_reconcile_time_seconds",
                    "Length of time per reconciliation per controller",
                    &["controller"],
                    RECONCILE_TIME_BUCKETS.to_vec()
                )),
                max_concurrent_reconciles: register!(gauges(
                    "controller_runtime_max_concurrent_reconciles",
                    "Maximum number of concurrent reconciles per controller",
                    &["controller"]
                )),
                active_workers: register!(gauges(
                    "controller_runtime_active_workers",
                    "Number of currently used workers per controller",
                    &["controller"]
                )),
            },
            workqueue: WorkqueueMetrics {
                depth: register!(gauges(
                    "workqueue_depth",
                    "Current depth of workqueue by workqueue and priority",
                    &["name", "controller", "priority"]
                )),
                adds: register!(counter(
                    "workqueue_adds_total",
                    "Total number of adds handled by workqueue",
                    queue
                )),
                queue_duration: register!(histogram_with(
                    "workqueue_queue_duration_seconds",
                    "How long in seconds an item stays in workqueue before being requested",
                    queue,
                    workqueue_buckets()
                )),
                work_duration: register!(histogram_with(
                    "workqueue_work_duration_seconds",
                    "How long in seconds processing an item from workqueue takes.",
                    queue,
                    workqueue_buckets()
                )),
                unfinished_work: register!(float_gauges(
                    "workqueue_unfinished_work_seconds",
                    "How many seconds of work has been done that is in progress and hasn't been \
                     observed by work_duration. Large values indicate stuck threads. One can \
                     deduce the number of stuck threads by observing the rate at which this \
                     increases.",
                    queue
                )),
                longest_running_processor: register!(float_gauges(
                    "workqueue_longest_running_processor_seconds",
                    "How many seconds has the longest running processor for workqueue been \
                     running.",
                    queue
                )),
                retries: register!(counter(
                    "workqueue_retries_total",
                    "Total number of retries handled by workqueue",
                    queue
                )),
            },
            rest_client_requests: RestClientRequests::new(register!(counter(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                &["code", "method", "host"]
            ))),
            leader_election_master_status: register!(gauges(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
                 backup, 1 indicates master. 'name' is the string used to identify the lease. \
                 Please make sure to group by name.",
                &["name"]
            )),
            registry,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> String {
        render(&self.registry)
    }

    /// The sandbox router's families, registered beside the controller's: `run` with the
    /// embedded cluster serves both from one `/metrics`. Once per `Metrics`.
    pub(crate) fn register_router(&self) -> RouterMetrics {
        RouterMetrics::register(self.registry.clone())
    }
}

/// The Prometheus text exposition of every metric of `registry`.
pub(crate) fn render(registry: &Registry) -> String {
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail on I/O; a bad metric would be a bug caught in tests.
    if let Err(error) = TextEncoder::new().encode(&registry.gather(), &mut out) {
        tracing::error!(%error, "encoding metrics failed");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The sandbox router's metrics (`cubepod_router_*`), and the registry they are served from.
#[derive(Clone)]
pub struct RouterMetrics {
    pub(crate) registry: Registry,
    /// Requests naming a sandbox (or naming one badly), by the `code` answered.
    pub(crate) requests: IntCounterVec,
    /// Requests waiting now for their sandbox to wake or start.
    pub(crate) held: IntGauge,
    /// From a wake's first request to its sandbox's Pod Ready with an IP.
    pub(crate) wake_seconds: Histogram,
    /// `cubepod.io/last-activity` writes from traffic, by `result`.
    pub(crate) activity_writes: IntCounterVec,
    /// Requests the sandbox's Pod did not answer, by `reason`.
    pub(crate) upstream_errors: IntCounterVec,
}

/// Wake buckets, 50 ms to 2 min: a Pod resumed from its snapshot is Ready in a second or two, a
/// cold start pulls an image.
const WAKE_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0,
];

impl RouterMetrics {
    /// The router's families registered in `registry`; the label values known in advance at
    /// zero, so that a rate over them is defined before the first.
    pub fn register(registry: Registry) -> Self {
        fn register<M: prometheus::core::Collector + Clone + 'static>(
            registry: &Registry,
            metric: M,
        ) -> M {
            // Names are fixed and distinct, so registering cannot collide.
            registry
                .register(Box::new(metric.clone()))
                .expect("metric names are unique");
            metric
        }
        let counter = |name: &str, help: &str, label: &str| {
            register(
                &registry,
                IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid counter"),
            )
        };
        let metrics = Self {
            requests: counter(
                "cubepod_router_requests_total",
                "Requests to the sandbox router that named a sandbox (by host name or \
                X-Sandbox-* headers) or named one badly, by the HTTP status code answered: the \
                sandbox's own, or the router's (400 malformed, 401/403 access, 404 no such \
                sandbox, 409 paused by its spec, 502/504 its Pod did not answer, 503 still \
                waking).",
                "code",
            ),
            held: register(
                &registry,
                IntGauge::new(
                    "cubepod_router_held_requests",
                    "Requests held now until their sandbox wakes or starts, or until the router's cache \
                    has loaded (each at most --wake-timeout, at most --max-held-requests per \
                    sandbox, and as many in all while the cache loads).",
                )
                .expect("valid gauge"),
            ),
            wake_seconds: register(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "cubepod_router_wake_seconds",
                        "From the first request to a sandbox paused for idleness to its Pod \
                        Ready with an IP, for each wake this router made.",
                    )
                    .buckets(WAKE_BUCKETS.to_vec()),
                )
                .expect("valid histogram"),
            ),
            activity_writes: counter(
                "cubepod_router_activity_writes_total",
                "Writes of a sandbox's cubepod.io/last-activity from its traffic (at most one \
                per sandbox per --activity-interval), by result: written, conflict (another \
                writer was first; nothing lost), failed.",
                "result",
            ),
            upstream_errors: counter(
                "cubepod_router_upstream_errors_total",
                "Requests the sandbox's Pod did not answer, by reason: refused (the connection \
                was refused or dropped, answered 502) or timeout (no answer within \
                --upstream-timeout, answered 504).",
                "reason",
            ),
            registry,
        };
        for result in ["written", "conflict", "failed"] {
            metrics.activity_writes.with_label_values(&[result]);
        }
        for reason in ["refused", "timeout"] {
            metrics.upstream_errors.with_label_values(&[reason]);
        }
        metrics
    }

    /// The Prometheus text exposition of every metric of its registry.
    pub(crate) fn render(&self) -> String {
        render(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family's help is one sentence as a person reads it in `/metrics`: no run of
    /// spaces, which a string literal broken across lines without `\` leaves.
    #[test]
    fn every_help_text_reads_as_one_sentence() {
        let metrics = Metrics::new();
        let router = metrics.register_router();
        router.requests.with_label_values(&["200"]).inc();
        let families = metrics.registry.gather();
        assert!(families.len() > 10, "{} families gathered", families.len());
        for family in &families {
            let help = family.help();
            assert!(
                !help.contains("  ") && !help.trim().is_empty(),
                "{}'s help: {help:?}",
                family.name()
            );
        }
    }
}
