//! Traffic recorded as activity: `cubepod.io/last-activity` written at most once per sandbox
//! per `--activity-interval`, however many requests pass and however many replicas route them.
//! A replica skips the write when the annotation it caches is already within the interval
//! (another replica wrote it), and writes conditionally on the version it read, so that two
//! replicas reading the same version make one write, not two.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use serde_json::json;

use crate::controller::cache::Cache;
use cubepod_kube::{ApiErrorKind, Cluster, Resource};
use cubepod_policy_host::model::sandbox::LAST_ACTIVITY;
use cubepod_policy_host::model::{ObjectRef, time};

pub(super) struct Activity {
    cluster: Arc<dyn Cluster>,
    interval: Duration,
    /// When this replica last wrote (or chose not to write) each sandbox's activity.
    last: Arc<Mutex<HashMap<ObjectRef, Instant>>>,
    /// `cubepod_router_activity_writes_total`, by result.
    writes: IntCounterVec,
}

impl Activity {
    pub(super) fn new(
        cluster: Arc<dyn Cluster>,
        interval: Duration,
        writes: IntCounterVec,
    ) -> Self {
        Self {
            cluster,
            interval,
            last: Arc::default(),
            writes,
        }
    }

    /// A request reached `sandbox`: its activity is written unless it was within the interval.
    /// The sandbox is read from `cache` only then: most requests are within the interval.
    pub(super) fn seen(&self, key: &ObjectRef, cache: &Cache) {
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            if last
                .get(key)
                .is_some_and(|at| now.duration_since(*at) < self.interval)
            {
                return;
            }
            last.insert(key.clone(), now);
        }
        let Some((last_activity, resource_version)) = cache.read_sandbox(key, |s| {
            (s.sandbox.last_activity, s.resource_version.clone())
        }) else {
            // Gone meanwhile: nothing to record, and nothing kept for it.
            self.last
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key);
            return;
        };
        let wall = time::now();
        let interval = i64::try_from(self.interval.as_secs()).unwrap_or(i64::MAX);
        if last_activity.is_some_and(|at| wall.saturating_sub(at) < interval) {
            // Written within the interval, by another replica or a platform's proxy.
            return;
        }
        let patch = json!({"metadata": {
            "resourceVersion": resource_version,
            "annotations": {LAST_ACTIVITY: time::format(wall)},
        }});
        let cluster = self.cluster.clone();
        let last = self.last.clone();
        let interval = self.interval;
        let key = key.clone();
        let writes = self.writes.clone();
        tokio::spawn(async move {
            let written = cluster
                .patch(Resource::Sandbox, &key.namespace, &key.name, patch)
                .await;
            match written {
                Ok(_) => writes.with_label_values(&["written"]).inc(),
                // The sandbox moved on since it was read (another replica's write, or any
                // other): the next request decides again from the newer version.
                Err(error) if error.is(ApiErrorKind::Conflict) => {
                    writes.with_label_values(&["conflict"]).inc();
                    let again = Instant::now()
                        .checked_sub(interval_less_a_second(interval))
                        .unwrap_or_else(Instant::now);
                    last.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key, again);
                }
                Err(error) if error.is(ApiErrorKind::NotFound) => {}
                Err(error) => {
                    writes.with_label_values(&["failed"]).inc();
                    tracing::warn!(sandbox = %key.name, namespace = %key.namespace, %error,
                        "could not record the sandbox's activity");
                }
            }
        });
    }
}

/// Where to set a sandbox's last write after a conflict: a second from now, its cache then
/// holding the newer version, rather than at once (a storm of conflicts) or a whole interval
/// later (activity lost).
fn interval_less_a_second(interval: Duration) -> Duration {
    interval.saturating_sub(Duration::from_secs(1))
}
