//! `policy test` predicts the controller: every scenario file the project ships (the default
//! policy's `tests/scenarios/`, each example policy's `scenarios/`, and the hostile test
//! policy's, whose outputs the host refuses) is run twice, once as
//! `policy test` runs it (the scratch cluster, its cache refilled from lists before each step)
//! and once through the real `ControllerManager` over a `MemoryCluster` (its reflectors watching,
//! each step a key the manager processes or a reaper tick), and after every step the two
//! clusters must hold the same objects, have seen the same API writes and the same Events.
//!
//! Run: `cargo test -p cubepod-host --test differential`

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::cache::{Cache, CacheWriter};
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::queue::WorkKey;
use cubepod_host::controller::reconcile::{Clock, Settings, Tokens};
use cubepod_host::controller::reflector;
use cubepod_host::metrics::Metrics;
use cubepod_host::scenario::format::{self, Action, ReapTarget, Scenario};
use cubepod_host::scenario::scratch::{self, FRESH_TOKEN, Scratch};
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::{PolicyEngine, PolicyModule, RuntimeConfig, default_policy};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

mod common;

use common::{ROLLOUT, built, js, runtime, workspace};

fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PolicyEngine::new(RuntimeConfig::default()).expect("an engine"))
}

/// Each policy the project ships, with the folder of its scenarios.
fn policies() -> Vec<(String, PolicyModule, PathBuf)> {
    let default = engine()
        .load(default_policy::DEFAULT_POLICY)
        .expect("the default policy loads");
    let guarded = built("cubepod-policy-guarded", "cubepod_policy_guarded");
    let guarded = engine()
        .load_file(&guarded)
        .expect("the guarded policy loads");
    let mut out = vec![(
        "default".to_string(),
        default,
        workspace().join("tests/scenarios"),
    )];
    let examples = workspace().join("examples/policies");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&examples)
        .expect("examples/policies")
        .filter_map(|e| e.ok().map(|e| e.path().join("scenarios")))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    // Every example has its build here: a new one must be added with its own.
    assert_eq!(
        dirs,
        [
            examples.join("guarded/scenarios"),
            examples.join("image-allowlist/scenarios"),
            examples.join("js-image-allowlist/scenarios"),
            examples.join("python-image-allowlist/scenarios"),
        ],
        "an example policy without a build in this test"
    );
    let allowlist = built(
        "cubepod-policy-image-allowlist",
        "cubepod_policy_image_allowlist",
    );
    let allowlist = engine()
        .load_file(&allowlist)
        .expect("the image-allowlist policy loads");
    out.push(("guarded".to_string(), guarded, dirs.remove(0)));
    out.push(("image-allowlist".to_string(), allowlist, dirs.remove(0)));
    let js_allowlist = js::js_policy(
        "examples/policies/js-image-allowlist/component.js",
        "js-image-allowlist",
    );
    let js_allowlist = js::engine()
        .load_file(&js_allowlist)
        .expect("the js-image-allowlist policy loads");
    out.push((
        "js-image-allowlist".to_string(),
        js_allowlist,
        dirs.remove(0),
    ));
    let python_allowlist = engine()
        .load_file(&polyglot("python-image-allowlist"))
        .expect("the Python image-allowlist policy loads");
    out.push((
        "python-image-allowlist".to_string(),
        python_allowlist,
        dirs.remove(0),
    ));
    // The hostile test policy: the controller refuses its outputs exactly as policy test does.
    let hostile = built("cubepod-hostile-policy", "cubepod_hostile_policy");
    let hostile = engine()
        .load_file(&hostile)
        .expect("the hostile policy loads");
    out.push((
        "hostile".to_string(),
        hostile,
        workspace().join("tests/policies/hostile/scenarios"),
    ));
    out
}

/// A policy written in Python or JavaScript (`.ci/policy-examples`' list), built by its pinned
/// toolchain into target/polyglot/ once for every test and CI step that loads it (the script
/// rebuilds only what changed): its file.
fn polyglot(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = std::process::Command::new("bash")
            .arg(workspace().join(".ci/policy-examples"))
            .arg("build")
            .status()
            .expect(".ci/policy-examples runs");
        assert!(
            status.success(),
            ".ci/policy-examples build failed ({status}): run .ci/policy-toolchains first"
        );
    });
    workspace()
        .join("target/polyglot")
        .join(format!("{name}.wasm"))
}

fn scenarios(dir: &Path) -> Vec<Scenario> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|file| format::read_file(file).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// What a user (and this test) can see of a cluster after a step: every object without what
/// the server generates at random or by the wall clock (uids become names of their owners,
/// versions and timestamps go), the API writes so far, and the Events by content.
#[derive(Debug, PartialEq)]
struct Seen {
    objects: Vec<String>,
    writes: Vec<String>,
}

fn seen(cluster: &MemoryCluster) -> Seen {
    // Every kind but the Lease, which only leader election writes.
    let kinds = Resource::ALL.into_iter().filter(|r| *r != Resource::Lease);
    let mut uids = Vec::new();
    for resource in kinds.clone() {
        for object in cluster.objects(resource) {
            if let (Some(uid), Some(name)) = (
                object.pointer("/metadata/uid").and_then(Value::as_str),
                object.pointer("/metadata/name").and_then(Value::as_str),
            ) {
                // An Event's name is unique by design (two runs never name theirs alike).
                let owner = match resource {
                    Resource::Event => "uid-of-an-Event".to_string(),
                    _ => format!("uid-of-{}/{name}", resource.kind()),
                };
                uids.push((uid.to_string(), owner));
            }
        }
    }
    let mut objects = Vec::new();
    for resource in kinds {
        for mut object in cluster.objects(resource) {
            normalize(&mut object, &uids);
            if matches!(resource, Resource::Pod | Resource::PersistentVolumeClaim) {
                // Written by the in-memory kubelet, by the wall clock.
                wall_clock(&mut object["status"]);
            }
            if resource == Resource::Pod {
                container_ids(&mut object["status"]);
            }
            if resource == Resource::Event
                && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.remove("name");
            }
            objects.push(format!("{}: {object}", resource.kind()));
        }
    }
    objects.sort();
    let writes = cluster
        .writes()
        .into_iter()
        .map(|w| {
            let name = if w.resource == Resource::Event {
                "<event>"
            } else {
                w.name.as_str()
            };
            format!(
                "{:?} {} {}/{} {:?}",
                w.verb,
                w.resource.kind(),
                w.namespace,
                name,
                w.error
            )
        })
        .collect();
    Seen { objects, writes }
}

/// A Pod's `containerID`s, which the in-memory kubelet makes from the Pod's uid (random).
fn container_ids(status: &mut Value) {
    for list in ["containerStatuses", "initContainerStatuses"] {
        if let Some(containers) = status.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers {
                if let Some(id) = container.get_mut("containerID") {
                    *id = Value::from("containerd://<from the pod's uid>");
                }
            }
        }
    }
}

/// Every time in a child's status, which the in-memory kubelet writes by the wall clock.
fn wall_clock(value: &mut Value) {
    match value {
        Value::Object(fields) => fields.values_mut().for_each(wall_clock),
        Value::Array(items) => items.iter_mut().for_each(wall_clock),
        Value::String(text) if cubepod_policy_host::model::time::parse(text).is_ok() => {
            *text = "<wall clock>".to_string();
        }
        _ => {}
    }
}

fn normalize(value: &mut Value, uids: &[(String, String)]) {
    match value {
        Value::Object(fields) => {
            for key in [
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "managedFields",
            ] {
                fields.remove(key);
            }
            for field in fields.values_mut() {
                normalize(field, uids);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| normalize(i, uids)),
        Value::String(text) => {
            if let Some((_, owner)) = uids.iter().find(|(uid, _)| uid == text) {
                *text = owner.clone();
            } else if is_uid(text) {
                // An object deleted since (an Event's `involvedObject` outlives its Sandbox).
                *text = "uid-of-a-deleted-object".to_string();
            }
        }
        _ => {}
    }
}

/// Whether `text` has the shape of the uids the in-memory API server gives (a random UUID).
fn is_uid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The scenario as `policy test` runs it: what the cluster showed after each step.
fn through_policy_test(
    module: &PolicyModule,
    handle: &tokio::runtime::Handle,
    scenario: &Scenario,
) -> Vec<Seen> {
    let mut scratch = Scratch::new(&scenario.namespace, module, handle);
    scratch
        .seed(&scenario.objects)
        .unwrap_or_else(|e| panic!("{}: {e}", scenario.name));
    scenario
        .steps
        .iter()
        .map(|step| {
            // An error the scenario expects is part of what is compared, through the cluster.
            let _ = scratch.run(&step.action, step.now, scenario.max_pool_replicas);
            seen(scratch.cluster())
        })
        .collect()
}

/// The manager's cache holds what the cluster holds: what a relist would fill a fresh one with.
async fn caught_up(manager: &ControllerManager, cluster: &MemoryCluster, namespace: &str) -> bool {
    fn fingerprint(cache: &Cache) -> Vec<String> {
        let mut sandboxes = cache.sandbox_keys();
        sandboxes.sort();
        let mut pools = cache.pool_keys();
        pools.sort();
        let mut out: Vec<String> = sandboxes
            .iter()
            .map(|k| {
                format!(
                    "{k:?} {:?} {:?} {:?}",
                    cache.sandbox(k),
                    cache.unreadable_sandbox(k).map(|u| u.resource_version),
                    cache.observed(k)
                )
            })
            .collect();
        out.extend(pools.iter().map(|k| {
            format!(
                "{k:?} {:?} {:?} {:?}",
                cache.pool(k).map(|p| (p.resource_version, p.pool)),
                cache.unreadable_pool(k).map(|u| u.resource_version),
                cache.pool_members(k)
            )
        }));
        out
    }
    let fresh = CacheWriter::default();
    for scope in reflector::scopes(namespace) {
        let list = cluster
            .list(&scope)
            .await
            .expect("the in-memory cluster lists");
        fresh.replace(scope.resource, namespace, &list.items);
    }
    fingerprint(&manager.cache) == fingerprint(&fresh)
}

/// The scenario through the real control loop: reflectors fill the manager's cache from
/// watches, and each step is a key it processes (or a reaper pass), once the cache has caught
/// up with the cluster.
async fn through_the_manager(module: &PolicyModule, scenario: &Scenario) -> Vec<Seen> {
    let namespace = scenario.namespace.as_str();
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    scratch::seed(&cluster, namespace, &scenario.objects)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", scenario.name));
    let config = ManagerConfig {
        reconcile: Arc::new(Settings {
            max_pool_replicas: scenario.max_pool_replicas,
            status_coalesce: Duration::ZERO,
            clock: Clock::fixed(0),
            tokens: Tokens::Fixed(FRESH_TOKEN),
            ..Settings::default()
        }),
        ..ManagerConfig::for_namespaces(vec![namespace.to_string()])
    };
    let manager = ControllerManager::new(
        cluster.clone(),
        module.clone(),
        config,
        Arc::new(Metrics::new()),
        Arc::new(Health::default()),
    );
    let (stop, shutdown) = watch::channel(false);
    let mut tasks = JoinSet::new();
    manager.spawn_reflectors(&mut tasks, &shutdown);
    let mut out = Vec::new();
    for (index, step) in scenario.steps.iter().enumerate() {
        let started = Instant::now();
        while !caught_up(&manager, &cluster, namespace).await {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{}: step {}: the manager's cache never caught up with the cluster",
                scenario.name,
                index + 1
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        manager.config.reconcile.clock.set(step.now.unwrap_or(0));
        let key = |name: &str| ObjectRef::new(namespace, name);
        match &step.action {
            Action::Reconcile(name) => manager.process(WorkKey::Sandbox(key(name))).await,
            Action::Pool(name) => manager.process(WorkKey::Pool(key(name))).await,
            Action::Reap(ReapTarget::All) => {
                let _ = manager.reap().await;
            }
            Action::Reap(ReapTarget::Only(names)) => {
                let _ = manager
                    .reconciler
                    .reap(namespace, Some(names))
                    .await
                    .outcome;
            }
            user => {
                let _ = scratch::user_step(&cluster, namespace, user).await;
            }
        }
        out.push(seen(&cluster));
    }
    let _ = stop.send(true);
    tasks.abort_all();
    out
}

#[test]
fn every_shipped_scenario_leaves_the_same_cluster_through_the_controller_as_in_policy_test() {
    let runtime = runtime();
    let mut compared = 0;
    let mut failures = Vec::new();
    for (policy, module, dir) in policies() {
        for scenario in scenarios(&dir) {
            let handle = runtime.handle().clone();
            let (m, s) = (module.clone(), scenario.clone());
            let tested = runtime
                .block_on(runtime.spawn_blocking(move || through_policy_test(&m, &handle, &s)))
                .expect("the policy-test run ends");
            let managed = runtime.block_on(through_the_manager(&module, &scenario));
            for (index, (a, b)) in tested.iter().zip(&managed).enumerate() {
                if a != b {
                    failures.push(format!(
                        "{policy}: {} ({}), after step {}:\n  policy test: {a:#?}\n  \
                         controller:  {b:#?}",
                        scenario.name,
                        scenario.file.display(),
                        index + 1
                    ));
                    break;
                }
            }
            compared += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Every file was compared: 15 default scenarios, the examples' 4 each (guarded, the image
    // allowlist in Rust, JavaScript and Python) and the hostile 9, at least.
    assert!(compared >= 40, "only {compared} scenarios compared");
}

/// One source of truth for the default decisions, the JavaScript half: the default policy built
/// from the JavaScript SDK (`sdk/js/default`, every decision the SDK's default) leaves the same
/// cluster as the Rust default policy (see [`same_cluster_as_the_rust_default`]).
#[test]
fn the_default_policy_from_the_js_sdk_leaves_the_same_cluster_as_the_rust_default() {
    let js_default = js::js_policy("sdk/js/default/component.js", "js-default");
    let js_default = js::engine()
        .load_file(&js_default)
        .expect("the JavaScript default policy loads");
    same_cluster_as_the_rust_default("JavaScript SDK", &js_default);
}

/// The Python half: the default policy built from the Python SDK
/// (`sdk/python/examples/default`, componentize-py) leaves the same cluster as the Rust default.
#[test]
fn the_python_sdks_default_policy_leaves_the_same_cluster_as_the_rust_default() {
    let python = engine()
        .load_file(&polyglot("python-default"))
        .expect("the Python SDK's default policy loads");
    same_cluster_as_the_rust_default("Python SDK", &python);
}

/// After every step of every scenario of `tests/scenarios` (the default policy's: new,
/// converged, paused, reset, forked, claimed, deleted sandboxes, NetworkPolicy and Service
/// changes, pools, the reaper, refused specs), `other` leaves the same cluster as the Rust
/// default policy: the same objects, byte for byte the same manifests, statuses and digests, the
/// same API writes and the same Events.
fn same_cluster_as_the_rust_default(label: &str, other: &PolicyModule) {
    let runtime = runtime();
    let rust = engine()
        .load(default_policy::DEFAULT_POLICY)
        .expect("the default policy loads");
    let mut compared = 0;
    let mut failures = Vec::new();
    for scenario in scenarios(&workspace().join("tests/scenarios")) {
        let run = |module: &PolicyModule| {
            let handle = runtime.handle().clone();
            let (m, s) = (module.clone(), scenario.clone());
            runtime
                .block_on(runtime.spawn_blocking(move || through_policy_test(&m, &handle, &s)))
                .expect("the policy-test run ends")
        };
        let (by_other, by_rust) = (run(other), run(&rust));
        if let Some(step) = by_other.iter().zip(&by_rust).position(|(a, b)| a != b) {
            failures.push(format!(
                "{} ({}), after step {}:\n  {label}: {:#?}\n  Rust SDK: {:#?}",
                scenario.name,
                scenario.file.display(),
                step + 1,
                by_other[step],
                by_rust[step]
            ));
        }
        assert_eq!(by_other.len(), by_rust.len(), "{}", scenario.name);
        compared += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(compared >= 15, "only {compared} scenarios compared");
}

/// The two ways a new module comes to every sandbox leave the same cluster: a plain swap (the
/// `--policy` file's, every object requeued under the new module) and a `PolicyRollout` held at
/// a canary step of 100% (every object reconciled by the candidate, picked per pass by its
/// uid). The candidate (the image-allowlist example) decides differently from the default for
/// the sandboxes whose image is outside its list, so the swap changes the cluster, and each arm
/// must change it alike: the same objects, the same Events, once both are quiet.
#[test]
fn a_canary_at_100_percent_leaves_the_same_cluster_as_a_plain_swap() {
    use cubepod_host::admission::Admission;
    use cubepod_host::controller::policy_watch::{PolicyWatcher, SwapOutcome};
    use cubepod_host::controller::rollout::RolloutController;
    use cubepod_host::signing::KeyRing;
    use serde_json::json;

    const NS: &str = "cubepod-workloads";
    const SYSTEM: &str = "cubepod-system";
    const START: i64 = 1_800_000_000;
    let bytes = common::component(
        "cubepod-policy-image-allowlist",
        "cubepod_policy_image_allowlist",
    );
    let images = [
        "ghcr.io/cubepod/sandbox-base:1.0",
        "docker.io/library/busybox:1.36",
        "ghcr.io/cubepod/sandbox-python:3.12",
        "quay.io/someone/tool:2",
    ];

    // One arm: a controller on the default policy, its sandboxes Running, then `swap` brings
    // the candidate; what the cluster shows once quiet, the rollout's own objects apart.
    let arm = |swap: &'static str| -> Vec<String> {
        let bytes = bytes.clone();
        runtime().block_on(async move {
            let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
            let config = ManagerConfig {
                reconcile: Arc::new(Settings {
                    status_coalesce: Duration::ZERO,
                    clock: Clock::fixed(START),
                    tokens: Tokens::Fixed(FRESH_TOKEN),
                    ..Settings::default()
                }),
                ..ManagerConfig::for_namespaces(vec![NS.to_string()])
            };
            let default = engine()
                .load(default_policy::DEFAULT_POLICY)
                .expect("the default policy loads");
            let manager = ControllerManager::new(
                cluster.clone(),
                default,
                config,
                Arc::new(Metrics::new()),
                Arc::new(Health::default()),
            );
            let (stop, shutdown) = watch::channel(false);
            tokio::spawn(manager.clone().run(shutdown.clone()));
            for (n, image) in images.iter().cycle().take(12).enumerate() {
                let sandbox = json!({
                    "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                    "metadata": {"name": format!("s-{n:02}"), "namespace": NS},
                    "spec": {"image": image},
                });
                cluster
                    .create(Resource::Sandbox, NS, sandbox)
                    .await
                    .expect("a sandbox");
            }
            quiet(&manager, &cluster, NS, "the default policy's sandboxes").await;
            let running = cluster
                .objects(Resource::Sandbox)
                .iter()
                .filter(|s| s["status"]["phase"] == "Running")
                .count();
            assert_eq!(running, 12, "{swap}: every sandbox Running before the swap");
            let admission = Admission::new(engine().clone(), KeyRing::default());
            match swap {
                "file" => {
                    let dir = std::env::temp_dir()
                        .join(format!("cubepod-differential-swap-{}", std::process::id()));
                    std::fs::create_dir_all(&dir).expect("a temporary folder");
                    let path = dir.join("policy.wasm");
                    std::fs::write(&path, &bytes).expect("the module file");
                    let mut watcher = PolicyWatcher::new(
                        path,
                        admission,
                        manager.clone(),
                        Duration::from_secs(3600),
                    );
                    let outcome = watcher.check().await;
                    assert!(
                        matches!(outcome, SwapOutcome::Applied { .. }),
                        "the swap: {outcome:?}"
                    );
                    let _ = std::fs::remove_dir_all(&dir);
                }
                _ => {
                    tokio::spawn(
                        RolloutController::new(manager.clone(), admission, SYSTEM.to_string())
                            .run(shutdown.clone()),
                    );
                    let strategy = json!({
                        "type": "Progressive",
                        "canary": {"steps": [{"weight": 100, "duration": "1h"}]},
                    });
                    common::roll_out(&*cluster, SYSTEM, &bytes, strategy).await;
                    common::until(&*cluster, SYSTEM, "the canary never reached 100%", |s| {
                        s["phase"] == "Canary" && s["weight"] == 100
                    })
                    .await;
                }
            }
            quiet(&manager, &cluster, NS, swap).await;
            let rollout = cluster
                .get(Resource::PolicyRollout, SYSTEM, ROLLOUT)
                .await
                .ok();
            if let Some(rollout) = rollout {
                // Still the canary's: the candidate served every sandbox, not a promotion.
                assert_eq!(rollout["status"]["phase"], "Canary", "{rollout:#}");
                assert_eq!(manager.policy.current().info().name, "cubepod-default");
            }
            let _ = stop.send(true);
            let mut objects: Vec<String> = seen(&cluster)
                .objects
                .into_iter()
                .filter(|o| {
                    !o.starts_with("PolicyRollout:")
                        && !o.starts_with("ConfigMap:")
                        && !o.contains("\"kind\":\"PolicyRollout\"")
                })
                // Pod IPs go by the order of the Pods' creation, which concurrent reconciles
                // do not fix.
                .map(|o| mask(&mask(&o, "\"podIP\":\""), "\"ip\":\""))
                .collect();
            objects.sort();
            objects
        })
    };
    let swapped = arm("file");
    let canaried = arm("rollout");
    assert!(
        swapped
            .iter()
            .any(|o| o.contains("busybox") && o.contains("Event:")),
        "the candidate's decision shows (an Event about a declined image): {swapped:#?}"
    );
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter().filter(|o| !b.contains(o)).cloned().collect()
    };
    assert!(
        swapped == canaried,
        "a plain swap and a canary at 100% leave different clusters:\nonly after the swap: \
         {:#?}\nonly after the canary: {:#?}",
        only(&swapped, &canaried),
        only(&canaried, &swapped)
    );
}

/// `text` with the string value after each `key` (which ends in its opening quote) masked.
fn mask(text: &str, key: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let value = at + key.len();
        out.push_str(&rest[..value]);
        out.push_str("<masked>");
        rest = &rest[value..];
        rest = rest.find('"').map_or("", |end| &rest[end..]);
    }
    out.push_str(rest);
    out
}

/// Waits until the manager has nothing left to do: its cache has caught up with the cluster
/// and no write came for a while.
async fn quiet(manager: &ControllerManager, cluster: &MemoryCluster, namespace: &str, what: &str) {
    let started = Instant::now();
    let mut last = (usize::MAX, Instant::now());
    loop {
        let writes = cluster.writes().len();
        if writes != last.0 {
            last = (writes, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(1500)
            && caught_up(manager, cluster, namespace).await
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: the controller never went quiet"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One source of truth for the default decisions, on inputs no one wrote: scenarios generated
/// from a seed (sandboxes with specs drawn from every field of the CRD, a warm pool, then steps
/// that reconcile, reap, fill the pool, edit specs, record activity and delete, at times that
/// move forward), each run through the default policy of every SDK: Rust (`guest/`), Python
/// (componentize-py), JavaScript (componentize-js, StarlingMonkey) and the same JavaScript by
/// componentize-qjs (QuickJS). After every step each must leave the cluster the Rust default
/// leaves.
///
/// The seed is new each run, and printed with a failure; `CUBEPOD_DIFFERENTIAL_SEED=<seed>`
/// replays it, `CUBEPOD_DIFFERENTIAL_CASES` sets how many scenarios (default 6: a Python or
/// JavaScript call is some hundred times a Rust one's in a debug build of the host).
#[test]
fn the_sdks_default_policies_leave_the_same_cluster_on_generated_scenarios() {
    let seed = std::env::var("CUBEPOD_DIFFERENTIAL_SEED")
        .ok()
        .map(|s| {
            s.parse::<u64>()
                .expect("CUBEPOD_DIFFERENTIAL_SEED is a number")
        })
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ u64::from(std::process::id()).rotate_left(32)
        });
    let cases: usize = std::env::var("CUBEPOD_DIFFERENTIAL_CASES")
        .ok()
        .map(|s| s.parse().expect("CUBEPOD_DIFFERENTIAL_CASES is a number"))
        .unwrap_or(6);
    eprintln!("generated scenarios: seed {seed}, {cases} scenarios");
    let rust = engine()
        .load(default_policy::DEFAULT_POLICY)
        .expect("the default policy loads");
    let others: Vec<(&str, PolicyModule)> = [
        ("Python SDK (componentize-py)", "python-default"),
        ("JavaScript SDK (componentize-js)", "js-default"),
        ("JavaScript SDK (componentize-qjs)", "js-default-qjs"),
    ]
    .into_iter()
    .map(|(label, name)| {
        let module = js::engine()
            .load_file(&polyglot(name))
            .unwrap_or_else(|e| panic!("{label}'s default policy loads: {e}"));
        (label, module)
    })
    .collect();
    let runtime = runtime();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut generator = Generator(seed);
    let mut steps = 0;
    let mut reached = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..cases {
        let text = generated_scenario(&mut generator, case);
        let file = dir.path().join(format!("generated-{case}.yaml"));
        std::fs::write(&file, &text).expect("the scenario file");
        let scenario = format::read_file(&file)
            .unwrap_or_else(|e| panic!("seed {seed}: the generated scenario is refused: {e}"))
            .remove(0);
        let run = |module: &PolicyModule| {
            let handle = runtime.handle().clone();
            let (m, s) = (module.clone(), scenario.clone());
            runtime
                .block_on(runtime.spawn_blocking(move || through_policy_test(&m, &handle, &s)))
                .expect("the policy-test run ends")
        };
        let by_rust = run(&rust);
        steps += by_rust.len();
        // What the generator reached: each kind of object the scenario's steps left at some
        // point (an Event, a Service, a pool's member...), for the summary below.
        let mut kinds = std::collections::BTreeSet::new();
        for seen in &by_rust {
            kinds.extend(
                seen.objects
                    .iter()
                    .filter_map(|o| o.split_once(':'))
                    .map(|(k, _)| k),
            );
        }
        for kind in kinds {
            *reached.entry(kind.to_string()).or_insert(0) += 1;
        }
        for (label, module) in &others {
            let by_other = run(module);
            if let Some(step) = by_other.iter().zip(&by_rust).position(|(a, b)| a != b) {
                panic!(
                    "{label} and the Rust default differ on generated scenario {case} after step \
                     {}; replay with CUBEPOD_DIFFERENTIAL_SEED={seed} cargo test -p cubepod-host \
                     --test differential generated_scenarios\n\nthe scenario:\n{text}\n\n  \
                     {label}: {:#?}\n  Rust SDK: {:#?}",
                    step + 1,
                    by_other[step],
                    by_rust[step]
                );
            }
        }
    }
    let reached: Vec<String> = reached
        .iter()
        .map(|(kind, count)| format!("{kind} in {count}"))
        .collect();
    eprintln!(
        "generated scenarios: {cases} scenarios, {steps} steps, every SDK alike; scenarios that \
         reached each kind of object: {}",
        reached.join(", ")
    );
}

/// SplitMix64: the same seed, the same scenarios, on every machine.
struct Generator(u64);

impl Generator {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The generated scenarios' first `now`.
const GENERATED_START: i64 = 1_767_229_200; // 2026-01-01T01:00:00Z

const SANDBOXES: [&str; 3] = ["a", "b", "c"];

/// A value for one field of a Sandbox's spec, by its name, or `None` for a field left out.
fn spec_field(g: &mut Generator, field: &str) -> Option<Value> {
    use serde_json::json;
    Some(match field {
        "image" => json!(g.pick(&[
            "ghcr.io/cubepod/sandbox-base:1.0",
            "ghcr.io/cubepod/sandbox-python:3.12",
            "docker.io/library/busybox:1.36",
            "quay.io/someone/tool@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ])),
        "desiredState" => json!(g.pick(&["Running", "Paused"])),
        "rootfsGeneration" => json!(1 + g.below(3)),
        "idleTimeoutSeconds" => json!(g.pick(&[0, 60, 3600])),
        "resources" => {
            let mut resources = serde_json::Map::new();
            if g.chance(70) {
                resources.insert("cpu".into(), json!(g.pick(&["500m", "1", "2", "64"])));
            }
            if g.chance(70) {
                resources.insert("memory".into(), json!(g.pick(&["512Mi", "1Gi", "4Gi"])));
            }
            Value::Object(resources)
        }
        "storage" => json!({
            "rootfsSize": g.pick(&["5Gi", "10Gi", "20Gi"]),
            "workspaceSize": g.pick(&["1Gi", "10Gi"]),
            "storageClassName": g.pick(&["fast", "standard"]),
        }),
        "runtimeClassName" => json!(g.pick(&["kata-qemu", "kata-fc"])),
        "network" => {
            let cidrs = |g: &mut Generator, from: &[&str]| -> Vec<String> {
                from.iter()
                    .filter(|_| g.chance(35))
                    .map(|c| c.to_string())
                    .collect()
            };
            json!({
                "egress": g.pick(&["Internet", "None", "Cluster"]),
                "allowCIDRs": cidrs(g, &["10.0.5.0/24", "192.168.1.0/24", "2001:db8::/64",
                    "10.0.0.0/8", "172.16.3.7/32", "fd00::/8"]),
                "denyCIDRs": cidrs(g, &["1.2.3.4/32", "8.8.8.0/24", "2606:4700::/32"]),
            })
        }
        "service" => {
            let mut ports = vec![json!({"name": "http", "port": 8080, "protocol": "TCP"})];
            if g.chance(50) {
                ports.push(json!({"name": "dns", "port": 53, "protocol": "UDP"}));
            }
            json!({"ports": ports})
        }
        "shutdownTime" => json!(cubepod_policy_host::model::time::format(
            GENERATED_START + g.pick(&[-600, 30, 300, 3_600, 90_000])
        )),
        "shutdownPolicy" => json!(g.pick(&["Delete", "Pause"])),
        "forkFrom" => json!(g.pick(&SANDBOXES)),
        "warmPool" => json!("pool"),
        _ => return None,
    })
}

/// Every spec field the generator draws, beside `image`.
const SPEC_FIELDS: [&str; 12] = [
    "desiredState",
    "rootfsGeneration",
    "idleTimeoutSeconds",
    "resources",
    "storage",
    "runtimeClassName",
    "network",
    "service",
    "shutdownTime",
    "shutdownPolicy",
    "forkFrom",
    "warmPool",
];

/// One generated scenario (JSON, which the scenario reader reads as YAML).
fn generated_scenario(g: &mut Generator, case: usize) -> String {
    use serde_json::json;
    let count = 1 + g.below(SANDBOXES.len());
    let mut objects = Vec::new();
    for name in &SANDBOXES[..count] {
        let mut spec = serde_json::Map::new();
        spec.insert("image".into(), spec_field(g, "image").unwrap_or_default());
        for field in SPEC_FIELDS {
            // A fork of a sandbox not yet made, or a runtime class the host refuses, stops the
            // sandbox before its children: rarer, so that most scenarios get past it.
            let percent = match field {
                "forkFrom" | "runtimeClassName" => 8,
                _ => 25,
            };
            if g.chance(percent)
                && let Some(value) = spec_field(g, field)
            {
                spec.insert(field.into(), value);
            }
        }
        let mut metadata = json!({"name": name});
        if g.chance(50) {
            metadata["finalizers"] = json!(["cubepod.io/cleanup"]);
        }
        if g.chance(30) {
            let at = GENERATED_START - g.pick(&[10, 120, 7_200]);
            metadata["annotations"] = json!({
                "cubepod.io/last-activity": cubepod_policy_host::model::time::format(at)
            });
        }
        objects.push(json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": metadata, "spec": spec,
        }));
    }
    let pool = g.chance(40);
    if pool {
        let mut template = serde_json::Map::new();
        template.insert("image".into(), spec_field(g, "image").unwrap_or_default());
        for field in ["idleTimeoutSeconds", "resources", "network", "service"] {
            if g.chance(30)
                && let Some(value) = spec_field(g, field)
            {
                template.insert(field.into(), value);
            }
        }
        objects.push(json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"name": "pool"},
            "spec": {"replicas": g.below(4), "template": template},
        }));
    }
    let mut now = GENERATED_START;
    let mut steps = Vec::new();
    for _ in 0..8 + g.below(8) {
        now += g.pick(&[0, 1, 30, 600, 4_000]);
        let sandbox = g.pick(&SANDBOXES[..count]);
        let roll = g.below(100);
        let mut step = if roll < 40 {
            json!({"reconcile": sandbox})
        } else if roll < 48 {
            json!({"reap": "all"})
        } else if roll < 56 && pool {
            json!({"pool": "pool"})
        } else if roll < 72 {
            let field = g.pick(&SPEC_FIELDS);
            let value = spec_field(g, field).unwrap_or(Value::Null);
            json!({"patch": {"kind": "Sandbox", "name": sandbox, "merge": {"spec": {(field): value}}}})
        } else if roll < 80 {
            let at = cubepod_policy_host::model::time::format(now - g.pick(&[0, 5, 900]));
            json!({"patch": {"kind": "Sandbox", "name": sandbox,
                "merge": {"metadata": {"annotations": {"cubepod.io/last-activity": at}}}}})
        } else if roll < 96 {
            // The kubelet's part: the Pod runs (a step before the Pod exists fails, and the
            // failure is compared too).
            json!({"patch": {"kind": "Pod", "name": sandbox,
                "merge": {"status": {"phase": "Running", "podIP": "10.244.0.7"}}}})
        } else {
            json!({"delete": format!("Sandbox/{sandbox}")})
        };
        step["now"] = json!(cubepod_policy_host::model::time::format(now));
        steps.push(step);
    }
    serde_json::to_string_pretty(&json!({
        "name": format!("generated scenario {case}"),
        "now": cubepod_policy_host::model::time::format(GENERATED_START),
        "objects": objects,
        "steps": steps,
    }))
    .expect("JSON")
}
