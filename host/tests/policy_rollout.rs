//! A `PolicyRollout`'s steps on the manager's clock, in process: the real control loop and the
//! rollout controller over an in-memory cluster whose clock the test moves. A step lasts its
//! duration on that clock, `spec.paused` holds it (its time stands still), and the last step
//! passed promotes the candidate for every object.
//!
//! Run: `cargo test -p cubepod-host --test policy_rollout`

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::admission::Admission;
use cubepod_host::controller::canary_bucket;
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::reconcile::{Clock, Settings};
use cubepod_host::controller::rollout::RolloutController;
use cubepod_host::metrics::Metrics;
use cubepod_host::signing::KeyRing;
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};

mod common;

use common::{ROLLOUT, component, roll_out, runtime};

const NS: &str = "cubepod-workloads";
const SYSTEM: &str = "cubepod-system";
const START: i64 = 1_800_000_000;

/// The control loop and the rollout controller, running on the default policy over an
/// in-memory cluster whose clock the test moves.
struct Running {
    cluster: Arc<MemoryCluster>,
    manager: Arc<ControllerManager>,
    clock: Clock,
    stop: watch::Sender<bool>,
}

/// Starts [`Running`] over a new cluster on a clock at [`START`]; call on a runtime. Returns
/// its parts.
fn start() -> (
    Arc<MemoryCluster>,
    Arc<ControllerManager>,
    Clock,
    watch::Sender<bool>,
) {
    let running = fresh();
    (
        running.cluster,
        running.manager,
        running.clock,
        running.stop,
    )
}

/// Starts [`Running`] over a new cluster on a clock at [`START`].
fn fresh() -> Running {
    start_on(
        MemoryCluster::new(MemoryClusterConfig::instant()),
        Clock::fixed(START),
    )
}

/// Starts [`Running`] over `cluster` on `clock`: a controller that starts over (or a new
/// leader) where one ran before.
fn start_on(cluster: Arc<MemoryCluster>, clock: Clock) -> Running {
    let engine = PolicyEngine::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("an engine");
    let stable = engine.load(DEFAULT_POLICY).expect("the default policy");
    let manager = ControllerManager::new(
        cluster.clone(),
        stable,
        ManagerConfig {
            reconcile: Arc::new(Settings {
                clock: clock.clone(),
                status_coalesce: Duration::ZERO,
                ..Settings::default()
            }),
            ..ManagerConfig::for_namespaces(vec![NS.to_string()])
        },
        Arc::new(Metrics::new()),
        Arc::new(Health::default()),
    );
    let (stop, shutdown) = watch::channel(false);
    let rollouts = RolloutController::new(
        manager.clone(),
        Admission::new(engine, KeyRing::default()),
        SYSTEM.to_string(),
    );
    tokio::spawn(manager.clone().run(shutdown.clone()));
    tokio::spawn(rollouts.run(shutdown));
    Running {
        cluster,
        manager,
        clock,
        stop,
    }
}

/// Waits (real time) until the rollout's status satisfies `done`; returns it.
async fn until(cluster: &MemoryCluster, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    common::until(cluster, SYSTEM, what, done).await
}

fn progressing(status: &Value) -> &str {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Progressing")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
}

/// Sandboxes `s-0` to `s-{n-1}`.
async fn create_sandboxes(cluster: &MemoryCluster, n: usize) {
    create_named(cluster, "s", n).await;
}

async fn set_paused(cluster: &MemoryCluster, paused: bool) {
    cluster
        .patch(
            Resource::PolicyRollout,
            SYSTEM,
            ROLLOUT,
            json!({"spec": {"paused": paused}}),
        )
        .await
        .expect("the rollout patched");
}

#[test]
fn steps_follow_the_managers_clock_pause_holds_them_and_the_last_promotes() {
    let faulty = component("cubepod-faulty-policy", "cubepod_faulty_policy");
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();

        create_sandboxes(&cluster, 20).await;
        let strategy = json!({
            "type": "Progressive",
            "canary": {"steps": [
                {"weight": 50, "duration": "10s"},
                {"weight": 100, "duration": "10s"},
            ]},
            "gates": {"maxTrapRatio": 0, "maxRefusalRatio": 0},
        });
        roll_out(&*cluster, SYSTEM, &faulty, strategy).await;

        let status = until(&cluster, "the canary starts at 50%", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;
        assert_eq!(status["candidate"]["name"], "cubepod-faulty", "{status:#}");
        assert_eq!(status["stable"]["name"], "cubepod-default", "{status:#}");

        // Paused: however far the clock moves, the step stays.
        set_paused(&cluster, true).await;
        until(&cluster, "the pause is seen", |s| {
            progressing(s) == "Paused"
        })
        .await;
        clock.set(START + 100);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let held = until(&cluster, "held", |_| true).await;
        assert_eq!(
            (held["phase"].as_str(), held["step"].as_u64()),
            (Some("Canary"), Some(0))
        );
        assert_eq!(held["weight"], 50, "{held:#}");

        // Resumed: the paused time does not count; the step needs its 10 s from now.
        set_paused(&cluster, false).await;
        until(&cluster, "resumed", |s| progressing(s) == "CanaryStep").await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let resumed = until(&cluster, "still at the first step", |_| true).await;
        assert_eq!(resumed["weight"], 50, "{resumed:#}");

        clock.set(START + 110);
        until(&cluster, "the second step", |s| {
            s["weight"] == 100 && s["step"] == 1
        })
        .await;
        assert_eq!(manager.policy.current().info().name, "cubepod-default");
        clock.set(START + 120);
        let promoted = until(&cluster, "promoted", |s| s["phase"] == "Promoted").await;
        assert_eq!(promoted["stable"]["name"], "cubepod-faulty", "{promoted:#}");
        assert!(promoted["touched"].as_u64() > Some(0), "{promoted:#}");
        assert_eq!(manager.policy.current().info().name, "cubepod-faulty");
        let _ = stop.send(true);
    });
}

/// The shadow stage: the image-allowlist example declines a sandbox whose image is outside its
/// list, where the stable module runs it. Shadowed, it runs on the same inputs and its
/// differences are counted and reported in the status, while nothing of its decision is
/// written: the sandbox keeps running, with no Event or condition of the candidate's. A pool's
/// reconciles are shadowed too, and show no difference. Its time up, the canary starts.
#[test]
fn a_shadow_reports_the_candidates_differences_and_writes_nothing() {
    let allowlist = component(
        "cubepod-policy-image-allowlist",
        "cubepod_policy_image_allowlist",
    );
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        for (name, image) in [
            ("allowed", "ghcr.io/cubepod/sandbox-base:1.0"),
            ("busybox", "docker.io/library/busybox:1.36"),
        ] {
            let sandbox = json!({
                "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"image": image},
            });
            cluster
                .create(Resource::Sandbox, NS, sandbox)
                .await
                .expect("a sandbox");
        }
        let running = async |name: &str| {
            let started = Instant::now();
            loop {
                let phase = cluster
                    .get(Resource::Sandbox, NS, name)
                    .await
                    .map(|o| o["status"]["phase"].clone())
                    .unwrap_or_default();
                if phase == "Running" {
                    return;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{name}: {phase}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        running("busybox").await;
        running("allowed").await;
        // A pool with no member: its reconciles are shadowed too, and the example decides
        // pools as the default does.
        let pool = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"name": "idle", "namespace": NS},
            "spec": {"replicas": 0, "template": {"image": "ghcr.io/cubepod/sandbox-base:1.0"}},
        });
        cluster
            .create(Resource::PodWarmPool, NS, pool)
            .await
            .expect("a pool");
        let sandbox_before = cluster
            .get(Resource::Sandbox, NS, "busybox")
            .await
            .expect("the sandbox");

        let strategy = json!({
            "type": "Progressive",
            "shadow": {"duration": "30s"},
            "canary": {"steps": [{"weight": 0, "duration": "1h"}]},
        });
        roll_out(&*cluster, SYSTEM, &allowlist, strategy).await;

        let status = until(&cluster, "the shadow reports", |s| {
            let compared = &s["shadow"]["comparedByExport"];
            s["phase"] == "Shadowing"
                && compared["reconcile-sandbox"].as_u64() >= Some(2)
                && compared["reconcile-pool"].as_u64() >= Some(1)
        })
        .await;
        let differences = status["shadow"]["differences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let kinds: Vec<&str> = differences
            .iter()
            .filter(|d| d["export"] == "reconcile-sandbox")
            .filter_map(|d| d["kind"].as_str())
            .collect();
        assert!(kinds.contains(&"status"), "{status:#}");
        assert!(kinds.contains(&"events"), "{status:#}");
        let examples = status["shadow"]["examples"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            examples
                .iter()
                .all(|e| e.as_str().is_some_and(|e| e.contains("/busybox"))),
            "only the declined sandbox differs: {status:#}"
        );
        assert!(!examples.is_empty(), "{status:#}");
        // In words: the field that differs and both values.
        let said = |text: &str| {
            examples
                .iter()
                .any(|e| e.as_str().is_some_and(|e| e.contains(text)))
        };
        assert!(
            said(
                "status: status.conditions[type=SpecValid].status: stable \"True\", candidate \"False\""
            ),
            "{status:#}"
        );
        assert!(
            said("events: event 1: stable none, candidate Warning "),
            "{status:#}"
        );
        assert!(!said("::"), "{status:#}");
        // Admitted names what was checked: no key is configured, so no signature.
        let admitted = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Admitted")
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default();
        assert!(
            admitted.contains("passed the contract check and the self-test")
                && admitted.ends_with("no signature checked (no --policy-verify-key is set)"),
            "{admitted}"
        );

        // Nothing of the candidate's decision is written.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let sandbox_after = cluster
            .get(Resource::Sandbox, NS, "busybox")
            .await
            .expect("the sandbox");
        assert_eq!(sandbox_after["status"], sandbox_before["status"]);
        let events = events_in(&cluster, NS).await;
        assert!(
            events.iter().all(|e| e["reason"] != "ImageNotAllowed"),
            "{events:#?}"
        );
        assert_eq!(manager.policy.current().info().name, "cubepod-default");

        // Its time up on the manager's clock, the canary starts.
        clock.set(START + 30);
        let canary = until(&cluster, "the canary", |s| s["phase"] == "Canary").await;
        assert_eq!(canary["weight"], 0, "{canary:#}");
        let _ = stop.send(true);
    });
}

/// The Events of `namespace`.
async fn events_in(cluster: &MemoryCluster, namespace: &str) -> Vec<Value> {
    let scope = cubepod_kube::Scope {
        resource: Resource::Event,
        namespace: namespace.to_string(),
        label_selector: None,
    };
    cluster.list(&scope).await.expect("the Events").items
}

/// The Events of [`ROLLOUT`] with `reason`.
async fn events_of(cluster: &MemoryCluster, reason: &str) -> usize {
    events_in(cluster, SYSTEM)
        .await
        .iter()
        .filter(|e| e["involvedObject"]["name"] == ROLLOUT && e["reason"] == reason)
        .count()
}

/// A controller that starts over (a restart, or another replica taking the lead) takes up a
/// canary where its status says it was: the step's time so far counts, a pause's does not,
/// and no step starts again.
#[test]
fn a_new_leader_takes_up_the_canary_where_the_status_says_it_was() {
    let faulty = component("cubepod-faulty-policy", "cubepod_faulty_policy");
    runtime().block_on(async move {
        let first = fresh();
        let (cluster, clock) = (first.cluster.clone(), first.clock.clone());
        create_sandboxes(&cluster, 10).await;
        let strategy = json!({
            "type": "Progressive",
            "canary": {"steps": [
                {"weight": 50, "duration": "10s"},
                {"weight": 100, "duration": "10s"},
            ]},
        });
        roll_out(&*cluster, SYSTEM, &faulty, strategy).await;
        until(&cluster, "the canary starts at 50%", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;

        // 6 s into the first step, the controller stops and another takes over.
        clock.set(START + 6);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let _ = first.stop.send(true);
        drop(first);
        let second = start_on(cluster.clone(), clock.clone());
        clock.set(START + 9);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let held = until(&cluster, "still the first step", |_| true).await;
        assert_eq!(
            (held["step"].as_u64(), held["weight"].as_u64()),
            (Some(0), Some(50)),
            "{held:#}"
        );
        assert_eq!(held["candidate"]["name"], "cubepod-faulty", "{held:#}");
        assert_eq!(
            second.manager.policy.current().info().name,
            "cubepod-default"
        );
        // The step's 10 s run from its start, not from the takeover.
        clock.set(START + 10);
        until(&cluster, "the second step at the first step's end", |s| {
            s["step"] == 1 && s["weight"] == 100
        })
        .await;

        // Paused 2 s into the second step; the controller starts over during the pause.
        clock.set(START + 12);
        set_paused(&cluster, true).await;
        until(&cluster, "the pause is seen", |s| {
            progressing(s) == "Paused"
        })
        .await;
        let _ = second.stop.send(true);
        drop(second);
        clock.set(START + 20);
        let third = start_on(cluster.clone(), clock.clone());
        tokio::time::sleep(Duration::from_millis(800)).await;
        set_paused(&cluster, false).await;
        until(&cluster, "resumed", |s| progressing(s) == "CanaryStep").await;
        // 8 s of the step are left: the 8 s paused (across the restart) do not count.
        clock.set(START + 27);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let held = until(&cluster, "still the second step", |_| true).await;
        assert_eq!(held["phase"], "Canary", "{held:#}");
        clock.set(START + 28);
        until(&cluster, "promoted", |s| s["phase"] == "Promoted").await;
        assert_eq!(third.manager.policy.current().info().name, "cubepod-faulty");
        assert_eq!(
            events_of(&cluster, "CanaryStarted").await,
            1,
            "a canary taken up is not started again"
        );
        let _ = third.stop.send(true);
    });
}

/// A shadow stage before an `Immediate` swap: the candidate is shadowed for the stage's
/// duration (the stable module serving), then swapped in.
#[test]
fn an_immediate_rollout_with_a_shadow_swaps_once_the_shadow_is_done() {
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        let sandbox = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "one", "namespace": NS},
            "spec": {"image": "ghcr.io/cubepod/sandbox-base:1.0"},
        });
        cluster
            .create(Resource::Sandbox, NS, sandbox)
            .await
            .expect("a sandbox");
        // The default policy under another digest: a custom section.
        let mut bytes = DEFAULT_POLICY.to_vec();
        bytes.extend_from_slice(&[0, 5, 4, b'n', b'e', b'x', b't']);
        let stable = manager.policy.current().digest().to_string();
        let strategy = json!({"type": "Immediate", "shadow": {"duration": "30s"}});
        roll_out(&*cluster, SYSTEM, &bytes, strategy).await;
        let shadowing = until(&cluster, "the shadow", |s| {
            s["phase"] == "Shadowing" && s["shadow"]["compared"].as_u64() >= Some(1)
        })
        .await;
        assert_eq!(manager.policy.current().digest(), stable, "{shadowing:#}");
        clock.set(START + 30);
        let promoted = until(&cluster, "promoted", |s| s["phase"] == "Promoted").await;
        assert_ne!(manager.policy.current().digest(), stable, "{promoted:#}");
        let _ = stop.send(true);
    });
}

/// Rolls `module` out as rollout `name` (and its ConfigMap `name`), in the controller's
/// namespace.
async fn roll_out_as(cluster: &MemoryCluster, name: &str, module: &[u8], strategy: Value) {
    use base64::Engine as _;
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": SYSTEM},
        "binaryData": {"policy.wasm": base64::engine::general_purpose::STANDARD.encode(module)},
    });
    cluster
        .create(Resource::ConfigMap, SYSTEM, map)
        .await
        .expect("the module's ConfigMap");
    let rollout = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "PolicyRollout",
        "metadata": {"name": name, "namespace": SYSTEM},
        "spec": {"module": {"configMap": name}, "strategy": strategy},
    });
    cluster
        .create(Resource::PolicyRollout, SYSTEM, rollout)
        .await
        .expect("the rollout");
}

/// The default policy under another digest: a custom section named `tag`.
fn default_variant(tag: &[u8; 4]) -> Vec<u8> {
    let mut bytes = DEFAULT_POLICY.to_vec();
    bytes.extend_from_slice(&[0, 5, 4]);
    bytes.extend_from_slice(tag);
    bytes
}

/// One rollout at a time: a second rollout made during the first's canary waits, its status
/// and one Event naming the first, and the first goes on with its own canary (fed by the
/// reconciles of its share) to its promotion; then the second starts, from the promoted module.
#[test]
fn a_second_rollout_waits_for_the_first_to_finish() {
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        create_sandboxes(&cluster, 10).await;
        let strategy = json!({
            "type": "Progressive",
            "canary": {"steps": [{"weight": 50, "duration": "10s"}]},
        });
        let first = default_variant(b"frst");
        roll_out(&*cluster, SYSTEM, &first, strategy.clone()).await;
        until(&cluster, "the first canary", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;

        roll_out_as(&cluster, "second", &default_variant(b"scnd"), strategy).await;
        let waiting = common::until_named(&*cluster, SYSTEM, "second", "the second waits", |s| {
            s["phase"] == "Waiting"
        })
        .await;
        let progressing = waiting["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Progressing")
            .cloned()
            .unwrap_or_default();
        assert_eq!(progressing["reason"], "WaitingForRollout", "{waiting:#}");
        assert!(
            progressing["message"]
                .as_str()
                .is_some_and(|m| m.contains("waits for PolicyRollout next (Canary)")),
            "{waiting:#}"
        );
        // The first is still the canary running, and walks its step to its promotion.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let held = until(&cluster, "the first still at its step", |_| true).await;
        assert_eq!(held["phase"], "Canary", "{held:#}");
        assert_eq!(manager.policy.current().info().name, "cubepod-default");
        clock.set(START + 10);
        let promoted = until(&cluster, "the first promoted", |s| s["phase"] == "Promoted").await;
        let first_digest = promoted["stable"]["digest"].clone();
        assert_eq!(
            manager.policy.current().digest(),
            first_digest.as_str().unwrap_or_default()
        );

        // Then the second starts, from the module the first promoted.
        let started =
            common::until_named(&*cluster, SYSTEM, "second", "the second's canary", |s| {
                s["phase"] == "Canary"
            })
            .await;
        assert_eq!(started["stable"]["digest"], first_digest, "{started:#}");
        let waited = events_in(&cluster, SYSTEM)
            .await
            .iter()
            .filter(|e| e["involvedObject"]["name"] == "second" && e["reason"] == "RolloutWaiting")
            .count();
        assert_eq!(waited, 1, "one Event when it starts waiting");
        let _ = stop.send(true);
    });
}

/// What the hostile candidate's rollback cases write (`tests/policies/hostile`): its image, its
/// token, and how far ahead it dates an idle pause.
const CANDIDATE_IMAGE: &str = "docker.io/hostile/candidate:1";
const PLANTED_TOKEN: &str = "hostile-planted-token";
const STABLE_IMAGE: &str = "ghcr.io/cubepod/sandbox-base:1.0";

/// Waits (real time, a minute at most) until `object` satisfies `done`; returns it.
async fn until_object(
    cluster: &MemoryCluster,
    resource: Resource,
    name: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let object = cluster.get(resource, NS, name).await.unwrap_or_default();
        if done(&object) {
            return object;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: {object:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod_image(pod: &Value) -> &str {
    pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

fn token(secret: &Value) -> String {
    use base64::Engine as _;
    let data = secret["data"]["token"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// Starts a canary of the hostile policy on every sandbox, lets it write the Sandbox `name`
/// (made once the canary serves, so that the candidate writes its children) until `written`
/// holds of `resource` `child`, then rolls it back by a gate: a sandbox whose status the host
/// refuses (`huge-status`) breaches `maxRefusalRatio`. Returns the running controller.
async fn written_then_rolled_back(
    name: &str,
    resource: Resource,
    child: &str,
    written: impl Fn(&Value) -> bool,
) -> Running {
    let hostile = component("cubepod-hostile-policy", "cubepod_hostile_policy");
    let running = fresh();
    let cluster = &running.cluster;
    let strategy = json!({
        "type": "Progressive",
        "canary": {"steps": [{"weight": 100, "duration": "1h"}]},
        "gates": {"maxRefusalRatio": 0},
    });
    roll_out(&**cluster, SYSTEM, &hostile, strategy).await;
    // The hostile component is large: its admission (compiled unoptimized in a debug build,
    // beside the other tests) takes longer than a minute on a busy machine.
    let started = Instant::now();
    loop {
        let status = cluster
            .get(Resource::PolicyRollout, SYSTEM, ROLLOUT)
            .await
            .map(|o| o["status"].clone())
            .unwrap_or_default();
        if status["phase"] == "Canary" && status["weight"] == 100 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the canary on every sandbox: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let create = async |name: &str| {
        let sandbox = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"image": STABLE_IMAGE},
        });
        cluster
            .create(Resource::Sandbox, NS, sandbox)
            .await
            .expect("a sandbox");
    };
    create(name).await;
    until_object(cluster, resource, child, "the candidate's write", written).await;
    create("huge-status").await;
    let rolled = until(cluster, "rolled back", |s| s["phase"] == "RolledBack").await;
    assert_eq!(rolled["stable"]["name"], "cubepod-default", "{rolled:#}");
    assert_eq!(
        running.manager.policy.current().info().name,
        "cubepod-default"
    );
    running
}

/// A rollback undoes the candidate's Pod: the Pod it made runs its own image; once rolled
/// back, the stable module's Pod, of the spec's image, replaces it.
#[test]
fn a_rollback_replaces_the_pod_the_candidate_made() {
    runtime().block_on(async move {
        let running =
            written_then_rolled_back("candidate-image", Resource::Pod, "candidate-image", |pod| {
                pod_image(pod) == CANDIDATE_IMAGE
            })
            .await;
        until_object(
            &running.cluster,
            Resource::Pod,
            "candidate-image",
            "the stable module's Pod",
            |pod| pod_image(pod) == STABLE_IMAGE,
        )
        .await;
        until_object(
            &running.cluster,
            Resource::Sandbox,
            "candidate-image",
            "running again",
            |s| s["status"]["phase"] == "Running",
        )
        .await;
        let _ = running.stop.send(true);
    });
}

/// A rollback undoes the candidate's Secret: the token it planted is replaced by the stable
/// module's fresh one.
#[test]
fn a_rollback_replaces_the_secret_the_candidate_planted() {
    runtime().block_on(async move {
        let running = written_then_rolled_back(
            "planted-token",
            Resource::Secret,
            "planted-token-credentials",
            |secret| token(secret) == PLANTED_TOKEN,
        )
        .await;
        let secret = until_object(
            &running.cluster,
            Resource::Secret,
            "planted-token-credentials",
            "the stable module's Secret",
            |secret| {
                let token = token(secret);
                !token.is_empty() && token != PLANTED_TOKEN
            },
        )
        .await;
        assert_ne!(token(&secret), PLANTED_TOKEN);
        until_object(
            &running.cluster,
            Resource::Sandbox,
            "planted-token",
            "running again",
            |s| s["status"]["phase"] == "Running",
        )
        .await;
        let _ = running.stop.send(true);
    });
}

/// A rollback undoes the status the candidate chose: a sandbox it paused until a date ten
/// years ahead runs again on new activity, its pause cleared.
#[test]
fn a_rollback_clears_the_pause_the_candidate_dated() {
    runtime().block_on(async move {
        let running =
            written_then_rolled_back("pause-until", Resource::Sandbox, "pause-until", |s| {
                s["status"]["phase"] == "Paused" && s["status"]["idlePausedAt"].is_string()
            })
            .await;
        let activity = cubepod_policy_host::model::time::format(START + 60);
        running.clock.set(START + 60);
        running
            .cluster
            .patch(
                Resource::Sandbox,
                NS,
                "pause-until",
                json!({"metadata": {"annotations": {"cubepod.io/last-activity": activity}}}),
            )
            .await
            .expect("activity");
        let resumed = until_object(
            &running.cluster,
            Resource::Sandbox,
            "pause-until",
            "running again after new activity",
            |s| s["status"]["phase"] == "Running",
        )
        .await;
        assert!(resumed["status"]["idlePausedAt"].is_null(), "{resumed:#}");
        assert!(
            running
                .cluster
                .get(Resource::Pod, NS, "pause-until")
                .await
                .is_ok(),
            "its Pod runs again"
        );
        let _ = running.stop.send(true);
    });
}

/// Waits until [`ROLLOUT`]'s status is past its admission (up to five minutes: the module is
/// compiled and self-tested) and satisfies `done`.
async fn until_admitted(
    cluster: &MemoryCluster,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let within = Duration::from_secs(300);
    common::until_within(cluster, SYSTEM, ROLLOUT, what, within, done).await
}

/// Sandboxes `{prefix}-0` to `{prefix}-{n-1}`.
async fn create_named(cluster: &MemoryCluster, prefix: &str, n: usize) {
    let mut uids = split_uids();
    for n in 0..n {
        let sandbox = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": format!("{prefix}-{n}"), "namespace": NS, "uid": uids.next()},
            "spec": {"image": "ghcr.io/cubepod/sandbox-base:1.0"},
        });
        cluster
            .insert(Resource::Sandbox, sandbox)
            .expect("a sandbox");
    }
}

/// Uids that fall alternately under and over a canary's weight of 50, so that at 50% both
/// modules have sandboxes to reconcile however many a test makes (random uids leave one share
/// empty once in 2^(n-1) runs, and its gate then waits for calls that never come).
fn split_uids() -> impl Iterator<Item = String> {
    let uid = |k: u64| format!("00000000-0000-4000-8000-{k:012x}");
    let mut next = 0u64;
    (0..).map(move |index: u64| {
        let under = index.is_multiple_of(2);
        loop {
            let candidate = uid(next);
            next += 1;
            if (canary_bucket(&candidate) < 50) == under {
                return candidate;
            }
        }
    })
}

/// The Sandboxes of [`NS`].
async fn sandboxes(cluster: &MemoryCluster) -> Vec<Value> {
    let scope = cubepod_kube::Scope {
        resource: Resource::Sandbox,
        namespace: NS.to_string(),
        label_selector: None,
    };
    cluster.list(&scope).await.expect("the Sandboxes").items
}

/// Waits (real time, `within` at most) until the Sandboxes of [`NS`] satisfy `done`; whether
/// they did.
async fn sandboxes_until(
    cluster: &MemoryCluster,
    within: Duration,
    done: impl Fn(&[Value]) -> bool,
) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if done(&sandboxes(cluster).await) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn phase_is(sandbox: &Value, phase: &str) -> bool {
    sandbox["status"]["phase"] == phase
}

/// Every failure gate at its strictest, and a latency gate: on this test's clock (fixed, far
/// past every creationTimestamp) every sandbox has waited about as long, so the progress gate
/// is the one that tells.
fn strictest_canary() -> Value {
    json!({
        "type": "Progressive",
        "canary": {"steps": [{"weight": 50, "duration": "10s"}]},
        "gates": {"maxTrapRatio": 0, "maxRefusalRatio": 0, "maxErrorRatio": 0,
                  "maxReadyLatencyRatio": 2},
    })
}

/// The `Progressing` condition's message.
fn progressing_message(status: &Value) -> String {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Progressing")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The canary's step ends; the rollout is judged: its status once promoted or rolled back.
async fn judged(cluster: &MemoryCluster, clock: &Clock) -> Value {
    clock.set(START + 10);
    until(cluster, "promoted or rolled back", |s| {
        s["phase"] == "Promoted" || s["phase"] == "RolledBack"
    })
    .await
}

/// A candidate whose cleanup never finishes (it deletes nothing and never says done) fails
/// no call: its share of the deleted sandboxes stays Terminating with their Pods running.
/// The canary counts each cleanup it does not finish against it, and rolls it back at the
/// step's end; the stable module then finishes them.
#[test]
fn a_candidate_whose_cleanup_never_finishes_is_rolled_back() {
    let hostile = component("cubepod-hostile-policy", "cubepod_hostile_policy");
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        create_named(&cluster, "cleanup-stuck", 12).await;
        let all_running = sandboxes_until(&cluster, Duration::from_secs(60), |s| {
            s.len() == 12 && s.iter().all(|s| phase_is(s, "Running"))
        })
        .await;
        assert!(all_running, "{:#?}", sandboxes(&cluster).await);
        roll_out(&*cluster, SYSTEM, &hostile, strictest_canary()).await;
        until_admitted(&cluster, "the canary at 50%", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        for n in 0..12 {
            cluster
                .delete(Resource::Sandbox, NS, &format!("cleanup-stuck-{n}"))
                .await
                .expect("deleted");
        }
        // The stable module's share goes; the candidate's stays, Terminating.
        sandboxes_until(&cluster, Duration::from_secs(30), |s| s.len() < 12).await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let stuck = sandboxes(&cluster).await.len();
        assert!(stuck > 0, "the candidate's share is stuck");

        let status = judged(&cluster, &clock).await;
        assert_eq!(status["phase"], "RolledBack", "{status:#}");
        let message = progressing_message(&status);
        assert!(
            message.contains("gate maxProgressShortfall breached")
                && message.contains(&format!("0 of {stuck} of the candidate's cleanups done")),
            "{message}"
        );
        assert_eq!(manager.policy.current().info().name, "cubepod-default");
        // Back on the stable module, their cleanup finishes.
        let gone = sandboxes_until(&cluster, Duration::from_secs(30), |s| s.is_empty()).await;
        assert!(gone, "{:#?}", sandboxes(&cluster).await);
        let _ = stop.send(true);
    });
}

/// A candidate whose reaper idle-pauses every running sandbox, however active: during the
/// canary its reaper decides for its share, and the sandboxes it paused are not Ready at the
/// step's end, against the stable module's all Ready: rolled back.
#[test]
fn a_candidate_whose_reaper_pauses_active_sandboxes_is_rolled_back() {
    let hostile = component("cubepod-hostile-policy", "cubepod_hostile_policy");
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        create_named(&cluster, "reap-active", 12).await;
        let all_running = sandboxes_until(&cluster, Duration::from_secs(60), |s| {
            s.len() == 12 && s.iter().all(|s| phase_is(s, "Running"))
        })
        .await;
        assert!(all_running, "{:#?}", sandboxes(&cluster).await);
        roll_out(&*cluster, SYSTEM, &hostile, strictest_canary()).await;
        until_admitted(&cluster, "the canary at 50%", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        manager.reap().await.expect("a reaper tick");
        // The candidate's share is paused by its next reconciles.
        sandboxes_until(&cluster, Duration::from_secs(5), |s| {
            s.iter().any(|s| phase_is(s, "Paused"))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(800)).await;

        let status = judged(&cluster, &clock).await;
        assert_eq!(status["phase"], "RolledBack", "{status:#}");
        let message = progressing_message(&status);
        assert!(
            message.contains("gate maxProgressShortfall breached")
                && message.contains("of the candidate's sandboxes Ready at the step's end"),
            "{message}"
        );
        assert!(
            status["gates"]["callsByExport"]["reap"]["candidate"].as_u64() >= Some(1),
            "{status:#}"
        );
        assert_eq!(manager.policy.current().info().name, "cubepod-default");
        let _ = stop.send(true);
    });
}

/// A candidate that never errors and never makes progress: its sandboxes never get a Pod
/// and never become Ready. Each counts against it at the step's end (none is left out for
/// never having been Ready): rolled back, while the stable module's share runs.
#[test]
fn a_candidate_whose_sandboxes_never_become_ready_is_rolled_back() {
    let hostile = component("cubepod-hostile-policy", "cubepod_hostile_policy");
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        roll_out(&*cluster, SYSTEM, &hostile, strictest_canary()).await;
        until_admitted(&cluster, "the canary at 50%", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;
        create_named(&cluster, "never-ready", 12).await;
        // The stable module's share runs; the candidate's waits, with no error.
        sandboxes_until(&cluster, Duration::from_secs(30), |s| {
            s.iter().any(|s| phase_is(s, "Running"))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let waiting = sandboxes(&cluster)
            .await
            .iter()
            .filter(|s| !phase_is(s, "Running"))
            .count();
        assert!(waiting > 0, "the candidate's share never runs");

        let status = judged(&cluster, &clock).await;
        assert_eq!(status["phase"], "RolledBack", "{status:#}");
        assert_eq!(status["gates"]["errorRatio"], 0.0, "{status:#}");
        let message = progressing_message(&status);
        assert!(
            message.contains("gate maxProgressShortfall breached")
                && message.contains(&format!(
                    "0 of {waiting} of the candidate's sandboxes Ready at the step's end"
                )),
            "{message}"
        );
        assert_eq!(manager.policy.current().info().name, "cubepod-default");
        // Back on the stable module, they run.
        let running = sandboxes_until(&cluster, Duration::from_secs(30), |s| {
            s.iter().all(|s| phase_is(s, "Running"))
        })
        .await;
        assert!(running, "{:#?}", sandboxes(&cluster).await);
        let _ = stop.send(true);
    });
}

/// The shadow compares cleanups too: a candidate whose cleanup never finishes differs from
/// the stable module on each one, and `maxShadowDifferenceRatio: 0` rolls it back before any
/// sandbox runs on it.
#[test]
fn a_shadow_compares_cleanups_and_its_difference_gate_rolls_back() {
    let hostile = component("cubepod-hostile-policy", "cubepod_hostile_policy");
    runtime().block_on(async move {
        let (cluster, manager, clock, stop) = start();
        create_named(&cluster, "cleanup-stuck", 2).await;
        let all_running = sandboxes_until(&cluster, Duration::from_secs(60), |s| {
            s.len() == 2 && s.iter().all(|s| phase_is(s, "Running"))
        })
        .await;
        assert!(all_running, "{:#?}", sandboxes(&cluster).await);
        let strategy = json!({
            "type": "Immediate",
            "shadow": {"duration": "30s"},
            "gates": {"maxShadowDifferenceRatio": 0},
        });
        roll_out(&*cluster, SYSTEM, &hostile, strategy).await;
        until_admitted(&cluster, "the shadow", |s| s["phase"] == "Shadowing").await;
        for n in 0..2 {
            cluster
                .delete(Resource::Sandbox, NS, &format!("cleanup-stuck-{n}"))
                .await
                .expect("deleted");
        }
        // The stable module's cleanup is the one carried out.
        let gone = sandboxes_until(&cluster, Duration::from_secs(30), |s| s.is_empty()).await;
        assert!(gone, "{:#?}", sandboxes(&cluster).await);
        let status = until(&cluster, "cleanups compared", |s| {
            s["shadow"]["comparedByExport"]["cleanup-sandbox"].as_u64() >= Some(1)
        })
        .await;
        let differs = status["shadow"]["differences"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d["export"] == "cleanup-sandbox");
        assert!(differs, "{status:#}");

        clock.set(START + 30);
        let status = until(&cluster, "judged", |s| {
            s["phase"] == "Promoted" || s["phase"] == "RolledBack"
        })
        .await;
        assert_eq!(status["phase"], "RolledBack", "{status:#}");
        let message = progressing_message(&status);
        assert!(
            message.contains("gate maxShadowDifferenceRatio breached"),
            "{message}"
        );
        assert_eq!(manager.policy.current().info().name, "cubepod-default");
        let _ = stop.send(true);
    });
}

/// A canary held for too few calls names the calls it has seen, and they grow with every
/// reconcile; its status is rewritten with them at most every refresh (2 s of the manager's
/// clock), not at every call, while a transition is written at once.
#[test]
fn a_held_canary_refreshes_its_counts_without_a_write_per_call() {
    runtime().block_on(async move {
        let (cluster, _manager, clock, stop) = start();
        create_sandboxes(&cluster, 6).await;
        let strategy = json!({
            "type": "Progressive",
            "canary": {"steps": [{"weight": 50, "duration": "10s"}]},
            "gates": {"minCallsPerExport": 10000},
        });
        roll_out(&*cluster, SYSTEM, &default_variant(b"held"), strategy).await;
        until_admitted(&cluster, "the canary at 50%", |s| {
            s["phase"] == "Canary" && s["weight"] == 50
        })
        .await;
        clock.set(START + 10);
        let held = until(&cluster, "held for too few calls", |s| {
            progressing(s) == "TooFewCalls"
        })
        .await;
        let first = progressing_message(&held);

        // Every sandbox reconciled again and again: each call grows the stable module's count.
        cluster.clear_writes();
        for round in 0..15 {
            for n in 0..6 {
                cluster
                    .patch(
                        Resource::Sandbox,
                        NS,
                        &format!("s-{n}"),
                        json!({"metadata": {"annotations": {"touched": round.to_string()}}}),
                    )
                    .await
                    .expect("the sandbox patched");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let status_writes = || {
            cluster
                .writes()
                .iter()
                .filter(|w| w.resource == Resource::PolicyRollout)
                .count()
        };
        assert_eq!(
            status_writes(),
            0,
            "the counts changed within one refresh: {:#}",
            until(&cluster, "the status", |_| true).await
        );

        // Past the refresh the message tells the calls seen since.
        clock.set(START + 13);
        let refreshed = until(&cluster, "the counts refreshed", |s| {
            progressing(s) == "TooFewCalls" && progressing_message(s) != first
        })
        .await;
        assert_eq!(refreshed["phase"], "Canary", "{refreshed:#}");
        assert!(status_writes() >= 1);
        let _ = stop.send(true);
    });
}
