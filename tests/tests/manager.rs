//! The control loop in-process against the in-memory cluster: whole lifecycles as a user sees
//! them in the cluster, driven only by writes to Sandbox and PodWarmPool objects.

use std::sync::Arc;
use std::time::Duration;

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::health::Health;
use cubepod_host::controller::manager::{ControllerManager, ManagerConfig};
use cubepod_host::controller::reconcile::Settings;
use cubepod_host::metrics::Metrics;
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::runtime::{PolicyEngine, RuntimeConfig, default_policy};
use serde_json::{Value, json};
use tokio::sync::watch;

const NS: &str = "cubepod-workloads";
const PATIENCE: Duration = Duration::from_secs(30);

/// The real control loop over `cluster` with the default policy, configured by `configure`.
fn manager(
    cluster: &Arc<MemoryCluster>,
    configure: impl FnOnce(&mut ManagerConfig),
) -> Arc<ControllerManager> {
    let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
    let module = engine.load(default_policy::DEFAULT_POLICY).unwrap();
    let mut config = ManagerConfig::for_namespaces(vec![NS.to_string()]);
    configure(&mut config);
    ControllerManager::new(
        cluster.clone(),
        module,
        config,
        Arc::new(Metrics::new()),
        Arc::new(Health::default()),
    )
}

struct Running {
    cluster: Arc<MemoryCluster>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn start() -> Running {
    let cluster = MemoryCluster::new(MemoryClusterConfig {
        pod_start_delay: Duration::from_millis(20),
        pod_stop_delay: Duration::from_millis(20),
        ..MemoryClusterConfig::default()
    });
    let manager = manager(&cluster, |config| {
        config.pool_interval = Duration::from_millis(200);
    });
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(manager.run(shutdown));
    Running {
        cluster,
        stop,
        task,
    }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    async fn create(&self, resource: Resource, object: Value) {
        self.cluster.create(resource, NS, object).await.unwrap();
    }

    async fn get(&self, resource: Resource, name: &str) -> Option<Value> {
        self.cluster.get(resource, NS, name).await.ok()
    }

    fn names(&self, resource: Resource) -> Vec<String> {
        let mut names: Vec<String> = self
            .cluster
            .objects(resource)
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// Waits until `check` holds for the cluster; panics with `what` after [`PATIENCE`].
    async fn until(&self, what: &str, check: impl Fn(&Running) -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !check(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never: {what}\nsandboxes {:?}\npods {:?}\npvcs {:?}",
                self.names(Resource::Sandbox),
                self.names(Resource::Pod),
                self.names(Resource::PersistentVolumeClaim)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn sandbox(&self, name: &str) -> Value {
        self.cluster
            .objects(Resource::Sandbox)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap_or(Value::Null)
    }

    fn pool_ready(&self, pool: &str) -> Option<u64> {
        self.cluster
            .objects(Resource::PodWarmPool)
            .into_iter()
            .find(|o| o["metadata"]["name"] == pool)
            .and_then(|o| o["status"]["ready"].as_u64())
    }

    fn phase(&self, name: &str) -> String {
        self.sandbox(name)["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// PodWarmPool `pool` of `replicas` members of image `py`.
fn pool(replicas: u32) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
        "metadata": {"name": "pool", "namespace": NS},
        "spec": {"replicas": replicas, "template": {"image": "py"}},
    })
}

fn sandbox(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_lives_through_pause_resume_reset_and_delete() {
    let c = start().await;
    c.create(Resource::Sandbox, sandbox("s", json!({"image": "img"})))
        .await;
    c.until("s runs", |c| c.phase("s") == "Running").await;
    let s = c.sandbox("s");
    assert_eq!(s["metadata"]["finalizers"], json!(["cubepod.io/cleanup"]));
    assert_eq!(s["status"]["rootfsPVC"], "s-rootfs-g1");
    assert!(
        s["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.244."))
    );
    assert_eq!(
        c.names(Resource::PersistentVolumeClaim),
        ["s-rootfs-g1", "s-workspace"]
    );
    assert_eq!(c.names(Resource::Secret), ["s-credentials"]);

    let patch = |spec: Value| json!({"spec": spec});
    c.cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            patch(json!({"desiredState": "Paused"})),
        )
        .await
        .unwrap();
    c.until("s pauses", |c| {
        c.phase("s") == "Paused" && c.names(Resource::Pod).is_empty()
    })
    .await;
    assert_eq!(
        c.names(Resource::PersistentVolumeClaim),
        ["s-rootfs-g1", "s-workspace"]
    );
    assert_eq!(c.sandbox("s")["status"]["podIP"], Value::Null);

    c.cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            patch(json!({"desiredState": "Running", "rootfsGeneration": 2})),
        )
        .await
        .unwrap();
    c.until("s runs on generation 2", |c| {
        c.phase("s") == "Running" && c.sandbox("s")["status"]["rootfsPVC"] == "s-rootfs-g2"
    })
    .await;
    assert_eq!(
        c.names(Resource::PersistentVolumeClaim),
        ["s-rootfs-g2", "s-workspace"]
    );
    let pod = c.get(Resource::Pod, "s").await.unwrap();
    assert_eq!(
        pod["metadata"]["labels"]["cubepod.io/rootfs-generation"],
        "2"
    );
    let paused = c.sandbox("s")["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Paused")
        .cloned()
        .unwrap();
    assert_eq!(
        paused["status"], "False",
        "no stale Paused condition: {paused}"
    );

    c.cluster.delete(Resource::Sandbox, NS, "s").await.unwrap();
    c.until("s and its children are gone", |c| {
        c.names(Resource::Sandbox).is_empty()
            && c.names(Resource::Pod).is_empty()
            && c.names(Resource::PersistentVolumeClaim).is_empty()
            && c.names(Resource::Secret).is_empty()
    })
    .await;
    c.stop().await;
}

/// A sandbox's NetworkPolicy exists before its Pod is created, a changed `spec.network` patches
/// it in place (same object, same Pod), and it goes only after the Pod on delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_policy_precedes_the_pod_and_is_patched_in_place() {
    use cubepod_apiserver::WriteVerb;
    let c = start().await;
    c.create(Resource::Sandbox, sandbox("n", json!({"image": "img"})))
        .await;
    c.until("n runs", |c| c.phase("n") == "Running").await;
    let created = |resource: Resource, name: &str| {
        c.cluster.writes().iter().position(|w| {
            w.verb == WriteVerb::Create
                && w.resource == resource
                && w.name == name
                && w.error.is_none()
        })
    };
    let policy_at = created(Resource::NetworkPolicy, "n-network").expect("a NetworkPolicy");
    let pod_at = created(Resource::Pod, "n").expect("a Pod");
    assert!(policy_at < pod_at, "{:?}", c.cluster.writes());
    let policy = c.get(Resource::NetworkPolicy, "n-network").await.unwrap();
    assert_eq!(
        policy["spec"]["podSelector"],
        json!({"matchLabels": {"cubepod.io/sandbox": "n"}})
    );
    assert_eq!(policy["spec"]["egress"].as_array().map(Vec::len), Some(2));
    let pod_uid = c.get(Resource::Pod, "n").await.unwrap()["metadata"]["uid"].clone();
    let hash = policy["metadata"]["annotations"]["cubepod.io/spec-hash"].clone();

    c.cluster.clear_writes();
    c.cluster
        .patch(
            Resource::Sandbox,
            NS,
            "n",
            json!({"spec": {"network": {"egress": "None"}}}),
        )
        .await
        .unwrap();
    c.until("the NetworkPolicy has no egress", |c| {
        c.cluster
            .objects(Resource::NetworkPolicy)
            .iter()
            .any(|p| p["metadata"]["name"] == "n-network" && p["spec"].get("egress").is_none())
    })
    .await;
    let patched = c.get(Resource::NetworkPolicy, "n-network").await.unwrap();
    assert_eq!(patched["metadata"]["uid"], policy["metadata"]["uid"]);
    assert_ne!(
        patched["metadata"]["annotations"]["cubepod.io/spec-hash"],
        hash
    );
    let writes = c.cluster.writes();
    let policy_writes: Vec<WriteVerb> = writes
        .iter()
        .filter(|w| w.resource == Resource::NetworkPolicy)
        .map(|w| w.verb)
        .collect();
    // The create meets AlreadyExists; the one change is the merge patch.
    assert_eq!(
        policy_writes,
        [WriteVerb::Create, WriteVerb::Patch],
        "{writes:?}"
    );
    assert!(
        writes.iter().all(|w| w.resource != Resource::Pod),
        "{writes:?}"
    );
    assert_eq!(
        c.get(Resource::Pod, "n").await.unwrap()["metadata"]["uid"],
        pod_uid
    );

    c.cluster.delete(Resource::Sandbox, NS, "n").await.unwrap();
    c.until("n and its NetworkPolicy are gone", |c| {
        c.names(Resource::Sandbox).is_empty() && c.names(Resource::NetworkPolicy).is_empty()
    })
    .await;
    let writes = c.cluster.writes();
    let deleted = |resource: Resource| {
        writes
            .iter()
            .position(|w| w.verb == WriteVerb::Delete && w.resource == resource)
    };
    let (Some(pod), Some(policy)) = (deleted(Resource::Pod), deleted(Resource::NetworkPolicy))
    else {
        panic!("both deleted: {writes:?}");
    };
    assert!(pod < policy, "{writes:?}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_clones_its_source_and_a_claim_adopts_a_member_the_pool_replaces() {
    let c = start().await;
    c.create(Resource::Sandbox, sandbox("src", json!({"image": "img"})))
        .await;
    c.create(
        Resource::Sandbox,
        sandbox("fork", json!({"image": "img", "forkFrom": "src"})),
    )
    .await;
    c.create(Resource::PodWarmPool, pool(2)).await;
    c.until("the fork runs", |c| c.phase("fork") == "Running")
        .await;
    let fork_ws = c
        .get(Resource::PersistentVolumeClaim, "fork-workspace")
        .await
        .unwrap();
    assert_eq!(fork_ws["spec"]["dataSource"]["name"], "src-workspace");
    let fork_root = c
        .get(Resource::PersistentVolumeClaim, "fork-rootfs-g1")
        .await
        .unwrap();
    assert_eq!(fork_root["spec"]["dataSource"]["name"], "src-rootfs-g1");

    c.until("the pool is ready", |c| c.pool_ready("pool") == Some(2))
        .await;
    c.create(
        Resource::Sandbox,
        sandbox("claim", json!({"image": "py", "warmPool": "pool"})),
    )
    .await;
    c.until("the claim runs on a member", |c| {
        c.phase("claim") == "Running" && c.sandbox("claim")["status"]["podIP"].is_string()
    })
    .await;
    let member = c.sandbox("claim")["status"]["claimedMember"]
        .as_str()
        .unwrap()
        .to_string();
    let adopted = c.sandbox(&member);
    assert_eq!(
        adopted["metadata"]["labels"]["cubepod.io/claimed-by"],
        "claim"
    );
    assert_eq!(adopted["metadata"]["ownerReferences"][0]["name"], "claim");
    assert_eq!(
        c.sandbox("claim")["status"]["podIP"],
        adopted["status"]["podIP"]
    );
    // The claim made no children of its own.
    assert!(c.get(Resource::Pod, "claim").await.is_none());

    c.until("the pool refills", |c| {
        c.pool_ready("pool") == Some(2) && c.names(Resource::Sandbox).len() == 6
    })
    .await;

    c.cluster
        .delete(Resource::Sandbox, NS, "claim")
        .await
        .unwrap();
    c.until("the claim takes its member along", |c| {
        !c.names(Resource::Sandbox).contains(&member) && !c.names(Resource::Pod).contains(&member)
    })
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_spec_is_reported_in_status_and_fixing_it_recovers() {
    let c = start().await;
    // February 31st: the API server's `date-time` format checks a day's digits, not the
    // month's length, so it admits what the controller cannot read.
    c.create(
        Resource::Sandbox,
        sandbox(
            "bad",
            json!({"image": "img", "shutdownTime": "2026-02-31T00:00:00Z"}),
        ),
    )
    .await;
    c.until("the problem is in the status", |c| {
        c.sandbox("bad")["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions.iter().any(|cond| {
                    cond["type"] == "SpecValid"
                        && cond["status"] == "False"
                        && cond["message"].as_str().is_some_and(|m| {
                            m.contains("spec.shutdownTime") && m.contains("2026-02-31")
                        })
                })
            })
    })
    .await;
    assert_eq!(c.phase("bad"), "Failed");
    assert!(
        c.names(Resource::PersistentVolumeClaim).is_empty(),
        "nothing made for a bad spec"
    );
    // Posted after the status is written: waited for, not read at once.
    c.until("an Event says what is wrong", |c| {
        c.cluster.objects(Resource::Event).into_iter().any(|e| {
            e["reason"] == "InvalidSpec"
                && e["involvedObject"]["name"] == "bad"
                && e["type"] == "Warning"
        })
    })
    .await;

    c.cluster
        .patch(
            Resource::Sandbox,
            NS,
            "bad",
            json!({"spec": {"shutdownTime": null}}),
        )
        .await
        .unwrap();
    c.until("the fixed sandbox runs", |c| c.phase("bad") == "Running")
        .await;
    c.stop().await;
}

/// The reaper hands the policy a page of candidates at a time: one tick judges every
/// sandbox of a namespace larger than a page, each decision marked over its own sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reaper_tick_judges_every_page_of_candidates() {
    let cluster = MemoryCluster::new(MemoryClusterConfig::default());
    let names: Vec<String> = (0..7).map(|i| format!("idle-{i}")).collect();
    for name in &names {
        cluster
            .create(
                Resource::Sandbox,
                NS,
                sandbox(name, json!({"image": "img", "idleTimeoutSeconds": 60})),
            )
            .await
            .unwrap();
        // Started long ago, never active since: idle.
        cluster
            .patch_status(
                Resource::Sandbox,
                NS,
                name,
                json!({"status": {"phase": "Running", "startedAt": "2020-01-01T00:00:00Z"}}),
            )
            .await
            .unwrap();
    }
    let manager = manager(&cluster, |config| {
        config.reconcile = Arc::new(Settings {
            reap_page: 3,
            ..Settings::default()
        })
    });
    let (_stop, shutdown) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let synced = manager.spawn_reflectors(&mut tasks, &shutdown);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !synced
        .iter()
        .all(|s| s.load(std::sync::atomic::Ordering::SeqCst))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cache never synced"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Pages of 3, 3 and 1, in one tick.
    assert_eq!(manager.reap().await.unwrap(), 7);
    for name in &names {
        let s = cluster.get(Resource::Sandbox, NS, name).await.unwrap();
        assert!(s["status"]["idlePausedAt"].is_string(), "{name}: {s}");
    }
    tasks.abort_all();
}

/// A member a claim took keeps its name, and once the pool's record has let it go (the claim
/// records it), the pool's policy, which names members by the lowest free index, would choose
/// that name again. The name is listed to it as taken, and the pool fills under other names;
/// so does a name a Sandbox that is no member holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_refills_under_names_that_claims_and_strangers_do_not_hold() {
    let c = start().await;
    // Someone's Sandbox under a name the pool would choose.
    c.create(
        Resource::Sandbox,
        sandbox("pool-1", json!({"image": "other"})),
    )
    .await;
    c.create(Resource::PodWarmPool, pool(1)).await;
    c.until("the pool is ready", |c| c.pool_ready("pool") == Some(1))
        .await;
    c.create(
        Resource::Sandbox,
        sandbox("claim", json!({"image": "py", "warmPool": "pool"})),
    )
    .await;
    c.until("the claim runs on pool-0", |c| {
        c.phase("claim") == "Running" && c.sandbox("claim")["status"]["claimedMember"] == "pool-0"
    })
    .await;
    let recorded = |c: &Running| -> Vec<String> {
        c.cluster
            .objects(Resource::PodWarmPool)
            .first()
            .and_then(|p| p["status"]["memberUIDs"].as_object().cloned())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    c.until("the pool's record lets pool-0 go and it refills", |c| {
        c.pool_ready("pool") == Some(1) && !recorded(c).contains(&"pool-0".to_string())
    })
    .await;

    // Two more: neither pool-0 (the claim's) nor pool-1 (someone's) is chosen.
    c.cluster
        .patch(
            Resource::PodWarmPool,
            NS,
            "pool",
            json!({"spec": {"replicas": 3}}),
        )
        .await
        .unwrap();
    c.until("the pool holds three ready members", |c| {
        c.pool_ready("pool") == Some(3)
    })
    .await;
    let members = recorded(&c);
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(
        !members.contains(&"pool-0".to_string()) && !members.contains(&"pool-1".to_string()),
        "{members:?}"
    );
    assert_eq!(c.sandbox("pool-1")["spec"]["image"], "other");
    assert!(c.sandbox("pool-0")["metadata"]["labels"]["cubepod.io/claimed-by"] == "claim");
    c.stop().await;
}
