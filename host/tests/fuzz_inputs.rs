//! Property tests over everything that comes from outside the host: Sandbox and PodWarmPool
//! JSON as the API may send it (and the cache that takes it in), children's JSON, watch event
//! streams and API answers as a server may send them (through the real REST client against a
//! local server, cut at arbitrary frame boundaries), kubeconfig YAML, and the values that
//! cross the WIT boundary: a policy's kube-client calls (`Boundary::check`), its statuses
//! (`status_patch`) and its pool members (`Writer::create_member`).
//!
//! None may panic the host (a panic hook counts panics on every thread, the REST client's
//! stream tasks included), and every failure must be a typed error that says what is wrong.
//! Cases per property: `PROPTEST_CASES` (default per property below); the counts are printed.

use std::collections::VecDeque;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use cubepod_host::controller::cache::CacheWriter;
use cubepod_kube::rest::{ConnectionConfig, Projection, RestCluster, RestOptions};
use cubepod_kube::{ApiErrorKind, Cluster, Resource, Scope, WatchEventType};
use cubepod_policy_host::containment::json::Json;
use cubepod_policy_host::containment::{Boundary, Containment, Rule, SandboxScope, pools};
use cubepod_policy_host::model::{ObjectRef, pool, sandbox};
use cubepod_policy_host::runtime::bindings::{
    Condition, ConditionStatus, SandboxPhase, SandboxStatus, WarmPoolStatus,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const NS: &str = "cubepod-workloads";

// ---------------------------------------------------------------------------------------------
// Harness: panics anywhere fail the property; case counts are reported.

static PANICS: AtomicUsize = AtomicUsize::new(0);
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

/// Counts every panic on every thread (a REST stream task's panic is otherwise swallowed by
/// tokio), keeping the default report.
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            *LAST_PANIC.lock().unwrap_or_else(|p| p.into_inner()) = info.to_string();
            previous(info);
        }));
    });
}

fn panics() -> usize {
    PANICS.load(Ordering::SeqCst)
}

/// `PROPTEST_CASES`, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `test` over `strategy` for `cases` cases, failing on a panic anywhere, and prints the
/// count.
fn check<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    count_panics();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |value| {
        let before = panics();
        let outcome = test(value);
        if panics() != before {
            let last = LAST_PANIC.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(TestCaseError::fail(format!("the host panicked: {last}")));
        }
        outcome
    });
    if let Err(error) = result {
        panic!("{name}: {error}");
    }
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "fuzz target {name}: {cases} cases, no panic, typed errors only"
    );
}

// ---------------------------------------------------------------------------------------------
// Strategies: JSON as the API may send it.

/// Keys the host reads, and some it does not.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "status",
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "deletionTimestamp",
    "finalizers",
    "labels",
    "annotations",
    "ownerReferences",
    "image",
    "desiredState",
    "rootfsGeneration",
    "forkFrom",
    "idleTimeoutSeconds",
    "resources",
    "cpu",
    "memory",
    "storage",
    "storageClassName",
    "rootfsSize",
    "workspaceSize",
    "runtimeClassName",
    "warmPool",
    "phase",
    "podIP",
    "rootfsPVC",
    "workspacePVC",
    "observedGeneration",
    "conditions",
    "type",
    "reason",
    "message",
    "lastTransitionTime",
    "startedAt",
    "idlePausedAt",
    "claimedMember",
    "replicas",
    "template",
    "ready",
    "members",
    "object",
    "code",
    "items",
    "cubepod.io/last-activity",
    "cubepod.io/pool",
    "cubepod.io/claimed-by",
    "cubepod.io/sandbox",
    "cubepod.io/rootfs-generation",
    "app.kubernetes.io/managed-by",
];

/// Strings the host parses (states, times, numbers, names), and any text.
const WORDS: &[&str] = &[
    "",
    "Running",
    "Paused",
    "Pending",
    "Failed",
    "Terminating",
    "Sleeping",
    "True",
    "False",
    "Unknown",
    "Ready",
    "2026-01-01T00:00:00Z",
    "2026-13-45T99:99:99Z",
    "9999-12-31T23:59:59Z",
    "-0001-01-01T00:00:00Z",
    "1970-01-01T00:00:00+25:00",
    "yesterday",
    "1",
    "-1",
    "4294967296",
    "18446744073709551616",
    "NaN",
    "cubepod-controller",
    "cubepod.io/cleanup",
    "cubepod-workloads",
    "a",
    "dev-alice",
    "10Gi",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(WORDS).prop_map(str::to_string),
        2 => "[a-z0-9.-]{0,16}",
        1 => ".{0,24}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_string),
        1 => ".{0,10}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop::sample::select(vec![
            0i64,
            1,
            -1,
            2,
            i64::from(u32::MAX),
            i64::from(u32::MAX) + 1,
            i64::MAX,
            i64::MIN
        ])
        .prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        word().prop_map(Value::from),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Sets `path` (JSON-pointer-like, `/`-separated; `~1` is `/`) to `value`, making objects on
/// the way and replacing whatever is not one.
fn set_path(target: &mut Value, path: &str, value: Value) {
    let parts: Vec<String> = path
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/"))
        .collect();
    let mut current = target;
    for (index, part) in parts.iter().enumerate() {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let fields = current.as_object_mut().expect("an object now");
        if index + 1 == parts.len() {
            fields.insert(part.clone(), value);
            return;
        }
        current = fields.entry(part.clone()).or_insert(Value::Null);
    }
}

fn remove_path(target: &mut Value, path: &str) {
    let (parent, last) = path.rsplit_once('/').unwrap_or(("", path));
    let last = last.replace("~1", "/");
    if let Some(Value::Object(fields)) = target.pointer_mut(parent) {
        fields.remove(&last);
    }
}

/// A change to a well-formed object: a field set to anything, or removed.
fn mutations(
    paths: &'static [&'static str],
) -> impl Strategy<Value = Vec<(String, Option<Value>)>> {
    prop::collection::vec(
        (
            prop::sample::select(paths).prop_map(str::to_string),
            prop::option::weighted(0.85, json()),
        ),
        0..4,
    )
}

fn mutate(mut object: Value, changes: Vec<(String, Option<Value>)>) -> Value {
    for (path, value) in changes {
        match value {
            Some(value) => set_path(&mut object, &path, value),
            None => remove_path(&mut object, &path),
        }
    }
    object
}

const SANDBOX_PATHS: &[&str] = &[
    "/metadata",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/uid",
    "/metadata/generation",
    "/metadata/resourceVersion",
    "/metadata/deletionTimestamp",
    "/metadata/finalizers",
    "/metadata/labels",
    "/metadata/labels/cubepod.io~1pool",
    "/metadata/labels/cubepod.io~1claimed-by",
    "/metadata/annotations",
    "/metadata/annotations/cubepod.io~1last-activity",
    "/spec",
    "/spec/image",
    "/spec/desiredState",
    "/spec/rootfsGeneration",
    "/spec/forkFrom",
    "/spec/idleTimeoutSeconds",
    "/spec/resources",
    "/spec/resources/cpu",
    "/spec/storage",
    "/spec/storage/rootfsSize",
    "/spec/runtimeClassName",
    "/spec/warmPool",
    "/status",
    "/status/phase",
    "/status/podIP",
    "/status/observedGeneration",
    "/status/conditions",
    "/status/conditions/0",
    "/status/conditions/0/lastTransitionTime",
    "/status/conditions/0/status",
    "/status/startedAt",
    "/status/idlePausedAt",
    "/status/claimedMember",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z][a-z0-9-]{0,14}[a-z0-9]",
        1 => word(),
    ]
}

fn time_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0i64..4_102_444_800).prop_map(|s| {
            jiff::Timestamp::from_second(s).map(|t| t.to_string()).unwrap_or_default()
        }),
        1 => word(),
    ]
}

/// A Sandbox as the controller itself would find it, before mutation.
fn well_formed_sandbox() -> impl Strategy<Value = Value> {
    (
        name(),
        prop::sample::select(vec!["Running", "Paused"]),
        1u32..5,
        prop::option::of(name()),
        prop::sample::select(vec!["Pending", "Running", "Paused", "Terminating", "Failed"]),
        time_text(),
        any::<bool>(),
        1i64..20,
    )
        .prop_map(|(name, desired, generation, fork, phase, time, deleting, meta_generation)| {
            let mut object = json!({
                "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                             "generation": meta_generation,
                             "resourceVersion": meta_generation.to_string(),
                             "finalizers": ["cubepod.io/cleanup"],
                             "annotations": {"cubepod.io/last-activity": time}},
                "spec": {"image": "img", "desiredState": desired, "rootfsGeneration": generation},
                "status": {"phase": phase, "observedGeneration": meta_generation, "startedAt": time,
                           "conditions": [{"type": "Ready", "status": "True", "reason": "PodReady",
                                           "message": "", "lastTransitionTime": time}]},
            });
            if let Some(fork) = fork {
                object["spec"]["forkFrom"] = fork.into();
            }
            if deleting {
                object["metadata"]["deletionTimestamp"] = time.into();
            }
            object
        })
}

fn sandbox_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (well_formed_sandbox(), mutations(SANDBOX_PATHS)).prop_map(|(o, m)| mutate(o, m)),
        1 => json(),
    ]
}

const POOL_PATHS: &[&str] = &[
    "/metadata",
    "/metadata/name",
    "/metadata/generation",
    "/spec",
    "/spec/replicas",
    "/spec/template",
    "/spec/template/desiredState",
    "/spec/template/rootfsGeneration",
    "/spec/template/idleTimeoutSeconds",
    "/spec/template/image",
    "/status",
    "/status/ready",
    "/status/members",
    "/status/conditions",
    "/status/conditions/0/type",
];

fn pool_json() -> impl Strategy<Value = Value> {
    let well_formed = (name(), 0u32..10).prop_map(|(name, replicas)| {
        json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"name": name, "namespace": NS, "uid": "u", "generation": 1,
                         "resourceVersion": "3"},
            "spec": {"replicas": replicas, "template": {"image": "img"}},
            "status": {"ready": 0, "members": 0, "observedGeneration": 1, "conditions": []},
        })
    });
    prop_oneof![
        4 => (well_formed, mutations(POOL_PATHS)).prop_map(|(o, m)| mutate(o, m)),
        1 => json(),
    ]
}

const CHILD_PATHS: &[&str] = &[
    "/metadata",
    "/metadata/name",
    "/metadata/labels",
    "/metadata/labels/cubepod.io~1sandbox",
    "/metadata/labels/cubepod.io~1rootfs-generation",
    "/metadata/deletionTimestamp",
    "/status",
    "/status/podIP",
    "/status/conditions",
    "/status/conditions/0/status",
];

fn child_json() -> impl Strategy<Value = Value> {
    let well_formed = (name(), name()).prop_map(|(name, owner)| {
        json!({
            "metadata": {"name": name, "namespace": NS, "resourceVersion": "9",
                         "labels": {"app.kubernetes.io/managed-by": "cubepod-controller",
                                    "cubepod.io/sandbox": owner,
                                    "cubepod.io/rootfs-generation": "2"}},
            "status": {"podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    });
    prop_oneof![
        4 => (well_formed, mutations(CHILD_PATHS)).prop_map(|(o, m)| mutate(o, m)),
        1 => json(),
    ]
}

fn event_kind() -> impl Strategy<Value = WatchEventType> {
    prop::sample::select(vec![
        WatchEventType::Added,
        WatchEventType::Modified,
        WatchEventType::Deleted,
        WatchEventType::Bookmark,
    ])
}

// ---------------------------------------------------------------------------------------------
// Sandbox and PodWarmPool JSON, and the cache that takes them in.

#[test]
fn sandbox_json_reads_or_names_the_field_at_fault() {
    check(
        "sandbox JSON -> model::sandbox::from_json",
        cases(4096),
        sandbox_json(),
        |object| {
            match sandbox::from_json(&object) {
                Ok(read) => {
                    let meta_name = object.pointer("/metadata/name").and_then(Value::as_str);
                    prop_assert_eq!(Some(read.sandbox.name.as_str()), meta_name);
                    let zero = object.pointer("/spec/rootfsGeneration") == Some(&json!(0));
                    prop_assert!(read.sandbox.spec.rootfs_generation >= 1 || zero);
                    // What the host writes back reads the same once normalized: a second
                    // round changes nothing (a converged resync writes nothing).
                    let once = round_trip(&object, &read.sandbox.status, read.sandbox.generation)?;
                    let twice = round_trip(&object, &once, read.sandbox.generation)?;
                    prop_assert_eq!(once, twice);
                }
                Err(error) => {
                    prop_assert!(!error.field.is_empty(), "no field named: {error}");
                    prop_assert!(error.to_string().contains(&error.field));
                    prop_assert_eq!(error.kind, "Sandbox");
                }
            }
            Ok(())
        },
    );
}

/// Writes `status` as the host does and reads it back from the object.
fn round_trip(
    object: &Value,
    status: &SandboxStatus,
    generation: i64,
) -> Result<SandboxStatus, TestCaseError> {
    let patch = sandbox::StatusPatch::new(status, generation);
    let mut again = object.clone();
    again["status"] = patch.status_value();
    sandbox::from_json(&again)
        .map(|read| read.sandbox.status)
        .map_err(|e| TestCaseError::fail(format!("the host's own status does not read: {e}")))
}

#[test]
fn pool_json_reads_or_names_the_field_at_fault() {
    check(
        "podwarmpool JSON -> model::pool::from_json",
        cases(4096),
        pool_json(),
        |object| {
            match pool::from_json(&object) {
                Ok(read) => {
                    let replicas = object.pointer("/spec/replicas");
                    match replicas {
                        None => prop_assert_eq!(read.spec.replicas, 0),
                        Some(r) => prop_assert_eq!(Some(u64::from(read.spec.replicas)), r.as_u64()),
                    }
                    let patch = pool::status_patch("p", &read.status, read.generation);
                    prop_assert!(patch["status"].is_object());
                }
                Err(error) => {
                    prop_assert!(!error.field.is_empty(), "no field named: {error}");
                    prop_assert_eq!(error.kind, "PodWarmPool");
                }
            }
            Ok(())
        },
    );
}

#[test]
fn the_cache_takes_any_object_in_any_order() {
    let kinds = prop::sample::select(Resource::ALL.to_vec());
    let object = prop_oneof![sandbox_json(), pool_json(), child_json()];
    let events = prop::collection::vec((kinds, event_kind(), object), 1..12);
    check(
        "watch events -> controller::cache::CacheWriter::apply",
        cases(1024),
        events,
        |events| {
            let cache = CacheWriter::default();
            for (resource, kind, object) in &events {
                let keys = cache.apply(*resource, *kind, object);
                for key in keys {
                    let _ = key.to_string();
                }
                // What a reconcile would read now.
                for sandbox in cache.sandbox_keys() {
                    let _ = cache.observed(&sandbox);
                    if let Some(bad) = cache.unreadable_sandbox(&sandbox) {
                        prop_assert!(bad.status_patch(true, 0)["status"]["conditions"].is_array());
                    }
                }
                for pool in cache.pool_keys() {
                    let _ = cache.pool_members(&pool);
                    let _ = cache.visit_pool_offer(&pool, "", |_, free| free.count());
                }
                let _ = cache.counts();
            }
            // A readable sandbox added last is in the cache as read.
            if let Some((Resource::Sandbox, WatchEventType::Added, object)) = events.last()
                && let Ok(read) = sandbox::from_json(object)
            {
                let key = ObjectRef::new(&read.sandbox.namespace, &read.sandbox.name);
                let cached = cache.sandbox(&key);
                prop_assert!(cached.is_some(), "a readable sandbox was dropped");
            }
            Ok(())
        },
    );
}

/// One event of a pool member's life: which of four names, whose uid (the pool's member's, or
/// a stranger's under its name), and how it stands.
#[derive(Clone, Debug)]
struct MemberEvent {
    member: usize,
    stranger: bool,
    kind: WatchEventType,
    ready: bool,
    claimed_by: Option<&'static str>,
    failed: bool,
    deleting: bool,
    version: u64,
}

fn member_event() -> impl Strategy<Value = MemberEvent> {
    (
        0..4usize,
        prop::bool::weighted(0.2),
        event_kind(),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["c", "c0", "d"])),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        1..40u64,
    )
        .prop_map(
            |(member, stranger, kind, ready, claimed_by, failed, deleting, version)| MemberEvent {
                member,
                stranger,
                kind,
                ready,
                claimed_by,
                failed,
                deleting,
                version,
            },
        )
}

fn member_json(e: &MemberEvent) -> Value {
    let name = format!("m{}", e.member);
    let uid = if e.stranger {
        "stranger".to_string()
    } else {
        format!("u{}", e.member)
    };
    let mut labels = json!({"cubepod.io/pool": "p"});
    if let Some(claim) = e.claimed_by {
        labels["cubepod.io/claimed-by"] = claim.into();
    }
    let mut object = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "generation": 1,
                     "resourceVersion": e.version.to_string(), "labels": labels,
                     "finalizers": ["cubepod.io/cleanup"]},
        "spec": {"image": "img"},
        "status": {"phase": if e.failed { "Failed" } else { "Running" },
                   "conditions": [{"type": "Ready",
                                   "status": if e.ready { "True" } else { "False" },
                                   "reason": "PodReady", "message": "",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    });
    if e.deleting {
        object["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
    }
    object
}

fn recording_pool(recorded: &[bool], version: u64) -> Value {
    let members: Map<String, Value> = recorded
        .iter()
        .enumerate()
        .filter(|(_, on)| **on)
        .map(|(i, _)| (format!("m{i}"), Value::from(format!("u{i}"))))
        .collect();
    json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
        "metadata": {"name": "p", "namespace": NS, "uid": "pool-uid", "generation": 1,
                     "resourceVersion": version.to_string()},
        "spec": {"replicas": 4, "template": {"image": "img"}},
        "status": {"ready": 0, "members": 0, "observedGeneration": 1, "conditions": [],
                   "memberUIDs": members},
    })
}

#[test]
fn the_offers_index_says_what_the_members_say_however_their_events_come() {
    let step = prop_oneof![
        4 => member_event().prop_map(Ok),
        1 => (prop::collection::vec(any::<bool>(), 4), 1..40u64).prop_map(Err),
    ];
    check(
        "member and pool events -> controller::cache::Cache::visit_pool_offer",
        cases(1024),
        prop::collection::vec(step, 1..24),
        |steps| {
            let cache = CacheWriter::default();
            let pool = ObjectRef::new(NS, "p");
            for step in &steps {
                match step {
                    Ok(e) => cache.apply(Resource::Sandbox, e.kind, &member_json(e)),
                    Err((recorded, version)) => cache.apply(
                        Resource::PodWarmPool,
                        WatchEventType::Modified,
                        &recording_pool(recorded, *version),
                    ),
                };
                // What the members say of themselves, from the cache's own copies.
                let members = cache.pool_members(&pool);
                let free: Vec<String> = cache.visit_pool_offer(&pool, "", |_, free| {
                    free.map(|m| m.sandbox.name.clone()).collect()
                });
                let offerable: Vec<String> = members
                    .iter()
                    .filter(|m| m.ready && !m.claimed && !m.deleting)
                    .map(|m| m.name.clone())
                    .collect();
                prop_assert_eq!(free, offerable);
                for claim in ["c", "c0", "d"] {
                    let held = cache.visit_pool_offer(&pool, claim, |held, _| {
                        held.map(|m| m.sandbox.name.clone())
                    });
                    let mut expected: Vec<String> = cache
                        .sandboxes()
                        .into_iter()
                        .filter(|s| {
                            let s = &s.sandbox;
                            s.pool.as_deref() == Some("p")
                                && s.claimed_by.as_deref() == Some(claim)
                                && !s.deleting
                                && s.status.phase != SandboxPhase::Failed
                        })
                        .map(|s| s.sandbox.name)
                        .collect();
                    expected.sort();
                    prop_assert_eq!(held, expected.into_iter().next(), "held by {}", claim);
                }
            }
            Ok(())
        },
    );
}

#[test]
fn the_controllers_projection_of_children_shows_the_cache_the_same() {
    let kinds = prop::sample::select(vec![
        Resource::Pod,
        Resource::PersistentVolumeClaim,
        Resource::Secret,
    ]);
    // Children as the API sends them: with a spec or data the projection skips.
    let object = (child_json(), json(), json()).prop_map(|(mut object, spec, data)| {
        if let Some(fields) = object.as_object_mut() {
            fields.insert("spec".into(), spec);
            fields.insert("data".into(), data);
        }
        object
    });
    let events = prop::collection::vec((kinds, event_kind(), object), 1..12);
    check(
        "children through Projection::MetadataAndStatus -> the same cache",
        cases(512),
        events,
        |events| {
            let (whole, projected) = (CacheWriter::default(), CacheWriter::default());
            let mut owners = Vec::new();
            for (resource, kind, object) in &events {
                let bytes = serde_json::to_vec(object).expect("a Value serialises");
                let kept = Projection::MetadataAndStatus
                    .of(*resource)
                    .from_slice(&bytes)
                    .expect("the projection reads what serde_json wrote");
                if kept.is_object() {
                    prop_assert!(kept.get("spec").is_none() && kept.get("data").is_none());
                }
                prop_assert_eq!(
                    whole.apply(*resource, *kind, object),
                    projected.apply(*resource, *kind, &kept)
                );
                if let Some(owner) = object.pointer("/metadata/labels/cubepod.io~1sandbox") {
                    owners.push(ObjectRef::new(NS, owner.as_str().unwrap_or_default()));
                }
            }
            for owner in &owners {
                prop_assert_eq!(whole.observed(owner), projected.observed(owner));
            }
            prop_assert_eq!(whole.counts(), projected.counts());
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// The WIT boundary: what a policy sends (kube-client calls, statuses, pool members).

fn resource() -> impl Strategy<Value = Resource> {
    prop::sample::select(Resource::ALL.to_vec())
}

const MANIFEST_PATHS: &[&str] = &[
    "/apiVersion",
    "/kind",
    "/metadata",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/labels",
    "/metadata/labels/app.kubernetes.io~1managed-by",
    "/metadata/labels/cubepod.io~1sandbox",
    "/spec",
];

/// A child manifest as a policy writes it, for the call's own resource and name, then changed.
fn manifest(resource: Resource, namespace: String, name: String) -> impl Strategy<Value = String> {
    let base = json!({
        "apiVersion": resource.api_version(), "kind": resource.kind(),
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "cubepod-controller",
                                "cubepod.io/sandbox": "dev-alice"}},
        "spec": {},
    });
    prop_oneof![
        4 => mutations(MANIFEST_PATHS).prop_map(move |m| mutate(base.clone(), m).to_string()),
        1 => json().prop_map(|v| v.to_string()),
        1 => ".{0,40}",
    ]
}

/// Kubernetes' object-name rule, written independently of the host's.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        })
}

#[test]
fn the_boundary_admits_only_managed_children_in_its_namespaces() {
    let call = (
        resource(),
        prop_oneof![
            3 => Just(NS.to_string()),
            1 => Just("kube-system".to_string()),
            1 => word(),
        ],
        name(),
    )
        .prop_flat_map(|(resource, namespace, name)| {
            let manifest =
                prop::option::weighted(0.8, manifest(resource, namespace.clone(), name.clone()));
            (Just(resource), Just(namespace), Just(name), manifest)
        });
    let boundary = Boundary::new([NS]);
    let containment = Containment::default();
    check(
        "kube-client calls -> kube::boundary::Boundary::check, then Containment::check_write",
        cases(4096),
        call,
        |(resource, namespace, name, manifest)| {
            match boundary.check(resource, &namespace, &name, manifest.as_deref()) {
                Ok(admitted) => {
                    prop_assert!(resource.is_child(), "admitted a {resource}");
                    prop_assert_eq!(namespace.as_str(), NS);
                    prop_assert!(is_dns_subdomain(&name), "admitted name {:?}", name);
                    prop_assert_eq!(admitted.is_some(), manifest.is_some());
                    if let Some(tree) = admitted {
                        // What was admitted, read back as a value.
                        let object = serde_json::to_value(&tree).expect("written back");
                        prop_assert_eq!(&object["kind"], resource.kind());
                        prop_assert_eq!(&object["apiVersion"], resource.api_version());
                        prop_assert_eq!(&object["metadata"]["name"], name.as_str());
                        prop_assert_eq!(&object["metadata"]["namespace"], NS);
                        // The containment layer, for a call of the Sandbox the manifest names:
                        // it admits the object only as that Sandbox's managed child.
                        let labels = &object["metadata"]["labels"];
                        let sandbox = labels["cubepod.io/sandbox"].as_str().unwrap_or("dev-alice");
                        let scope = SandboxScope {
                            namespace: NS.to_string(),
                            name: sandbox.to_string(),
                            ..SandboxScope::default()
                        };
                        if containment
                            .check_write(&scope, resource, &namespace, &name, &tree)
                            .is_ok()
                        {
                            prop_assert_eq!(
                                &labels["app.kubernetes.io/managed-by"],
                                "cubepod-controller"
                            );
                            prop_assert_eq!(&labels["cubepod.io/sandbox"], sandbox);
                        }
                    }
                }
                Err(refusal) => {
                    let reason = refusal.to_string();
                    prop_assert!(
                        reason.contains(&name) || reason.contains(&namespace),
                        "the refusal does not name the call: {}",
                        reason
                    );
                }
            }
            Ok(())
        },
    );
}

/// Where a hostile policy edits the default policy's Pod.
const POD_PATHS: &[&str] = &[
    "/metadata/labels",
    "/metadata/ownerReferences/0",
    "/metadata/annotations",
    "/spec",
    "/spec/runtimeClassName",
    "/spec/automountServiceAccountToken",
    "/spec/serviceAccountName",
    "/spec/hostNetwork",
    "/spec/nodeName",
    "/spec/securityContext",
    "/spec/volumes",
    "/spec/volumes/0",
    "/spec/volumes/1/persistentVolumeClaim/claimName",
    "/spec/containers/0",
    "/spec/containers/0/securityContext",
    "/spec/containers/0/securityContext/privileged",
    "/spec/containers/0/env/3/valueFrom",
    "/spec/containers/0/ports",
    "/spec/initContainers/0/securityContext",
];

#[test]
fn the_pod_profile_takes_any_edit_of_a_pod_and_admits_only_a_contained_one() {
    let input = cubepod_policy_sdk::fixtures::sandbox("dev-alice").input();
    let mut client = cubepod_policy_sdk::recording::RecordingClient::default();
    cubepod_policy_sdk::reconcile::reconcile(&mut client, &input).expect("the default reconciles");
    let pod = client
        .calls
        .iter()
        .find(|c| c.summary() == "ensure-pod dev-alice")
        .and_then(|c| c.manifest().cloned())
        .expect("the default writes its Pod");
    let scope = SandboxScope {
        namespace: NS.to_string(),
        name: "dev-alice".to_string(),
        uid: "uid-dev-alice".to_string(),
        rootfs_generation: 1,
        ..SandboxScope::default()
    };
    let containment = Containment::default();
    check(
        "edits of the default Pod -> kube::boundary::Containment::check_write",
        cases(2048),
        mutations(POD_PATHS).prop_map(move |m| mutate(pod.clone(), m)),
        |object| {
            // As the guest sends it: as text.
            let text = object.to_string();
            let tree = Json::parse(&text).expect("a manifest");
            if containment
                .check_write(&scope, Resource::Pod, NS, "dev-alice", &tree)
                .is_ok()
            {
                let spec = &object["spec"];
                prop_assert_eq!(&spec["runtimeClassName"], "kata-qemu");
                prop_assert_eq!(&spec["automountServiceAccountToken"], false);
                prop_assert!(spec.get("nodeName").is_none());
                prop_assert!(spec["hostNetwork"] != true);
                prop_assert!(object["metadata"].get("annotations").is_none());
                for container in spec["containers"].as_array().into_iter().flatten() {
                    prop_assert!(container["securityContext"]["privileged"] != true);
                }
                for volume in spec["volumes"].as_array().into_iter().flatten() {
                    prop_assert!(volume.get("hostPath").is_none());
                    if let Some(claim) = volume.pointer("/persistentVolumeClaim/claimName") {
                        prop_assert!(
                            claim == "dev-alice-rootfs-g1" || claim == "dev-alice-workspace",
                            "mounted {}",
                            claim
                        );
                    }
                }
            }
            Ok(())
        },
    );
}

fn timestamp() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..4_102_444_800,
        1 => any::<i64>(),
    ]
}

fn condition() -> impl Strategy<Value = Condition> {
    (
        word(),
        prop::sample::select(vec![
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ]),
        word(),
        ".{0,30}",
        timestamp(),
    )
        .prop_map(|(kind, status, reason, message, time)| Condition {
            kind,
            status,
            reason,
            message,
            last_transition_time: time,
        })
}

fn guest_status() -> impl Strategy<Value = SandboxStatus> {
    (
        prop::sample::select(vec![
            SandboxPhase::Pending,
            SandboxPhase::Running,
            SandboxPhase::Paused,
            SandboxPhase::Terminating,
            SandboxPhase::Failed,
        ]),
        prop::option::of(word()),
        prop::option::of(word()),
        prop::option::of(word()),
        any::<i64>(),
        prop::collection::vec(condition(), 0..4),
        prop::option::of(timestamp()),
        prop::option::of(timestamp()),
        prop::option::of(word()),
    )
        .prop_map(
            |(phase, pod_ip, rootfs, workspace, generation, conditions, started, idle, member)| {
                SandboxStatus {
                    phase,
                    pod_ip,
                    rootfs_pvc: rootfs,
                    workspace_pvc: workspace,
                    observed_generation: generation,
                    conditions,
                    started_at: started,
                    idle_paused_at: idle,
                    claimed_member: member,
                    service_fqdn: None,
                    shutdown_in: None,
                }
            },
        )
}

/// What a status can hold through the API: condition reasons are CamelCase and never empty
/// (`Unknown` stands in), times are within years 0000 to 9999.
fn representable(status: &SandboxStatus) -> bool {
    let time_ok = |t: i64| jiff::Timestamp::from_second(t).is_ok();
    status
        .conditions
        .iter()
        .all(|c| !c.reason.is_empty() && time_ok(c.last_transition_time))
        && status.started_at.is_none_or(time_ok)
        && status.idle_paused_at.is_none_or(time_ok)
}

#[test]
fn guest_statuses_are_written_as_valid_status_patches() {
    let object = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "a", "namespace": NS, "generation": 3},
        "spec": {"image": "img"},
    });
    check(
        "guest sandbox statuses -> model::sandbox::StatusPatch",
        cases(4096),
        (guest_status(), any::<i64>()),
        |(status, generation)| {
            let patch = sandbox::StatusPatch::new(&status, generation);
            let value = serde_json::to_value(&patch).expect("a status serializes");
            prop_assert!(value["status"]["phase"].is_string());
            // Its text is the value's, over the version, and the first-ready mark is absent
            // until set (a merge patch's null would remove the one the API holds).
            let text: Value = serde_json::from_str(&patch.text_over("7").expect("serializes"))
                .expect("the text is JSON");
            prop_assert_eq!(&text["status"], &value["status"]);
            prop_assert_eq!(&text["metadata"], &json!({"resourceVersion": "7"}));
            prop_assert!(value["status"].get("firstReadyAt").is_none());
            // Read back: the same status whenever it is representable; and in every case a
            // second write is the same as the first, and what the object holds once written
            // is what the patch says it reads back as.
            let once = round_trip(&object, &status, generation)?;
            prop_assert_eq!(&patch.read_back(), &once);
            if representable(&status) {
                prop_assert_eq!(&once, &status);
            }
            let twice = round_trip(&object, &once, generation)?;
            prop_assert_eq!(once, twice);
            Ok(())
        },
    );
}

/// A status a policy may return but the API cannot hold as such (an empty condition reason, a
/// time past year 9999) is altered on the way out. The host compares what it would write
/// (`as_written`) with what it read, so a converged sandbox is not written again at every
/// reconcile: that must be exactly what reads back.
#[test]
fn the_host_compares_what_the_api_will_hold() {
    let object = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "a", "namespace": NS, "generation": 3},
        "spec": {"image": "img"},
    });
    check(
        "guest sandbox statuses, round trip -> model::sandbox::as_written",
        cases(512),
        guest_status(),
        |status| {
            let back = round_trip(&object, &status, 3)?;
            prop_assert_eq!(back, sandbox::as_written(&status, 3));
            Ok(())
        },
    );
}

#[test]
fn guest_pool_statuses_are_written_as_valid_status_patches() {
    let status = (
        any::<u32>(),
        any::<u32>(),
        any::<i64>(),
        prop::collection::vec(condition(), 0..4),
    )
        .prop_map(|(ready, members, generation, conditions)| WarmPoolStatus {
            replicas: members,
            ready_replicas: ready,
            observed_generation: generation,
            conditions,
        });
    check(
        "guest pool statuses -> model::pool::status_patch",
        cases(2048),
        (status, any::<i64>()),
        |(status, generation)| {
            let patch = pool::status_patch("p", &status, generation);
            let mut object = json!({
                "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                "metadata": {"name": "p", "namespace": NS},
                "spec": {"replicas": 1},
            });
            object["status"] = patch["status"].clone();
            let read = pool::from_json(&object)
                .map_err(|e| TestCaseError::fail(format!("the host's own status: {e}")))?;
            prop_assert_eq!(read.status.ready_replicas, status.ready_replicas);
            prop_assert_eq!(read.status.replicas, status.replicas);
            prop_assert_eq!(read.status.observed_generation, status.observed_generation);
            Ok(())
        },
    );
}

const MEMBER_PATHS: &[&str] = &[
    "/apiVersion",
    "/kind",
    "/metadata",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/labels",
    "/metadata/labels/cubepod.io~1pool",
    "/metadata/labels/app.kubernetes.io~1managed-by",
    "/metadata/ownerReferences",
    "/metadata/ownerReferences/0/uid",
    "/metadata/ownerReferences/0/kind",
    "/metadata/finalizers",
    "/spec",
    "/spec/image",
    "/spec/desiredState",
    "/spec/forkFrom",
    "/status",
];

#[test]
fn pool_members_from_a_policy_are_admitted_only_as_the_pools_own() {
    let member = (name(), name()).prop_flat_map(|(pool, member)| {
        let base = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": member, "namespace": NS,
                         "labels": {"cubepod.io/pool": pool,
                                    "app.kubernetes.io/managed-by": "cubepod-controller"},
                         "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1",
                                              "kind": "PodWarmPool", "name": pool,
                                              "uid": "pool-uid", "controller": true,
                                              "blockOwnerDeletion": true}]},
            "spec": {"image": "img"},
        });
        let manifest = prop_oneof![
            4 => mutations(MEMBER_PATHS).prop_map(move |m| mutate(base.clone(), m).to_string()),
            1 => json().prop_map(|v| v.to_string()),
            1 => ".{0,40}",
        ];
        (Just(pool), Just(member), manifest)
    });
    check(
        "pool member manifests -> containment::pools::member",
        cases(1024),
        member,
        |(pool, member, manifest)| {
            let pool = pool::from_json(&json!({
                "metadata": {"name": pool, "namespace": NS, "uid": "pool-uid"},
                "spec": {"replicas": 3, "template": {"image": "img"}},
            }))
            .expect("a pool");
            match pools::member(&pool, 0, &member, &manifest, 512 << 10) {
                Ok(object) => {
                    let meta = &object["metadata"];
                    prop_assert_eq!(&meta["name"], member.as_str());
                    prop_assert_eq!(&meta["namespace"], NS);
                    prop_assert_eq!(
                        meta["labels"].as_object().map(|l| l.len()),
                        Some(2),
                        "only the two labels"
                    );
                    prop_assert_eq!(&meta["labels"]["cubepod.io/pool"], pool.name.as_str());
                    prop_assert_eq!(
                        &meta["labels"]["app.kubernetes.io/managed-by"],
                        "cubepod-controller"
                    );
                    prop_assert!(meta.get("finalizers").is_none());
                    let owners = meta["ownerReferences"].as_array().expect("owners");
                    prop_assert_eq!(owners.len(), 1);
                    prop_assert_eq!(&owners[0]["uid"], "pool-uid");
                    let read = sandbox::from_json(&object).expect("a Sandbox");
                    prop_assert_eq!(&read.sandbox.spec, &pool.spec.template);
                }
                Err(refusal) => {
                    prop_assert!(matches!(refusal.rule, Rule::Pool | Rule::Budget));
                    prop_assert!(!refusal.reason.is_empty());
                    prop_assert!(refusal.to_string().len() < 1024, "a bounded refusal");
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Kubeconfig YAML.

/// A CA certificate and a client certificate and key, PEM, made once.
fn pki() -> &'static (String, String, String) {
    static PKI: OnceLock<(String, String, String)> = OnceLock::new();
    PKI.get_or_init(|| {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["fuzz-ca".to_string()]).expect("ca");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).expect("ca cert");
        let client_key = rcgen::KeyPair::generate().expect("key");
        let client = rcgen::CertificateParams::new(vec!["client".to_string()])
            .expect("client")
            .self_signed(&client_key)
            .expect("client cert");
        (ca.pem(), client.pem(), client_key.serialize_pem())
    })
}

/// PEM or not, whole or cut, as base64 (for `*-data`).
fn pem_data() -> impl Strategy<Value = Value> {
    let (ca, cert, key) = pki();
    let documents = vec![ca.clone(), cert.clone(), key.clone()];
    prop_oneof![
        3 => (prop::sample::select(documents), any::<prop::sample::Index>(), any::<bool>())
            .prop_map(|(doc, cut, whole)| {
                let text = if whole { doc.clone() } else { doc[..cut.index(doc.len() + 1)].to_string() };
                Value::from(base64::engine::general_purpose::STANDARD.encode(text))
            }),
        1 => prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| Value::from(base64::engine::general_purpose::STANDARD.encode(b))),
        1 => json(),
    ]
}

const KUBECONFIG_PATHS: &[&str] = &[
    "/current-context",
    "/contexts",
    "/contexts/0",
    "/contexts/0/context/cluster",
    "/contexts/0/context/user",
    "/contexts/0/context/namespace",
    "/clusters/0/cluster/server",
    "/clusters/0/cluster/insecure-skip-tls-verify",
    "/clusters/0/cluster/tls-server-name",
    "/clusters/0/cluster/proxy-url",
    "/clusters/0/cluster/certificate-authority",
    "/users",
    "/users/0/user/token",
    "/users/0/user/tokenFile",
    "/users/0/user/exec",
    "/users/0/user/username",
    "/users/0/user/client-certificate",
    "/users/0/user/client-key",
];

fn kubeconfig_text() -> impl Strategy<Value = String> {
    let server = prop_oneof![
        3 => Just("https://127.0.0.1:6443".to_string()),
        1 => Just("http://127.0.0.1:8001/".to_string()),
        1 => Just("https://[::1]:6443/prefix".to_string()),
        2 => word(),
        1 => ".{0,30}",
    ];
    let data = (
        prop::option::of(pem_data()),
        prop::option::of(pem_data()),
        prop::option::of(pem_data()),
    );
    let well_formed = (server, data).prop_map(|(server, (ca, cert, key))| {
        let mut config = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t0k3n"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        });
        if let Some(ca) = ca {
            config["clusters"][0]["cluster"]["certificate-authority-data"] = ca;
        }
        if let Some(cert) = cert {
            config["users"][0]["user"]["client-certificate-data"] = cert;
        }
        if let Some(key) = key {
            config["users"][0]["user"]["client-key-data"] = key;
        }
        config
    });
    prop_oneof![
        5 => (well_formed, mutations(KUBECONFIG_PATHS)).prop_map(|(config, m)| {
            serde_yaml_ng::to_string(&mutate(config, m)).unwrap_or_default()
        }),
        1 => json().prop_map(|v| serde_yaml_ng::to_string(&v).unwrap_or_default()),
        1 => ".{0,80}",
        1 => prop::collection::vec(any::<u8>(), 0..80)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

#[test]
fn kubeconfigs_load_or_name_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config");
    // Files a kubeconfig may name, relative to its folder: a token and a PEM.
    std::fs::write(dir.path().join("token"), "file-token\n").expect("token");
    std::fs::write(dir.path().join("t0k3n"), "file-token\n").expect("token");
    std::fs::write(dir.path().join("a"), &pki().0).expect("pem");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let _inside = runtime.enter();
    check(
        "kubeconfig YAML -> ConnectionConfig::from_kubeconfig_file (+ RestCluster::new)",
        cases(1024),
        kubeconfig_text(),
        |text| {
            std::fs::write(&path, &text).expect("write kubeconfig");
            match ConnectionConfig::from_kubeconfig_file(&path) {
                Ok(config) => {
                    prop_assert!(
                        config.server.starts_with("https://")
                            || config.server.starts_with("http://"),
                        "server {:?}",
                        config.server
                    );
                    prop_assert!(!config.server.ends_with('/'));
                    // The client is built from it (TLS material parsed) or refused, typed.
                    if let Err(error) = RestCluster::new(config, RestOptions::default()) {
                        prop_assert!(!error.to_string().is_empty());
                    }
                }
                Err(error) => {
                    let message = error.to_string();
                    prop_assert!(message.contains("kubeconfig"), "{}", message);
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Watch streams and API answers, through the real REST client and a local server.

/// One answer of the local server: status, headers, and the body in these chunks.
#[derive(Clone, Debug)]
struct Canned {
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
}

/// A plain HTTP/1.1 server on loopback that answers each connection with the next canned
/// answer, chunk by chunk (flushed, so that the client reads them as separate frames).
struct LocalServer {
    addr: SocketAddr,
    queue: Arc<Mutex<VecDeque<Canned>>>,
}

impl LocalServer {
    fn start(runtime: &tokio::runtime::Runtime) -> LocalServer {
        let queue: Arc<Mutex<VecDeque<Canned>>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let shared = queue.clone();
        runtime.spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let canned = shared.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match socket.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let Some(canned) = canned else {
                        let _ = socket
                            .write_all(b"HTTP/1.1 500 X\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        return;
                    };
                    let mut response = format!("HTTP/1.1 {} X\r\n", canned.status);
                    for (name, value) in &canned.headers {
                        response.push_str(&format!("{name}: {value}\r\n"));
                    }
                    response.push_str("transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                    for chunk in canned.chunks.iter().filter(|c| !c.is_empty()) {
                        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
                        frame.extend_from_slice(chunk);
                        frame.extend_from_slice(b"\r\n");
                        if socket.write_all(&frame).await.is_err() || socket.flush().await.is_err()
                        {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        LocalServer { addr, queue }
    }

    fn answer_next(&self, canned: Canned) {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.clear();
        queue.push_back(canned);
    }

    fn client(&self) -> Arc<RestCluster> {
        let conn = ConnectionConfig::new(&format!("http://{}", self.addr)).expect("server URL");
        RestCluster::new(
            conn,
            RestOptions {
                request_timeout: Duration::from_secs(5),
                max_retries: 0,
                retry_base: Duration::from_millis(1),
                retry_max: Duration::from_millis(1),
                ..RestOptions::default()
            },
        )
        .expect("client")
    }
}

/// Cuts `bytes` at the given points (taken modulo its length).
fn cut(bytes: &[u8], points: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = points.iter().map(|p| p.index(bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

fn watch_scope() -> Scope {
    Scope {
        resource: Resource::Pod,
        namespace: NS.to_string(),
        label_selector: None,
    }
}

fn type_name(kind: WatchEventType) -> &'static str {
    match kind {
        WatchEventType::Added => "ADDED",
        WatchEventType::Modified => "MODIFIED",
        WatchEventType::Deleted => "DELETED",
        WatchEventType::Bookmark => "BOOKMARK",
    }
}

#[test]
fn well_formed_watch_streams_arrive_whole_whatever_the_frames() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = LocalServer::start(&runtime);
    let client = server.client();
    let events = prop::collection::vec((event_kind(), child_json()), 0..12);
    let stream = (
        events,
        prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        any::<bool>(),
        any::<bool>(),
    );
    check(
        "watch streams (well-formed, any framing) -> RestCluster::watch",
        cases(512),
        stream,
        |(events, points, blank_lines, final_newline)| {
            let mut body = Vec::new();
            for (index, (kind, object)) in events.iter().enumerate() {
                if index > 0 {
                    body.extend_from_slice(if blank_lines { b"\n\n" } else { b"\n" });
                }
                let line = json!({"type": type_name(*kind), "object": object});
                body.extend_from_slice(line.to_string().as_bytes());
            }
            if final_newline {
                body.push(b'\n');
            }
            server.answer_next(Canned {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                chunks: cut(&body, &points),
            });
            let received = runtime.block_on(async {
                let mut receiver = client.watch(&watch_scope(), "1").await?;
                let mut received = Vec::new();
                while let Some(item) = tokio::time::timeout(Duration::from_secs(5), receiver.recv())
                    .await
                    .map_err(|_| cubepod_kube::ApiError::new(ApiErrorKind::Other, "stream hung"))?
                {
                    received.push(item?);
                }
                Ok::<_, cubepod_kube::ApiError>(received)
            });
            let received =
                received.map_err(|e| TestCaseError::fail(format!("a valid stream failed: {e}")))?;
            prop_assert_eq!(received.len(), events.len());
            for (got, (kind, object)) in received.iter().zip(&events) {
                prop_assert_eq!(got.kind, *kind);
                // As sent: serde_json's float printing is not exact both ways.
                let sent: Value = serde_json::from_str(&object.to_string()).expect("JSON");
                prop_assert_eq!(got.object.as_ref(), &sent);
            }
            Ok(())
        },
    );
}

/// A line of a watch stream a server (or a proxy, or a broken connection) may send.
fn watch_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR",
                                         "SURPRISE", ""]), json())
            .prop_map(|(kind, object)| json!({"type": kind, "object": object}).to_string().into_bytes()),
        1 => (any::<u16>(), word()).prop_map(|(code, reason)| {
            json!({"type": "ERROR", "object": {"kind": "Status", "code": code, "reason": reason}})
                .to_string()
                .into_bytes()
        }),
        1 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
        1 => Just(Vec::new()),
    ]
}

#[test]
fn any_watch_stream_ends_in_events_and_typed_errors() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = LocalServer::start(&runtime);
    let client = server.client();
    let stream = (
        prop::collection::vec(watch_line(), 0..10),
        prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    );
    check(
        "watch streams (any bytes) -> RestCluster::watch",
        cases(512),
        stream,
        |(lines, points)| {
            let body = lines.join(&b'\n');
            server.answer_next(Canned {
                status: 200,
                headers: Vec::new(),
                chunks: cut(&body, &points),
            });
            runtime.block_on(async {
                let mut receiver = match client.watch(&watch_scope(), "").await {
                    Ok(receiver) => receiver,
                    Err(error) => {
                        prop_assert!(!error.message.is_empty());
                        return Ok(());
                    }
                };
                let mut ended_by_error = false;
                loop {
                    let item = tokio::time::timeout(Duration::from_secs(5), receiver.recv())
                        .await
                        .map_err(|_| TestCaseError::fail("the stream never ended"))?;
                    match item {
                        None => break,
                        Some(Ok(event)) => {
                            prop_assert!(!ended_by_error, "an event after the stream's error");
                            let _ = event.object;
                        }
                        Some(Err(error)) => {
                            prop_assert!(!ended_by_error, "two errors");
                            prop_assert!(!error.message.is_empty());
                            ended_by_error = true;
                        }
                    }
                }
                Ok(())
            })
        },
    );
}

fn expected_kind(code: u16, body: &[u8]) -> Option<ApiErrorKind> {
    let reason = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_string))
        .unwrap_or_default();
    Some(match code {
        200..=299 => return None,
        404 => ApiErrorKind::NotFound,
        409 if reason == "AlreadyExists" => ApiErrorKind::AlreadyExists,
        409 => ApiErrorKind::Conflict,
        400 | 422 => ApiErrorKind::Invalid,
        401 => ApiErrorKind::Unauthorized,
        403 => ApiErrorKind::Forbidden,
        410 => ApiErrorKind::Gone,
        429 => ApiErrorKind::Unavailable,
        501 => ApiErrorKind::Other,
        500..=599 => ApiErrorKind::Unavailable,
        _ => ApiErrorKind::Other,
    })
}

#[test]
fn any_api_answer_is_an_object_or_a_typed_error() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = LocalServer::start(&runtime);
    let client = server.client();
    let body = prop_oneof![
        2 => (prop::sample::select(vec!["AlreadyExists", "Conflict", "NotFound", "Expired", ""]),
              word())
            .prop_map(|(reason, message)| {
                json!({"kind": "Status", "reason": reason, "message": message}).to_string().into_bytes()
            }),
        2 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..200),
    ];
    let answer = (
        prop_oneof![
            2 => prop::sample::select(vec![200u16, 201, 400, 401, 403, 404, 409, 410, 422, 429,
                                           500, 501, 502, 503, 504]),
            1 => 200u16..600,
        ],
        prop::option::of(word()),
        body,
        prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    );
    check(
        "API answers (status, Retry-After, body) -> RestCluster::get",
        cases(512),
        answer,
        |(code, retry_after, body, points)| {
            // Bodies a status forbids would make this a test of hyper, not of the host.
            let code = if matches!(code, 204 | 205 | 304) {
                200
            } else {
                code
            };
            let mut headers = Vec::new();
            if let Some(value) = retry_after
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
            {
                headers.push(("retry-after".to_string(), value));
            }
            server.answer_next(Canned {
                status: code,
                headers,
                chunks: cut(&body, &points),
            });
            let result = runtime.block_on(client.get(Resource::Pod, NS, "p"));
            match (result, expected_kind(code, &body)) {
                (Ok(object), None) => {
                    prop_assert_eq!(
                        Ok(object),
                        serde_json::from_slice::<Value>(&body).map_err(|_| ())
                    );
                }
                (Err(error), None) => {
                    prop_assert!(
                        serde_json::from_slice::<Value>(&body).is_err(),
                        "a 2xx JSON answer failed: {}",
                        error
                    );
                    prop_assert_eq!(error.kind, ApiErrorKind::Other);
                }
                (Ok(object), Some(kind)) => {
                    prop_assert!(
                        false,
                        "HTTP {} ({:?}) read as an object: {}",
                        code,
                        kind,
                        object
                    );
                }
                (Err(error), Some(kind)) => {
                    prop_assert_eq!(error.kind, kind, "HTTP {}: {}", code, error.message);
                    prop_assert!(!error.message.is_empty());
                    prop_assert!(error.retry_after.is_none() || kind == ApiErrorKind::Unavailable);
                }
            }
            Ok(())
        },
    );
}
