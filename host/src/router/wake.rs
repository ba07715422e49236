//! Holding requests until their sandbox can answer, and waking one paused for idleness.
//!
//! A sandbox the reaper paused (`status.idlePausedAt`) resumes when `cubepod.io/last-activity`
//! moves past the pause: the first request for it writes that annotation, once, conditional
//! on the resourceVersion it read, so that however many requests arrive, here or at another
//! replica, one write wakes it (a replica that loses the race reads the sandbox again and
//! finds it woken). Every request meanwhile is held until the Pod is Ready with an IP, at most
//! `--wake-timeout`, at most `--max-held-requests` of them per sandbox; a held request whose
//! sandbox is deleted is answered at once. A sandbox paused by its spec is never woken.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::{Refusal, Router};
use crate::controller::cache::Cache;
use cubepod_kube::{ApiErrorKind, Resource};
use cubepod_policy_host::model::sandbox::{LAST_ACTIVITY, SandboxObject};
use cubepod_policy_host::model::{ObjectRef, time};
use cubepod_policy_host::runtime::bindings::{DesiredState, Event, EventType, SandboxPhase};

/// What the cache says of a sandbox, for a request to it.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Running, its Pod Ready with this IP.
    Ready(IpAddr),
    /// Not there, or being deleted.
    Gone,
    /// `spec.desiredState: Paused`: a person's pause, or a shutdown's.
    PausedBySpec,
    /// Failed: nothing to wait for.
    Failed,
    /// Paused by the reaper at this time; `woken` once activity after it was written.
    IdlePaused { at: i64, woken: bool },
    /// On its way to Ready (started, resumed, or its Pod not Ready yet).
    Starting,
}

fn state(cache: &Cache, key: &ObjectRef) -> State {
    // Read in place: this runs for every request.
    match cache.read_sandbox(key, decided_by_sandbox) {
        None => State::Gone,
        Some(Some(state)) => state,
        Some(None) => match cache.ready_pod_ip(key) {
            Some(ip) => State::Ready(ip),
            None => State::Starting,
        },
    }
}

/// The state the Sandbox alone decides, if it does; `None`: its Pod's does.
fn decided_by_sandbox(object: &SandboxObject) -> Option<State> {
    let sandbox = &object.sandbox;
    if sandbox.deleting {
        return Some(State::Gone);
    }
    if sandbox.spec.desired_state == DesiredState::Paused {
        return Some(State::PausedBySpec);
    }
    if let Some(at) = sandbox.status.idle_paused_at {
        let woken = sandbox.last_activity.is_some_and(|a| a > at);
        return Some(State::IdlePaused { at, woken });
    }
    (sandbox.status.phase == SandboxPhase::Failed).then_some(State::Failed)
}

/// The requests held per sandbox, and the wakes started.
#[derive(Default)]
pub(super) struct Wakes {
    entries: Mutex<HashMap<ObjectRef, Arc<Entry>>>,
}

#[derive(Default)]
struct Entry {
    /// Told whenever the sandbox or its Pod changes in the cache.
    changed: Notify,
    held: AtomicUsize,
    /// The idle pause (its time) whose wake was started here: one write per pause.
    woke: Mutex<Option<i64>>,
}

/// One held request, counted (per sandbox, and in `cubepod_router_held_requests`) until
/// dropped (answered, or its client gone).
struct Held(Arc<Entry>, prometheus::IntGauge);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
        self.1.dec();
    }
}

impl Wakes {
    fn entry(&self, key: &ObjectRef) -> Arc<Entry> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.entry(key.clone()).or_default().clone()
    }

    /// The sandbox `key` changed in the cache: its held requests look again.
    pub(super) fn changed(&self, key: &ObjectRef) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get(key) {
            entry.changed.notify_waiters();
            // Nothing held and nothing to remember: the entry goes, so that the router's
            // state is per sandbox in use, not per sandbox ever seen.
            if entry.held.load(Ordering::Acquire) == 0 && Arc::strong_count(entry) == 1 {
                let woke = *entry.woke.lock().unwrap_or_else(PoisonError::into_inner);
                if woke.is_none() {
                    entries.remove(key);
                }
            }
        }
    }

    /// The IP of the sandbox's Ready Pod, once there is one: at once when it runs, after its
    /// wake or start when not (held, bounded); or why the request is answered without it.
    pub(super) async fn ready(
        &self,
        router: &Arc<Router>,
        key: &ObjectRef,
    ) -> Result<IpAddr, Refusal> {
        if let State::Ready(ip) = state(&router.cache, key) {
            return Ok(ip);
        }
        let entry = self.entry(key);
        let deadline = tokio::time::Instant::now() + router.config.wake_timeout;
        let mut held: Option<Held> = None;
        loop {
            let notified = entry.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match state(&router.cache, key) {
                State::Ready(ip) => return Ok(ip),
                State::Gone => return Err(not_found(key)),
                State::PausedBySpec => return Err(paused_by_spec(key)),
                State::Failed => {
                    return Err(Refusal::new(
                        StatusCode::BAD_GATEWAY,
                        format!(
                            "sandbox {} in namespace {} has failed; see kubectl describe sandbox {} -n {}",
                            key.name, key.namespace, key.name, key.namespace
                        ),
                    ));
                }
                State::IdlePaused { at, woken } => {
                    if !woken && first_wake(&entry, at) {
                        tokio::spawn(wake(router.clone(), key.clone(), at, entry.clone()));
                    }
                }
                State::Starting => {}
            }
            if held.is_none() {
                let now_held = entry.held.fetch_add(1, Ordering::AcqRel) + 1;
                router.metrics.held.inc();
                let guard = Held(entry.clone(), router.metrics.held.clone());
                if now_held > router.config.max_held_requests {
                    return Err(Refusal::retry(format!(
                        "sandbox {} in namespace {} is starting and already has {} requests \
                         waiting for it (--max-held-requests); try again shortly",
                        key.name, key.namespace, router.config.max_held_requests
                    )));
                }
                held = Some(guard);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(Refusal::retry(format!(
                        "sandbox {} in namespace {} was not Ready within {} (--wake-timeout); \
                         try again shortly",
                        key.name,
                        key.namespace,
                        humantime::format_duration(router.config.wake_timeout)
                    )));
                }
            }
        }
    }
}

/// Whether this caller is the first to wake the pause of time `at` here.
fn first_wake(entry: &Entry, at: i64) -> bool {
    let mut woke = entry.woke.lock().unwrap_or_else(PoisonError::into_inner);
    if *woke == Some(at) {
        return false;
    }
    *woke = Some(at);
    true
}

/// The 404 of a sandbox that is not there: the same words whether it never was or was deleted.
fn not_found(key: &ObjectRef) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        format!("no sandbox {} in namespace {}", key.name, key.namespace),
    )
}

fn paused_by_spec(key: &ObjectRef) -> Refusal {
    Refusal::new(
        StatusCode::CONFLICT,
        format!(
            "sandbox {name} in namespace {namespace} is paused by its spec (spec.desiredState: \
             Paused) and is not woken by traffic; resume it with: kubectl patch sandbox {name} \
             -n {namespace} --type merge -p '{{\"spec\":{{\"desiredState\":\"Running\"}}}}'",
            name = key.name,
            namespace = key.namespace
        ),
    )
}

/// The wake of the idle pause at `at`: activity after it written, once; then, when the Pod is
/// Ready, a `Woken` Event. A write that fails lets the next request try again.
async fn wake(router: Arc<Router>, key: ObjectRef, at: i64, entry: Arc<Entry>) {
    let started = Instant::now();
    match write_activity(&router, &key, at).await {
        Ok(Some(uid)) => {
            tracing::info!(sandbox = %key.name, namespace = %key.namespace,
                "a request woke the sandbox paused for idleness");
            let deadline = tokio::time::Instant::now() + router.config.wake_timeout;
            loop {
                let notified = entry.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                match state(&router.cache, &key) {
                    State::Ready(_) => break,
                    State::IdlePaused { .. } | State::Starting => {}
                    _ => return,
                }
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(deadline) => return,
                }
            }
            let took = started.elapsed().as_secs_f64();
            router.metrics.wake_seconds.observe(took);
            let now = time::now();
            let event = Event {
                kind: EventType::Normal,
                reason: "Woken".to_owned(),
                message: format!(
                    "woken by a request through the router {}s after its idle pause; Ready \
                     with an IP {took:.1}s after the request",
                    now.saturating_sub(at)
                ),
            };
            let object = crate::controller::events::event_object(
                "Sandbox",
                &key.namespace,
                &key.name,
                &uid,
                &event,
                now,
            );
            if let Err(error) = router
                .cluster
                .create(Resource::Event, &key.namespace, object)
                .await
            {
                tracing::warn!(sandbox = %key.name, namespace = %key.namespace, %error,
                    "the Woken Event could not be recorded");
            }
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(sandbox = %key.name, namespace = %key.namespace, %error,
                "could not wake the sandbox; the next request tries again");
            *entry.woke.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}

/// Writes activity after the pause at `at`, conditional on the version read; `Some(uid)` when
/// this write woke it, `None` when another writer already had (or it is gone or resumed).
async fn write_activity(
    router: &Router,
    key: &ObjectRef,
    at: i64,
) -> Result<Option<String>, cubepod_kube::ApiError> {
    let mut read = router.cache.sandbox(key).map(|s| {
        (
            s.resource_version,
            s.sandbox.uid,
            s.sandbox.status.idle_paused_at,
            s.sandbox.last_activity,
        )
    });
    for _ in 0..3 {
        let Some((version, uid, paused, activity)) = read.take() else {
            return Ok(None);
        };
        if paused != Some(at) || activity.is_some_and(|a| a > at) {
            return Ok(None);
        }
        // The reaper's clock has seconds: activity in the second of the pause would not be
        // after it.
        let stamp = time::format(time::now().max(at + 1));
        let patch = json!({"metadata": {
            "resourceVersion": version,
            "annotations": {LAST_ACTIVITY: stamp},
        }});
        match router
            .cluster
            .patch(Resource::Sandbox, &key.namespace, &key.name, patch)
            .await
        {
            Ok(_) => return Ok(Some(uid)),
            Err(error) if error.is(ApiErrorKind::NotFound) => return Ok(None),
            Err(error) if error.is(ApiErrorKind::Conflict) => {
                let fresh = router
                    .cluster
                    .get(Resource::Sandbox, &key.namespace, &key.name)
                    .await;
                read = match fresh {
                    Ok(object) => Some(read_json(&object)),
                    Err(error) if error.is(ApiErrorKind::NotFound) => return Ok(None),
                    Err(error) => return Err(error),
                };
            }
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// The version, uid, idle pause and activity of a Sandbox as the API returned it.
fn read_json(object: &Value) -> (String, String, Option<i64>, Option<i64>) {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let stamp = |pointer: &str| text(pointer).and_then(|t| time::parse(t).ok());
    (
        text("/metadata/resourceVersion")
            .unwrap_or_default()
            .to_owned(),
        text("/metadata/uid").unwrap_or_default().to_owned(),
        stamp("/status/idlePausedAt"),
        stamp("/metadata/annotations/cubepod.io~1last-activity"),
    )
}
