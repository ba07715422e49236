//! What the controller does with a hostile policy's outputs, beyond what a scenario shows
//! (`tests/policies/hostile/scenarios/` shows each refusal and its rule): the real
//! `ControllerManager` over a `MemoryCluster` counts each refusal by its rule and as a failed
//! reconcile, counts a budget as a guest trap, surfaces a refusal as one Warning Event however
//! often the policy repeats it, writes nothing of the refused output, and never requeues sooner
//! than a second.
//!
//! Run: `cargo test -p cubepod-host --test hostile_outputs`

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::queue::WorkKey;
use cubepod_host::controller::reconcile::{Carried, Clock, Settings};
use cubepod_host::metrics::Metrics;
use cubepod_kube::{Cluster, Resource, WatchEventType};
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::runtime::{PolicyEngine, PolicyModule, RuntimeConfig};
use serde_json::{Value, json};

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../policy/wasm_build.rs");
}

const NS: &str = "cubepod-workloads";

fn hostile() -> PolicyModule {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent");
    let wasm = wasm_build::build_policy_component(
        workspace,
        "cubepod-hostile-policy",
        "cubepod_hostile_policy",
    )
    .unwrap_or_else(|why| panic!("{why}"));
    PolicyEngine::new(RuntimeConfig::default())
        .expect("an engine")
        .load_file(&wasm)
        .expect("the hostile policy loads")
}

struct Controller {
    cluster: Arc<MemoryCluster>,
    manager: Arc<ControllerManager>,
    metrics: Arc<Metrics>,
}

/// A manager whose cache is fed by hand (no reflectors): each test hands it the objects.
fn controller() -> Controller {
    controller_with(Clock::System)
}

fn controller_with(clock: Clock) -> Controller {
    let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
    let metrics = Arc::new(Metrics::new());
    let manager = ControllerManager::new(
        cluster.clone(),
        hostile(),
        ManagerConfig {
            // A just-started sandbox's status is not held: the requeue is the policy's.
            reconcile: Arc::new(Settings {
                status_coalesce: Duration::ZERO,
                clock,
                ..Settings::default()
            }),
            ..ManagerConfig::for_namespaces(vec![NS.to_string()])
        },
        metrics.clone(),
        Arc::new(Health::default()),
    );
    Controller {
        cluster,
        manager,
        metrics,
    }
}

impl Controller {
    async fn sandbox(&self, name: &str) -> ObjectRef {
        let created = self
            .cluster
            .create(
                Resource::Sandbox,
                NS,
                json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                       "metadata": {"name": name, "namespace": NS},
                       "spec": {"image": "ghcr.io/cubepod/sandbox-base:1.0"}}),
            )
            .await
            .expect("created");
        self.manager
            .cache_writer
            .apply(Resource::Sandbox, WatchEventType::Added, &created);
        ObjectRef::new(NS, name)
    }

    fn events(&self) -> Vec<Value> {
        self.cluster.objects(Resource::Event)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_fails_the_reconcile_is_counted_and_surfaces_once() {
    let c = controller();
    let target = c.sandbox("event-flood").await;
    for _ in 0..3 {
        c.manager.process(WorkKey::Sandbox(target.clone())).await;
    }
    let m = &c.metrics;
    assert_eq!(
        m.reconciles.with_label_values(&["sandbox", "budget"]).get(),
        3
    );
    assert_eq!(
        m.guest_traps
            .with_label_values(&["reconcile-sandbox", "budget"])
            .get(),
        3
    );
    assert_eq!(
        m.boundary_refusals
            .with_label_values(&["output", "sandboxes", "budget"])
            .get(),
        3
    );
    // None of the 5,000 Events; one Warning that says what was refused and where.
    let events = c.events();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["reason"], "PolicyRefused");
    assert_eq!(events[0]["type"], "Warning");
    let message = events[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("refused by rule budget at events"),
        "{message}"
    );
    // Nothing of the output was written: the status holds only the host's condition saying
    // the policy failed, and why.
    let sandbox = c
        .cluster
        .get(Resource::Sandbox, NS, "event-flood")
        .await
        .expect("the sandbox");
    let status = sandbox["status"].as_object().expect("a status");
    assert_eq!(
        status.keys().collect::<Vec<_>>(),
        ["conditions"],
        "{sandbox:#}"
    );
    let conditions = sandbox["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert_eq!(conditions.len(), 1, "{sandbox:#}");
    assert_eq!(conditions[0]["reason"], "PolicyFailed");
    let said = conditions[0]["message"].as_str().unwrap_or_default();
    assert!(said.contains("refused by rule budget at events"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_claim_adopts_nothing_and_counts_under_its_rule() {
    let c = controller();
    c.sandbox("not-a-candidate").await;
    let target = c.sandbox("claim-non-candidate").await;
    c.manager.process(WorkKey::Sandbox(target)).await;
    let m = &c.metrics;
    assert_eq!(
        m.reconciles
            .with_label_values(&["sandbox", "refused"])
            .get(),
        1
    );
    assert_eq!(
        m.boundary_refusals
            .with_label_values(&["output", "sandboxes", "claim"])
            .get(),
        1
    );
    let other = c
        .cluster
        .get(Resource::Sandbox, NS, "not-a-candidate")
        .await
        .expect("the other sandbox");
    assert!(
        other["metadata"].get("ownerReferences").is_none(),
        "{other:#}"
    );
    assert!(other["metadata"].get("labels").is_none(), "{other:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_of_zero_seconds_waits_one_second() {
    let c = controller();
    let target = c.sandbox("requeue-zero").await;
    let pass = c.manager.reconciler.sandbox(&target).await;
    let action = pass.outcome.expect("the reconcile succeeds");
    assert_eq!(
        pass.carried.requeue_after_seconds,
        Some(0),
        "the policy's answer"
    );
    assert_eq!(
        action.requeue_after,
        Some(Duration::from_secs(1)),
        "the controller's"
    );
}

/// Bytes of the manifests the policy's `kube-client` calls of one pass had sent, and how many
/// of its writes were deferred.
fn sent_and_deferred(report: &Carried) -> (usize, usize) {
    use cubepod_policy_host::runtime::bindings::KubeError;
    let mut sent = 0;
    let mut deferred = 0;
    for call in &report.calls {
        match &call.result {
            Ok(()) => sent += call.manifest.as_ref().map_or(0, String::len),
            Err(KubeError::Retryable(r)) if r.message.contains("deferred") => deferred += 1,
            Err(_) => {}
        }
    }
    (sent, deferred)
}

/// `churn` rewrites a 500 KiB NetworkPolicy at every pass, a second apart: past its Sandbox's
/// write rate (1 MiB a minute, at once) each write is deferred, not sent, the Sandbox asked
/// back for when the rate allows, each deferral counted, and the Sandbox told once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_churning_policy_is_held_to_its_sandboxes_write_rate_and_told_once() {
    let c = controller();
    let target = c.sandbox("churn").await;
    let per_minute = 1u64 << 20;
    let started = std::time::Instant::now();
    let (mut sent, mut deferred) = (0usize, 0usize);
    // Until three writes were deferred: a pass that ran past its deadline on a loaded machine
    // sent nothing, and is passed again.
    for _ in 0..30 {
        if deferred >= 3 {
            break;
        }
        let pass = c.manager.reconciler.sandbox(&target).await;
        let (s, d) = sent_and_deferred(&pass.carried);
        sent += s;
        deferred += d;
        if d > 0 {
            // Asked back once the rate allows a 500 KiB write: half a minute, not at once.
            let retry = pass
                .outcome
                .err()
                .and_then(|e| e.retry_after())
                .expect("the policy's error asks for the delay");
            assert!(retry >= Duration::from_secs(10), "{retry:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let allowed = per_minute as f64 * (1.0 + started.elapsed().as_secs_f64() / 60.0);
    assert!(
        (sent as f64) <= allowed,
        "{sent} bytes sent in {:?}",
        started.elapsed()
    );
    assert!(sent >= 900 << 10, "the first writes pass: {sent}");
    assert!(deferred >= 3, "{deferred} deferred");
    assert_eq!(
        c.metrics
            .policy_writes_deferred
            .with_label_values(&["networkpolicies"])
            .get(),
        deferred as u64
    );
    let told: Vec<Value> = c
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "WritesDeferred")
        .collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    let message = told[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("--max-write-bytes-per-minute") && message.contains("NetworkPolicy"),
        "{message}"
    );
    assert_eq!(told[0]["type"], "Warning");
    assert_eq!(
        told[0]["count"], 1,
        "told once, not once per deferred write"
    );
}

/// `event-churn` asks for an Event with a new reason at every pass: its Sandbox gets the
/// burst and no more (each new reason would be an Event object of its own), the rest are
/// counted, and the Sandbox is told once, by an Event of the controller's own bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_churning_events_gets_its_objects_burst_and_is_told_once() {
    let c = controller_with(Clock::fixed(1_767_225_600));
    let target = c.sandbox("event-churn").await;
    let passes = 40;
    for _ in 0..passes {
        c.manager
            .reconciler
            .sandbox(&target)
            .await
            .outcome
            .expect("the reconcile succeeds");
        // A new second for each pass: a new reason, so no two aggregate.
        c.manager
            .reconciler
            .settings
            .clock
            .set(c.manager.reconciler.settings.clock.now() + 1);
    }
    let events = c.events();
    // The policy's: its `Started` of the first pass, and a `Churn...` of each.
    let churned = events
        .iter()
        .filter(|e| e["reason"] != "EventsRateLimited")
        .count();
    let burst = cubepod_policy_host::containment::rates::DEFAULT_EVENT_BURST as usize;
    assert_eq!(
        churned,
        burst,
        "{:?}",
        events.iter().map(|e| &e["reason"]).collect::<Vec<_>>()
    );
    let told: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "EventsRateLimited")
        .collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    assert_eq!(told[0]["count"], 1);
    assert_eq!(
        c.metrics
            .events
            .with_label_values(&["Warning", "rate_limited"])
            .get(),
        (passes + 1 - burst) as u64
    );
}

/// The object of `name` as the API server holds it.
async fn read(c: &Controller, resource: Resource, name: &str) -> Value {
    c.cluster.get(resource, NS, name).await.expect("it exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_object_under_a_child_name_is_a_name_conflict_on_the_sandbox() {
    let c = controller();
    // A user's own Secret, whose name is the child name of a tenant's Sandbox `conflicted`.
    c.cluster
        .create(
            Resource::Secret,
            NS,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "conflicted-credentials", "namespace": NS},
                   "type": "Opaque", "data": {"token": "c2VjcmV0"}}),
        )
        .await
        .expect("created");
    let target = c.sandbox("conflicted").await;
    for _ in 0..2 {
        c.manager.process(WorkKey::Sandbox(target.clone())).await;
    }
    // Told once, by a Warning Event on the Sandbox that names the object.
    let told: Vec<Value> = c
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "NameConflict")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["type"], "Warning");
    assert_eq!(told[0]["involvedObject"]["name"], "conflicted");
    let message = told[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("conflicted-credentials"), "{message}");
    // Never adopted or mounted: the Secret is as the user made it, and no Pod runs.
    let secret = read(&c, Resource::Secret, "conflicted-credentials").await;
    assert!(
        secret["metadata"].get("ownerReferences").is_none(),
        "{secret}"
    );
    assert!(secret["metadata"].get("labels").is_none(), "{secret}");
    assert!(
        c.cluster
            .get(Resource::Pod, NS, "conflicted")
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_sandbox_is_never_bound_as_a_claims_member_by_what_a_tenant_writes() {
    let c = controller();
    let image = "ghcr.io/cubepod/sandbox-base:1.0";
    let claim = c
        .cluster
        .create(
            Resource::Sandbox,
            NS,
            json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                   "metadata": {"name": "claimant", "namespace": NS},
                   "spec": {"image": image, "warmPool": "pool"}}),
        )
        .await
        .expect("created");
    let claim_uid = claim["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    // The claim's status names a member by name alone (as a status written before the
    // controller recorded members' uids would).
    let claim = c
        .cluster
        .patch_status(
            Resource::Sandbox,
            NS,
            "claimant",
            json!({"status": {"claimedMember": "impostor"}}),
        )
        .await
        .expect("patched");
    // A tenant's Sandbox of that name, carrying every mark of the claim's member that anyone
    // who may create a Sandbox may write: the claim's label, the pool's, and a controller
    // reference to the claim's uid; Running and Ready at an address of its choosing.
    c.cluster
        .create(
            Resource::Sandbox,
            NS,
            json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                   "metadata": {"name": "impostor", "namespace": NS,
                                "labels": {"cubepod.io/claimed-by": "claimant",
                                           "cubepod.io/pool": "pool"},
                                "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1",
                                                     "kind": "Sandbox", "name": "claimant",
                                                     "uid": claim_uid, "controller": true}]},
                   "spec": {"image": image}}),
        )
        .await
        .expect("created");
    let impostor = c
        .cluster
        .patch_status(
            Resource::Sandbox,
            NS,
            "impostor",
            json!({"status": {"phase": "Running", "podIP": "10.66.6.6",
                              "conditions": [{"type": "Ready", "status": "True",
                                              "reason": "Running", "message": "",
                                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        )
        .await
        .expect("patched");
    let impostor_uid = impostor["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    for object in [&claim, &impostor] {
        c.manager
            .cache_writer
            .apply(Resource::Sandbox, WatchEventType::Added, object);
    }
    let target = ObjectRef::new(NS, "claimant");
    for _ in 0..2 {
        c.manager.process(WorkKey::Sandbox(target.clone())).await;
    }
    let claim = read(&c, Resource::Sandbox, "claimant").await;
    assert_ne!(
        claim["status"]["claimedMemberUID"].as_str(),
        Some(impostor_uid.as_str()),
        "{claim}"
    );
    assert_ne!(claim["status"]["podIP"], "10.66.6.6", "{claim}");
}
