//! The containment rules against a real hostile component (`tests/policies/hostile`, built
//! here with the shared nested cargo builder), through the runtime and an in-memory cluster
//! that already holds another sandbox's children and an unmanaged Secret: each attack is
//! refused with its rule and field, nothing reaches the cluster, and the call records name
//! the rule.
//!
//! Run: `cargo test -p cubepod-host --test containment`, and on the build a tiered compile
//! serves first (Winch's), `CUBEPOD_POLICY_COMPILE=baseline cargo test -p cubepod-host --test
//! containment` (CI runs both).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_host::controller::cache::CacheWriter;
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::containment::{
    Boundary, Containment, KEPT_PREFIX, Rule, WIDENABLE_POD_FIELDS,
};
use cubepod_policy_host::runtime::bindings::{
    KubeError, PoolInput, ReapCandidate, ShutdownPolicy, UpdateStrategy, WarmPool, WarmPoolSpec,
    WarmPoolStatus,
};
use cubepod_policy_host::runtime::{
    CallContext, Compile, GuestCall, HostCallRecord, PolicyEngine, PolicyModule, RuntimeConfig,
    RuntimeError, Tier,
};
use cubepod_policy_host::twin;
use cubepod_policy_sdk::fixtures;
use serde_json::{Value, json};

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../policy/wasm_build.rs");
}

const NS: &str = fixtures::NAMESPACE;
const VICTIM: &str = "victim";

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

fn tokio_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// `tests/policies/hostile` as a component, built once per test run.
fn hostile_wasm() -> &'static Path {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    WASM.get_or_init(|| {
        wasm_build::build_policy_component(
            workspace(),
            "cubepod-hostile-policy",
            "cubepod_hostile_policy",
        )
        .unwrap_or_else(|why| panic!("{why}"))
    })
}

/// The hostile policy on an engine with the default rules and bounds.
fn hostile() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| hostile_with(Containment::default()))
}

/// The hostile policy where the operator allowed every widenable Pod field
/// (`--allow-pod-field`): what those fields may hold is bounded all the same.
fn hostile_widened() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| {
        hostile_with(Containment {
            extra_pod_fields: WIDENABLE_POD_FIELDS.iter().map(|f| f.to_string()).collect(),
            ..Containment::default()
        })
    })
}

fn hostile_with(containment: Containment) -> PolicyModule {
    let engine = PolicyEngine::new(RuntimeConfig {
        containment: Arc::new(containment),
        max_concurrent_calls: 4,
        ..compiled()
    })
    .expect("an engine");
    load_hostile(&engine)
}

/// The runtime's defaults, compiling as `CUBEPOD_POLICY_COMPILE` says: `baseline` for Winch's
/// build (what a tiered compile serves first), else Cranelift's.
fn compiled() -> RuntimeConfig {
    let compile = match std::env::var("CUBEPOD_POLICY_COMPILE").as_deref() {
        Ok("baseline") => Compile::Baseline,
        _ => Compile::Optimised,
    };
    RuntimeConfig {
        compile,
        ..RuntimeConfig::default()
    }
}

/// The hostile policy loaded by `engine`, on the build asked for.
fn load_hostile(engine: &PolicyEngine) -> PolicyModule {
    let module = engine
        .load(&std::fs::read(hostile_wasm()).expect("the component"))
        .expect("the hostile policy loads");
    let expected = match engine.config().compile {
        Compile::Baseline if cfg!(target_arch = "x86_64") => Tier::Baseline,
        _ => Tier::Optimised,
    };
    assert_eq!(module.tier(), expected, "the build asked for serves");
    module
}

fn managed(resource: Resource, name: &str, sandbox: &str) -> Value {
    let mut object = json!({
        "apiVersion": "v1",
        "kind": resource.kind(),
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/managed-by": "cubepod-controller",
                "cubepod.io/sandbox": sandbox,
            },
        },
    });
    if resource == Resource::PersistentVolumeClaim {
        object["spec"] = json!({
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Block",
            "resources": {"requests": {"storage": "1Gi"}},
        });
    }
    if resource == Resource::Pod {
        object["spec"] = json!({"containers": [{"name": "c", "image": "i"}]});
    }
    object
}

/// A cluster holding the victim's children and an unmanaged Secret; the cache filled from it;
/// a context that records every host call.
struct Harness {
    cluster: Arc<MemoryCluster>,
    records: Arc<Mutex<Vec<HostCallRecord>>>,
    context: CallContext,
    before: Vec<Value>,
}

impl Harness {
    fn new() -> Self {
        Self::with(&[])
    }

    /// Also holding `extra`, which the cache does not hold unless managed.
    fn with(extra: &[(Resource, Value)]) -> Self {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        for (resource, object) in extra {
            cluster.insert(*resource, object.clone()).expect("seed");
        }
        for (resource, name) in [
            (Resource::PersistentVolumeClaim, "victim-workspace"),
            (Resource::PersistentVolumeClaim, "victim-rootfs-g1"),
            (Resource::Secret, "victim-credentials"),
            (Resource::Pod, "victim"),
        ] {
            cluster
                .insert(resource, managed(resource, name, VICTIM))
                .expect("seed");
        }
        cluster
            .insert(
                Resource::Secret,
                json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "registry-credentials", "namespace": NS},
                    "type": "Opaque",
                }),
            )
            .expect("seed");
        let cache = CacheWriter::default();
        for resource in [
            Resource::Pod,
            Resource::PersistentVolumeClaim,
            Resource::Secret,
            Resource::NetworkPolicy,
            Resource::Service,
        ] {
            cache.replace(resource, NS, &cluster.objects(resource));
        }
        cluster.clear_writes();
        let records = Arc::new(Mutex::new(Vec::new()));
        let seen = records.clone();
        let dyn_cluster: Arc<dyn Cluster> = cluster.clone();
        let context = CallContext::new(
            dyn_cluster,
            Arc::new(Boundary::new([NS])),
            tokio_runtime().handle().clone(),
        )
        .with_children(Arc::new(cache))
        .with_observer(Arc::new(move |record| {
            seen.lock().unwrap_or_else(|p| p.into_inner()).push(record)
        }));
        let before = Self::objects(&cluster);
        Self {
            cluster,
            records,
            context,
            before,
        }
    }

    fn objects(cluster: &MemoryCluster) -> Vec<Value> {
        [
            Resource::Pod,
            Resource::PersistentVolumeClaim,
            Resource::Secret,
            Resource::NetworkPolicy,
            Resource::Service,
        ]
        .into_iter()
        .flat_map(|r| cluster.objects(r))
        .collect()
    }

    fn records(&self) -> Vec<HostCallRecord> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// No write request reached the cluster, and it holds what it held.
    fn assert_untouched(&self) {
        assert_eq!(
            self.cluster.writes(),
            Vec::new(),
            "writes reached the cluster"
        );
        assert_eq!(Self::objects(&self.cluster), self.before);
    }

    /// The one call was refused by `rule` at `field`, as the guest, the call records and
    /// the observer all say.
    #[track_caller]
    fn assert_refused<T>(&self, call: &GuestCall<T>, rule: Rule, field: &str) {
        let [kube_call] = call.calls.as_slice() else {
            panic!("expected one kube-client call: {:?}", call.calls);
        };
        let Err(KubeError::Refused(message)) = &kube_call.result else {
            panic!("not refused: {kube_call:?}");
        };
        assert!(
            message.contains(&format!("refused by rule {} at {field}:", rule.label())),
            "{message}"
        );
        let records = self.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert!(records[0].refused, "{records:?}");
        assert_eq!(records[0].rule, Some(rule), "{records:?}");
        assert_eq!(records[0].result, "refused");
        self.assert_untouched();
    }
}

/// `reconcile-sandbox` of a new sandbox named after the case.
fn reconcile(harness: &Harness, case: &str) -> GuestCall<Result<(), KubeError>> {
    reconcile_by(hostile(), harness, case)
}

fn reconcile_by(
    module: &PolicyModule,
    harness: &Harness,
    case: &str,
) -> GuestCall<Result<(), KubeError>> {
    let input = twin::reconcile_input(&fixtures::sandbox(case).input());
    module
        .reconcile_sandbox(&harness.context, input)
        .expect("no trap")
        .map(|value| value.map(drop))
}

#[track_caller]
fn refused(case: &str, rule: Rule, field: &str) {
    refused_by(hostile(), case, rule, field);
}

#[track_caller]
fn refused_by(module: &PolicyModule, case: &str, rule: Rule, field: &str) {
    let harness = Harness::new();
    let call = reconcile_by(module, &harness, case);
    assert!(
        matches!(call.value, Err(KubeError::Refused(_))),
        "{case}: {:?}",
        call.value
    );
    harness.assert_refused(&call, rule, field);
}

#[test]
fn a_privileged_pod_is_refused() {
    refused(
        "privileged",
        Rule::Pod,
        "spec.containers[0].securityContext.privileged",
    );
}

#[test]
fn a_host_network_pod_is_refused() {
    refused("host-network", Rule::Pod, "spec.hostNetwork");
}

#[test]
fn a_pod_without_the_kata_runtime_class_is_refused() {
    refused("no-runtime-class", Rule::Pod, "spec.runtimeClassName");
}

#[test]
fn mounting_another_sandboxs_workspace_is_refused() {
    refused(
        "foreign-workspace",
        Rule::Pod,
        "spec.volumes[1].persistentVolumeClaim.claimName",
    );
}

#[test]
fn reading_another_sandboxs_credentials_is_refused() {
    refused(
        "foreign-secret",
        Rule::Pod,
        "spec.containers[0].env[3].valueFrom.secretKeyRef.name",
    );
}

#[test]
fn cloning_a_volume_without_fork_from_is_refused() {
    refused("clone-without-fork", Rule::Pvc, "spec.dataSource");
}

#[test]
fn an_oversized_volume_is_refused() {
    refused(
        "oversized-volume",
        Rule::Pvc,
        "spec.resources.requests.storage",
    );
}

#[test]
fn a_foreign_service_account_is_refused() {
    refused(
        "foreign-service-account",
        Rule::Pod,
        "spec.serviceAccountName",
    );
}

#[test]
fn a_service_account_token_secret_is_refused() {
    refused("sa-token-secret", Rule::Secret, "type");
}

#[test]
fn deleting_an_unmanaged_object_is_refused() {
    refused("delete-unmanaged", Rule::Scope, "name");
}

#[test]
fn squatting_another_sandboxs_child_name_is_refused() {
    refused("squat", Rule::Scope, "metadata.name");
}

#[test]
fn an_extra_child_is_refused() {
    refused("extra-child", Rule::Scope, "metadata.name");
}

#[test]
fn a_host_path_volume_is_refused() {
    refused("hostpath", Rule::Pod, "spec.volumes[0].hostPath");
}

#[test]
fn a_node_name_is_refused() {
    refused("node-name", Rule::Pod, "spec.nodeName");
}

#[test]
fn an_unknown_field_is_refused() {
    refused("unknown-field", Rule::Pod, "spec.containers[0].hostDevices");
}

#[test]
fn a_rootfs_pvc_of_a_later_generation_than_the_spec_is_refused() {
    refused("future-generation", Rule::Scope, "metadata.name");
}

/// A PVC of `sandbox`'s, as the controller writes it: managed, labelled, and with the
/// controller reference to the Sandbox of `uid`.
fn owned(name: &str, sandbox: &str, uid: &str) -> Value {
    let mut object = managed(Resource::PersistentVolumeClaim, name, sandbox);
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cubepod.io/v1alpha1",
        "kind": "Sandbox",
        "name": sandbox,
        "uid": uid,
        "controller": true,
    }]);
    object
}

#[test]
fn a_fork_clones_what_its_source_owns_not_what_its_status_names() {
    let source = fixtures::sandbox("src")
        // As a lying policy would have written it: the victim's volumes.
        .with_status(|s| {
            s.rootfs_pvc = Some("victim-rootfs-g1".into());
            s.workspace_pvc = Some("victim-workspace".into());
        })
        .build();
    let pvc = Resource::PersistentVolumeClaim;
    let harness = Harness::with(&[
        (pvc, owned("src-rootfs-g1", "src", &source.uid)),
        (pvc, owned("src-workspace", "src", &source.uid)),
    ]);
    let mut input = fixtures::sandbox("fork-status-lie")
        .forked_from("src")
        .input();
    input.fork_source = Some(source);
    let call = hostile()
        .reconcile_sandbox(&harness.context, twin::reconcile_input(&input))
        .expect("no trap");
    assert!(
        matches!(call.value, Err(KubeError::Refused(_))),
        "{:?}",
        call.value
    );
    // The clone of what the status names is refused; the clone of the source's own is not.
    let [lie, truth] = call.calls.as_slice() else {
        panic!("expected two calls: {:?}", call.calls);
    };
    assert_eq!(
        (lie.op, lie.name.as_str()),
        ("ensure-pvc", "fork-status-lie-workspace")
    );
    let Err(KubeError::Refused(message)) = &lie.result else {
        panic!("not refused: {lie:?}");
    };
    assert!(
        message.contains("refused by rule pvc at spec.dataSource.name:")
            && message.contains("\"victim-workspace\""),
        "{message}"
    );
    assert_eq!(truth.name, "fork-status-lie-rootfs-g1");
    assert_eq!(truth.result, Ok(()));
    let records = harness.records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].rule, Some(Rule::Pvc));
    assert!(!records[1].refused, "{records:?}");
    // The one write is the true clone; nothing of the victim's was cloned.
    let writes = harness.cluster.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (writes[0].verb, writes[0].name.as_str()),
        (
            cubepod_apiserver::WriteVerb::Create,
            "fork-status-lie-rootfs-g1"
        )
    );
    let created = harness
        .cluster
        .objects(pvc)
        .into_iter()
        .find(|o| o["metadata"]["name"] == "fork-status-lie-rootfs-g1")
        .expect("the true clone");
    assert_eq!(created["spec"]["dataSource"]["name"], "src-rootfs-g1");
    assert!(
        harness
            .cluster
            .objects(pvc)
            .iter()
            .all(|o| o["metadata"]["name"] != "fork-status-lie-workspace")
    );
}

#[test]
fn a_fork_source_owning_nothing_in_the_cache_gives_nothing_to_clone() {
    // The source's PVCs carry its label but another Sandbox's controller reference: a
    // relabelled volume is not the source's.
    let source = fixtures::sandbox("src")
        .with_status(|s| {
            s.rootfs_pvc = Some("src-rootfs-g1".into());
            s.workspace_pvc = Some("src-workspace".into());
        })
        .build();
    let pvc = Resource::PersistentVolumeClaim;
    let harness = Harness::with(&[
        (pvc, owned("src-workspace", "src", "uid-victim")),
        (pvc, owned("src-rootfs-g1", "src", "uid-victim")),
    ]);
    let mut input = fixtures::sandbox("fork-status-lie")
        .forked_from("src")
        .input();
    input.fork_source = Some(source);
    let call = hostile()
        .reconcile_sandbox(&harness.context, twin::reconcile_input(&input))
        .expect("no trap");
    assert_eq!(call.calls.len(), 2, "{:?}", call.calls);
    for made in &call.calls {
        let Err(KubeError::Refused(message)) = &made.result else {
            panic!("not refused: {made:?}");
        };
        assert!(
            message.contains("refused by rule pvc at spec.dataSource.name:"),
            "{message}"
        );
    }
    assert!(harness.records().iter().all(|r| r.rule == Some(Rule::Pvc)));
    harness.assert_untouched();
}

#[test]
fn a_preempting_priority_class_is_refused_even_where_the_field_is_allowed() {
    refused_by(
        hostile_widened(),
        "priority-critical",
        Rule::Pod,
        "spec.priorityClassName",
    );
}

#[test]
fn a_scheduler_of_the_policys_choosing_is_refused() {
    refused_by(
        hostile_widened(),
        "foreign-scheduler",
        Rule::Pod,
        "spec.schedulerName",
    );
}

#[test]
fn a_toleration_of_every_taint_is_refused() {
    refused_by(
        hostile_widened(),
        "tolerate-all",
        Rule::Pod,
        "spec.tolerations[0].key",
    );
}

#[test]
fn selecting_control_plane_nodes_is_refused() {
    refused_by(
        hostile_widened(),
        "control-plane",
        Rule::Pod,
        "spec.nodeSelector.node-role.kubernetes.io/control-plane",
    );
}

#[test]
fn an_affinity_to_another_sandboxs_pod_is_refused() {
    refused_by(
        hostile_widened(),
        "co-reside",
        Rule::Pod,
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]\
         .labelSelector",
    );
}

#[test]
fn a_century_of_grace_is_refused() {
    refused(
        "century-grace",
        Rule::Pod,
        "spec.terminationGracePeriodSeconds",
    );
}

#[test]
fn resources_past_the_sandbox_bounds_are_refused() {
    refused(
        "huge-resources",
        Rule::Pod,
        "spec.containers[0].resources.requests.cpu",
    );
}

#[test]
fn a_huge_manifest_is_refused_before_parsing_and_kept_as_a_prefix() {
    let harness = Harness::new();
    let call = reconcile(&harness, "huge-manifest");
    harness.assert_refused(&call, Rule::Budget, "manifest");
    let kept = call.calls[0].manifest.as_deref().unwrap_or_default();
    assert!(kept.len() < KEPT_PREFIX + 64, "{} bytes kept", kept.len());
    let Err(KubeError::Refused(message)) = &call.value else {
        panic!("{:?}", call.value);
    };
    assert!(message.len() < 2 * KEPT_PREFIX, "{} bytes", message.len());
}

#[test]
fn a_key_given_twice_is_refused() {
    let harness = Harness::new();
    let call = reconcile(&harness, "duplicate-key");
    harness.assert_refused(&call, Rule::Manifest, "manifest");
    let Err(KubeError::Refused(message)) = &call.value else {
        panic!("{:?}", call.value);
    };
    assert!(
        message.contains("\"hostNetwork\" is given twice"),
        "{message}"
    );
}

#[test]
fn a_flood_of_calls_fails_the_call_at_its_budget_and_writes_nothing_after() {
    let harness = Harness::new();
    let input = twin::reconcile_input(&fixtures::sandbox("flood").input());
    let error = hostile()
        .reconcile_sandbox(&harness.context, input)
        .expect_err("the call fails");
    assert!(matches!(error, RuntimeError::Budget(_)), "{error}");
    assert_eq!(error.metric_label(), "budget");
    assert!(error.to_string().contains("--max-kube-calls"), "{error}");
    let budget = Containment::default().max_kube_calls as usize;
    // The first created the sandbox's own Secret, the rest met it (and read it: it is the
    // sandbox's own); none after the budget.
    let writes = harness.cluster.writes();
    assert_eq!(writes.len(), budget, "{writes:?}");
    let records = harness.records();
    let sent = 1 + 2 * (budget - 1);
    assert_eq!(records.len(), sent + 1, "{records:?}");
    assert!(records[..sent].iter().all(|r| !r.refused));
    assert_eq!(records[sent].rule, Some(Rule::Budget));
}

/// `memory-fill` fills its memory near the call's bound: the call charges the calls' budget
/// for it while it runs and gives it back when it ends; with the budget held by others, the
/// same call fails as a memory failure (retried by the controller), and holds nothing after.
#[test]
fn a_call_filling_its_memory_is_charged_to_the_calls_budget_and_refused_past_it() {
    use cubepod_policy_host::runtime::budget::{Charge, GUEST_MEMORY_CHARGE};
    /// The hostile policy's `MEMORY_FILL_BYTES`.
    const MEMORY_FILL_BYTES: usize = 26 << 20;

    let config = RuntimeConfig {
        max_concurrent_calls: 2,
        ..compiled()
    };
    let bound = config.call_charge_bound();
    let engine = PolicyEngine::new(RuntimeConfig {
        calls_memory_budget_bytes: bound,
        ..config
    })
    .expect("an engine");
    let module = load_hostile(&engine);
    let budget = engine.memory_budget().clone();
    assert_eq!(budget.charged(), 0, "describe at load gave its charge back");

    let harness = Harness::new();
    let call = reconcile_by(&module, &harness, "memory-fill");
    assert_eq!(call.value, Ok(()));
    assert_eq!(budget.charged(), 0, "the call gave its charge back");

    // Others hold all but what the fill needs: the call cannot grow.
    let mut others = Charge::new(budget.clone());
    assert!(others.grow(bound - MEMORY_FILL_BYTES * GUEST_MEMORY_CHARGE));
    let input = twin::reconcile_input(&fixtures::sandbox("memory-fill").input());
    let error = module
        .reconcile_sandbox(&harness.context, input)
        .expect_err("the call fails");
    assert!(
        matches!(error, RuntimeError::MemoryBudget { .. }),
        "{error}"
    );
    assert_eq!(error.metric_label(), "memory");
    assert_eq!(budget.charged(), others.bytes());
    // Once they end, it runs.
    drop(others);
    let call = reconcile_by(&module, &harness, "memory-fill");
    assert_eq!(call.value, Ok(()));
    assert_eq!(budget.charged(), 0);
}

#[test]
fn reconcile_pool_gets_no_cluster_access() {
    let harness = Harness::new();
    let template = twin::sandbox(&fixtures::sandbox("t").build()).spec;
    let input = PoolInput {
        now: fixtures::NOW,
        pool: WarmPool {
            namespace: NS.to_string(),
            name: "pool-writes".to_string(),
            uid: "uid-pool".to_string(),
            generation: 1,
            spec: WarmPoolSpec {
                replicas: 1,
                template,
                update_strategy: UpdateStrategy::Recreate,
            },
            status: WarmPoolStatus {
                replicas: 0,
                ready_replicas: 0,
                observed_generation: 0,
                conditions: Vec::new(),
            },
        },
        members: Vec::new(),
        max_replicas: 10,
    };
    let call = hostile()
        .reconcile_pool(&harness.context, input)
        .expect("no trap");
    assert!(matches!(call.value, Err(KubeError::Refused(_))));
    harness.assert_refused(&call, Rule::Scope, "export");
}

#[test]
fn reap_gets_no_cluster_access() {
    let harness = Harness::new();
    let candidate = ReapCandidate {
        name: "reap-writes".to_string(),
        running: true,
        idle_timeout_seconds: None,
        last_activity: None,
        started_at: None,
        pool: None,
        claimed_by: None,
        claimed_member: None,
        shutdown_time: None,
        shutdown_policy: ShutdownPolicy::Delete,
    };
    let call = hostile()
        .reap(&harness.context, fixtures::NOW, NS, &[candidate])
        .expect("no trap");
    harness.assert_refused(&call, Rule::Scope, "export");
}

#[test]
fn a_cleanup_may_not_delete_another_sandboxs_child() {
    let harness = Harness::new();
    let sandbox = twin::sandbox(&fixtures::sandbox("cleanup-foreign").deleting().build());
    let observed = cubepod_policy_host::model::children::empty();
    let call = hostile()
        .cleanup_sandbox(&harness.context, fixtures::NOW, sandbox, observed)
        .expect("no trap");
    assert!(matches!(call.value, Err(KubeError::Refused(_))));
    harness.assert_refused(&call, Rule::Scope, "name");
}

#[test]
fn a_network_policy_selecting_another_sandbox_is_refused() {
    refused(
        "foreign-network-policy",
        Rule::Network,
        "spec.podSelector.matchLabels",
    );
}

#[test]
fn a_network_policy_wider_than_the_spec_is_refused() {
    refused("open-egress", Rule::Network, "spec.egress[0].to[0].ipBlock");
}

#[test]
fn a_service_selecting_another_sandboxs_pod_is_refused() {
    let harness = Harness::new();
    let sandbox = fixtures::sandbox("foreign-service").with_spec(|s| {
        s.service = Some(cubepod_policy_sdk::bindings::ServiceSpec {
            ports: vec![cubepod_policy_sdk::bindings::ServicePort {
                name: "http".into(),
                port: 8080,
                protocol: cubepod_policy_sdk::bindings::ServiceProtocol::Tcp,
            }],
        })
    });
    let input = twin::reconcile_input(&sandbox.input());
    let call = hostile()
        .reconcile_sandbox(&harness.context, input)
        .expect("no trap");
    assert!(
        matches!(call.value, Err(KubeError::Refused(_))),
        "{:?}",
        call.value
    );
    harness.assert_refused(&call, Rule::Service, "spec.selector");
}

#[test]
fn a_pod_before_its_network_policy_is_refused() {
    refused("pod-before-policy", Rule::Network, "kind");
}

/// Sandbox `sandbox`'s Pod and NetworkPolicy, in the cluster and the cache.
fn running(sandbox: &str) -> Vec<(Resource, Value)> {
    let mut policy = managed(
        Resource::NetworkPolicy,
        &format!("{sandbox}-network"),
        sandbox,
    );
    policy["apiVersion"] = json!("networking.k8s.io/v1");
    policy["spec"] = json!({
        "podSelector": {"matchLabels": {"cubepod.io/sandbox": sandbox}},
        "policyTypes": ["Ingress", "Egress"],
    });
    vec![
        (
            Resource::Pod,
            owned_by(managed(Resource::Pod, sandbox, sandbox), sandbox),
        ),
        (Resource::NetworkPolicy, owned_by(policy, sandbox)),
    ]
}

/// `object` with the controller reference to the fixture Sandbox `sandbox` (its uid is
/// `uid-<sandbox>`), as the controller writes its children.
fn owned_by(mut object: Value, sandbox: &str) -> Value {
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cubepod.io/v1alpha1",
        "kind": "Sandbox",
        "name": sandbox,
        "uid": format!("uid-{sandbox}"),
        "controller": true,
    }]);
    object
}

#[test]
fn deleting_the_network_policy_while_the_pod_exists_is_refused() {
    let harness = Harness::with(&running("delete-network-policy"));
    let call = reconcile(&harness, "delete-network-policy");
    assert!(
        matches!(call.value, Err(KubeError::Refused(_))),
        "{:?}",
        call.value
    );
    harness.assert_refused(&call, Rule::Network, "name");
}

#[test]
fn a_cleanup_may_not_delete_the_network_policy_before_the_pod_is_gone() {
    // The input shows no Pod, the cache does: the cache is what the rule asks.
    let harness = Harness::with(&running("cleanup-policy-first"));
    let sandbox = twin::sandbox(&fixtures::sandbox("cleanup-policy-first").deleting().build());
    let observed = cubepod_policy_host::model::children::empty();
    let call = hostile()
        .cleanup_sandbox(&harness.context, fixtures::NOW, sandbox, observed)
        .expect("no trap");
    assert!(matches!(call.value, Err(KubeError::Refused(_))));
    harness.assert_refused(&call, Rule::Network, "name");
}

#[test]
fn a_pod_after_its_network_policy_was_deleted_in_the_call_is_refused() {
    let harness = Harness::new();
    let call = reconcile(&harness, "policy-swap-in-call");
    let ops: Vec<&str> = call.calls.iter().map(|c| c.op).collect();
    assert_eq!(
        ops,
        [
            "apply-network-policy",
            "delete-network-policy",
            "ensure-pod"
        ]
    );
    assert!(call.calls[0].result.is_ok() && call.calls[1].result.is_ok());
    let Err(KubeError::Refused(message)) = &call.calls[2].result else {
        panic!("not refused: {:?}", call.calls[2]);
    };
    assert!(
        message.contains("refused by rule network at kind:"),
        "{message}"
    );
    let records = harness.records();
    assert_eq!(records.last().and_then(|r| r.rule), Some(Rule::Network));
    // The NetworkPolicy came and went; no Pod was sent.
    assert_eq!(Harness::objects(&harness.cluster), harness.before);
}

#[test]
fn a_network_policy_reaching_the_metadata_address_in_nat64_form_is_refused() {
    refused(
        "egress-metadata",
        Rule::Network,
        "spec.egress[0].to[2].ipBlock",
    );
}

#[test]
fn a_network_policy_reaching_translated_forms_of_blocked_addresses_is_refused() {
    // `::/0` excepting only the IPv6 private ranges contains the NAT64, 6to4 and
    // IPv4-compatible forms of the metadata address, the API server and the cluster's ranges.
    refused(
        "egress-translated",
        Rule::Network,
        "spec.egress[0].to[1].ipBlock",
    );
}

/// An object of `name` that no Sandbox owns: a user's own, which a tenant's Sandbox name makes
/// one of its child names.
fn strangers(resource: Resource, name: &str) -> Value {
    let mut object = json!({
        "apiVersion": "v1",
        "kind": resource.kind(),
        "metadata": {"name": name, "namespace": NS},
    });
    match resource {
        Resource::PersistentVolumeClaim => {
            object["spec"] = json!({
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "resources": {"requests": {"storage": "1Gi"}},
            });
        }
        Resource::Secret => {
            object["type"] = json!("Opaque");
            object["data"] = json!({"token": "c2VjcmV0"});
        }
        _ => {
            object["spec"] = json!({"containers": [{"name": "c", "image": "i"}]});
            object["status"] = json!({"podIP": "10.244.9.9"});
        }
    }
    object
}

#[track_caller]
fn assert_name_conflict(call: &GuestCall<Result<(), KubeError>>, op: &str, name: &str) {
    let conflict = call
        .calls
        .iter()
        .find(|c| c.op == op && c.name == name)
        .unwrap_or_else(|| panic!("no {op} of {name}: {:?}", call.calls));
    let Err(KubeError::Conflict(message)) = &conflict.result else {
        panic!("not a name conflict: {conflict:?}");
    };
    assert!(message.starts_with("NameConflict: "), "{message}");
    assert!(message.contains(name), "{message}");
    assert!(
        call.name_conflicts.iter().any(|m| m.contains(name)),
        "{:?}",
        call.name_conflicts
    );
}

#[test]
fn create_if_absent_never_adopts_another_users_secret_or_volume() {
    // A user's own Secret and PVC, which a tenant's Sandbox `adopt` names as its children.
    let harness = Harness::with(&[
        (
            Resource::PersistentVolumeClaim,
            strangers(Resource::PersistentVolumeClaim, "adopt-workspace"),
        ),
        (
            Resource::Secret,
            strangers(Resource::Secret, "adopt-credentials"),
        ),
    ]);
    let call = reconcile(&harness, "adopt");
    assert!(
        matches!(&call.value, Err(KubeError::Conflict(m)) if m.starts_with("NameConflict")),
        "{:?}",
        call.value
    );
    assert_name_conflict(&call, "ensure-pvc", "adopt-workspace");
    // Nothing mounts them: the reconcile went no further than the first conflict.
    assert!(
        call.calls.iter().all(|c| c.op != "ensure-pod"),
        "{:?}",
        call.calls
    );
    let objects = Harness::objects(&harness.cluster);
    for (kind, name) in [
        ("PersistentVolumeClaim", "adopt-workspace"),
        ("Secret", "adopt-credentials"),
    ] {
        let held = objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .expect("still there");
        assert!(held["metadata"].get("ownerReferences").is_none(), "{held}");
        assert!(held["metadata"].get("labels").is_none(), "{held}");
    }
    assert!(
        objects
            .iter()
            .all(|o| o["kind"] != "Pod" || o["metadata"]["name"] != "adopt")
    );
}

#[test]
fn a_pod_created_under_a_sandboxs_future_name_is_not_reported_as_its_own() {
    // An unlabelled Pod with the name the Sandbox's Pod will have, and an IP.
    let harness = Harness::with(&[(Resource::Pod, strangers(Resource::Pod, "future"))]);
    let call = reconcile(&harness, "future");
    assert_name_conflict(&call, "ensure-pod", "future");
    // The Pod's IP is not the sandbox's: the guest never got it.
    let pod = call
        .calls
        .iter()
        .find(|c| c.op == "ensure-pod")
        .expect("the ensure");
    assert!(pod.result.is_err(), "{pod:?}");
    assert!(call.value.is_err(), "{:?}", call.value);
    let objects = Harness::objects(&harness.cluster);
    let held = objects
        .iter()
        .find(|o| o["kind"] == "Pod" && o["metadata"]["name"] == "future")
        .expect("still there");
    assert!(held["metadata"].get("labels").is_none(), "{held}");
}

#[test]
fn a_delete_of_a_strangers_object_under_its_child_names_sends_nothing() {
    // Labelled as the sandbox's, managed even, but with no controller reference to it: the
    // cache holds them under its name, and they are still not its children.
    let harness = Harness::with(&[
        (
            Resource::Secret,
            managed(
                Resource::Secret,
                "delete-strangers-credentials",
                "delete-strangers",
            ),
        ),
        (
            Resource::PersistentVolumeClaim,
            managed(
                Resource::PersistentVolumeClaim,
                "delete-strangers-workspace",
                "delete-strangers",
            ),
        ),
    ]);
    let call = reconcile(&harness, "delete-strangers");
    // Both deletes answered as done (the objects are not the sandbox's: for it, they are
    // gone), and neither sent.
    assert_eq!(call.calls.len(), 2, "{:?}", call.calls);
    assert!(
        call.calls.iter().all(|c| c.result.is_ok()),
        "{:?}",
        call.calls
    );
    assert_eq!(call.name_conflicts.len(), 2, "{:?}", call.name_conflicts);
    harness.assert_untouched();
    // Its own, with its controller reference: deleted.
    let mut secret = owned(
        "delete-strangers-credentials",
        "delete-strangers",
        "uid-delete-strangers",
    );
    secret["kind"] = json!("Secret");
    secret["apiVersion"] = json!("v1");
    secret.as_object_mut().map(|o| o.remove("spec"));
    let harness = Harness::with(&[(Resource::Secret, secret)]);
    let call = reconcile(&harness, "delete-strangers");
    assert!(call.name_conflicts.is_empty(), "{:?}", call.name_conflicts);
    assert!(
        Harness::objects(&harness.cluster)
            .iter()
            .all(|o| o["metadata"]["name"] != "delete-strangers-credentials"),
        "its own Secret was not deleted"
    );
}

#[test]
fn a_network_policy_reaching_a_protected_allow_cidr_is_refused() {
    // The controller refuses such a spec before the policy runs; the boundary refuses the
    // NetworkPolicy all the same (here the default's own, through the runtime alone).
    let harness = Harness::new();
    let sandbox = fixtures::sandbox("dev-carol").with_spec(|s| {
        s.network.allow_cidrs = vec!["169.254.169.254/32".into()];
    });
    let input = twin::reconcile_input(&sandbox.input());
    let call = hostile()
        .reconcile_sandbox(&harness.context, input)
        .expect("no trap");
    let refused = call.calls.last().expect("calls");
    assert_eq!(refused.op, "apply-network-policy");
    let Err(KubeError::Refused(message)) = &refused.result else {
        panic!("not refused: {refused:?}");
    };
    assert!(
        message.contains("refused by rule network at spec.egress[0].to[2].ipBlock:"),
        "{message}"
    );
    assert!(
        Harness::objects(&harness.cluster)
            .iter()
            .all(|o| o["kind"] != "Pod" || o["metadata"]["name"] != "dev-carol")
    );
}

#[test]
fn a_well_behaved_sandbox_still_gets_its_children() {
    let harness = Harness::new();
    let input = twin::reconcile_input(&fixtures::sandbox("dev-alice").input());
    let call = hostile()
        .reconcile_sandbox(&harness.context, input)
        .expect("no trap");
    assert!(call.value.is_ok(), "{:?}", call.value);
    // Two PVCs, the Secret, the NetworkPolicy, then the Pod.
    assert_eq!(call.calls.len(), 5);
    assert_eq!(call.calls[3].op, "apply-network-policy");
    assert_eq!(call.calls[4].op, "ensure-pod");
    assert!(
        harness
            .records()
            .iter()
            .all(|r| !r.refused && r.rule.is_none())
    );
    assert_eq!(harness.cluster.writes().len(), 5);
}

#[test]
fn a_delete_of_what_the_cache_does_not_hold_sends_nothing() {
    // An unmanaged Pod that bears a sandbox's own name: the cache does not hold it.
    let squatter = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dev-bob", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    });
    let harness = Harness::with(&[(Resource::Pod, squatter)]);
    let mut observed = cubepod_policy_host::model::children::empty();
    observed.pod = Some(cubepod_policy_host::runtime::bindings::ObservedPod {
        name: "dev-bob".to_string(),
        deleting: false,
        ip: None,
        ready: false,
        rootfs_generation: Some(1),
    });
    let sandbox = twin::sandbox(&fixtures::sandbox("dev-bob").deleting().build());
    let call = hostile()
        .cleanup_sandbox(&harness.context, fixtures::NOW, sandbox, observed)
        .expect("no trap");
    assert!(call.value.is_ok(), "{:?}", call.value);
    assert_eq!(call.calls.len(), 1);
    assert_eq!(call.calls[0].op, "delete-pod");
    assert_eq!(call.calls[0].result, Ok(()));
    assert!(call.effects.is_empty(), "{:?}", call.effects);
    assert_eq!(harness.records(), Vec::new());
    harness.assert_untouched();
}

/// `policy test` runs the same import: the scenarios of the hostile policy expect each
/// refusal, with its rule and field, as the controller makes it (with every widenable Pod
/// field allowed, whose values are bounded all the same).
#[test]
fn policy_test_shows_the_same_refusals() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cubepod-controller"))
        .args(["policy", "test"])
        .arg(format!(
            "--allow-pod-field={}",
            WIDENABLE_POD_FIELDS.join(",")
        ))
        .arg(hostile_wasm())
        .arg("tests/policies/hostile/scenarios")
        .current_dir(workspace())
        .env_remove("CUBEPOD_GUEST_MEMORY_MIB")
        .env_remove("CUBEPOD_MAX_KUBE_CALLS")
        .env_remove("CUBEPOD_MAX_MANIFEST_BYTES")
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Its scenarios, after the conformance cases the controller admits it by.
    let passed = 40 + cubepod_host::scenario::conformance::cases().len();
    assert!(
        stdout.ends_with(&format!("{passed} passed, 0 failed\n")),
        "{stdout}"
    );
}
