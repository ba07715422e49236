//! The wasm runtime against real components: the embedded default policy, and
//! `tests/policies/faulty`, built here with a nested cargo, which traps, loops, hogs memory,
//! writes outside the boundary or floods stderr on request. The cluster is a small in-test stub.
//!
//! Run: `cargo test -p cubepod-host --test runtime`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cubepod_host::kube::boundary::Boundary;
use cubepod_host::kube::{
    ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, ObjectList, Resource, Scope, WatchEvent,
};
use cubepod_host::runtime::bindings::{
    DesiredState, EgressMode, KubeError, NetworkSpec, ObservedChildren, ReconcileInput, Sandbox,
    SandboxPhase, SandboxSpec, SandboxStatus, ShutdownPolicy,
};
use cubepod_host::runtime::{
    CONTRACT_VERSION, CallContext, DEFAULT_POLICY, Effect, HostCallRecord, PolicyEngine,
    PolicyModule, RuntimeConfig, RuntimeError, world_exports, world_imports,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

mod wasm_build {
    include!("../wasm_build.rs");
}

const NS: &str = "cubepod-workloads";
const DEADLINE: Duration = Duration::from_millis(200);
const MEMORY_LIMIT: usize = 16 << 20;
const POD_IP: &str = "10.0.0.7";

// ---------------------------------------------------------------------------------------------
// Shared fixtures: one runtime, one engine, each module compiled once.

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
            .unwrap()
    })
}

fn test_config() -> RuntimeConfig {
    RuntimeConfig {
        call_deadline: DEADLINE,
        memory_limit_bytes: MEMORY_LIMIT,
        ..RuntimeConfig::default()
    }
}

fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PolicyEngine::new(test_config()).unwrap())
}

fn default_module() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| engine().load(DEFAULT_POLICY).unwrap())
}

/// `tests/policies/faulty` as a component, built once per test run.
fn faulty_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let wasm = wasm_build::build_policy_component(
            workspace(),
            "cubepod-faulty-policy",
            "cubepod_faulty_policy",
        )
        .unwrap_or_else(|why| panic!("{why}"));
        std::fs::read(wasm).unwrap()
    })
}

fn faulty_module() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| engine().load(faulty_bytes()).unwrap())
}

// ---------------------------------------------------------------------------------------------
// A stub cluster: objects in a map, create/get/delete with the API server's answers.

#[derive(Default)]
struct StubCluster {
    objects: Mutex<BTreeMap<(Resource, String, String), Value>>,
    /// `create pods cubepod-workloads/dev-alice`, in order.
    log: Mutex<Vec<String>>,
    /// Every request waits this long first.
    delay: Duration,
}

impl StubCluster {
    fn slow(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn creates(&self) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|l| l.starts_with("create "))
            .collect()
    }

    async fn enter(&self, line: String) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.log.lock().unwrap().push(line);
    }
}

fn unsupported<T>(what: &str) -> ApiResult<T> {
    Err(ApiError::new(
        ApiErrorKind::Other,
        format!("{what} is not in this stub"),
    ))
}

impl Cluster for StubCluster {
    fn create(
        &self,
        resource: Resource,
        namespace: &str,
        mut object: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let namespace = namespace.to_string();
        Box::pin(async move {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            self.enter(format!("create {resource} {namespace}/{name}"))
                .await;
            let mut objects = self.objects.lock().unwrap();
            let key = (resource, namespace, name.clone());
            if objects.contains_key(&key) {
                return Err(ApiError::new(
                    ApiErrorKind::AlreadyExists,
                    format!("{resource} \"{name}\" already exists"),
                ));
            }
            if resource == Resource::Pod {
                object["status"] = json!({"podIP": POD_IP});
            }
            objects.insert(key, object.clone());
            Ok(object)
        })
    }

    fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            self.enter(format!("get {resource} {namespace}/{name}"))
                .await;
            let objects = self.objects.lock().unwrap();
            objects
                .get(&(resource, namespace.clone(), name.clone()))
                .cloned()
                .ok_or_else(|| ApiError::not_found(resource, &namespace, &name))
        })
    }

    fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<()>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            self.enter(format!("delete {resource} {namespace}/{name}"))
                .await;
            let mut objects = self.objects.lock().unwrap();
            objects
                .remove(&(resource, namespace.clone(), name.clone()))
                .map(drop)
                .ok_or_else(|| ApiError::not_found(resource, &namespace, &name))
        })
    }

    /// An `apply-*` of an object that exists: the patch's fields replace the object's.
    fn patch(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            self.enter(format!("patch {resource} {namespace}/{name}"))
                .await;
            let mut objects = self.objects.lock().unwrap();
            let object = objects
                .get_mut(&(resource, namespace.clone(), name.clone()))
                .ok_or_else(|| ApiError::not_found(resource, &namespace, &name))?;
            if let (Some(object), Some(patch)) = (object.as_object_mut(), patch.as_object()) {
                object.extend(patch.clone());
            }
            Ok(object.clone())
        })
    }

    fn patch_status(
        &self,
        _: Resource,
        _: &str,
        _: &str,
        _: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async { unsupported("patch_status") })
    }

    fn list(&self, _: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        Box::pin(async { unsupported("list") })
    }

    fn watch(
        &self,
        _: &Scope,
        _: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        Box::pin(async { unsupported("watch") })
    }
}

fn context(cluster: &Arc<StubCluster>) -> CallContext {
    let cluster: Arc<dyn Cluster> = cluster.clone();
    CallContext::new(
        cluster,
        Arc::new(Boundary::new([NS])),
        tokio_runtime().handle().clone(),
    )
}

// ---------------------------------------------------------------------------------------------
// Inputs, as the host hands them to the policy.

fn sandbox(name: &str) -> Sandbox {
    Sandbox {
        namespace: NS.to_string(),
        name: name.to_string(),
        uid: format!("uid-{name}"),
        generation: 1,
        deleting: false,
        last_activity: None,
        pool: None,
        claimed_by: None,
        labels: Vec::new(),
        annotations: Vec::new(),
        meta_truncated: false,
        spec: SandboxSpec {
            image: "ghcr.io/cubepod/sandbox-base:1.0".to_string(),
            desired_state: DesiredState::Running,
            rootfs_generation: 1,
            fork_from: None,
            idle_timeout_seconds: None,
            cpu: None,
            memory: None,
            storage_class: None,
            rootfs_size: "10Gi".to_string(),
            workspace_size: "10Gi".to_string(),
            runtime_class: None,
            warm_pool: None,
            network: NetworkSpec {
                egress: EgressMode::Internet,
                allow_cidrs: Vec::new(),
                deny_cidrs: Vec::new(),
            },
            service: None,
            shutdown_time: None,
            shutdown_policy: ShutdownPolicy::Delete,
        },
        status: SandboxStatus {
            phase: SandboxPhase::Pending,
            pod_ip: None,
            rootfs_pvc: None,
            workspace_pvc: None,
            observed_generation: 0,
            conditions: Vec::new(),
            started_at: None,
            idle_paused_at: None,
            claimed_member: None,
            service_fqdn: None,
            shutdown_in: None,
        },
    }
}

fn new_sandbox_input(name: &str) -> ReconcileInput {
    ReconcileInput {
        now: 1_800_000_000,
        sandbox: sandbox(name),
        observed: ObservedChildren {
            pvcs: Vec::new(),
            pod: None,
            secret: false,
            network_policy: None,
            service: None,
        },
        fork_source: None,
        pool_candidates: Vec::new(),
        claimed_member: None,
        fresh_token: "token-0123456789abcdef".to_string(),
        cluster_network: cubepod_host::model::network::default_cluster_network(),
    }
}

fn new_sandbox_creates(name: &str) -> Vec<String> {
    vec![
        format!("create persistentvolumeclaims {NS}/{name}-workspace"),
        format!("create persistentvolumeclaims {NS}/{name}-rootfs-g1"),
        format!("create secrets {NS}/{name}-credentials"),
        format!("create networkpolicies {NS}/{name}-network"),
        format!("create pods {NS}/{name}"),
    ]
}

/// A new sandbox through `module` succeeds with its five creates (the NetworkPolicy before the
/// Pod).
fn assert_reconciles(module: &PolicyModule, name: &str) {
    let cluster = Arc::new(StubCluster::default());
    let call = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input(name))
        .unwrap();
    let output = call.value.unwrap();
    assert_eq!(output.status.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(cluster.creates(), new_sandbox_creates(name));
}

// ---------------------------------------------------------------------------------------------
// The default policy

#[test]
fn the_default_policy_loads_and_describes_itself() {
    let module = default_module();
    assert_eq!(module.info().name, "cubepod-default");
    assert_eq!(module.info().contract_version, "0.1.0");
    assert_eq!(module.describe().unwrap(), *module.info());
    assert_eq!(module.digest(), hex::encode(Sha256::digest(DEFAULT_POLICY)));
    assert_eq!(module.size(), DEFAULT_POLICY.len());
    assert_eq!(module.exports(), world_exports());
}

#[test]
fn a_new_sandbox_makes_exactly_five_creates_and_reports_them() {
    let cluster = Arc::new(StubCluster::default());
    let records = Arc::new(Mutex::new(Vec::<HostCallRecord>::new()));
    let seen = records.clone();
    let ctx = context(&cluster).with_observer(Arc::new(move |r| seen.lock().unwrap().push(r)));

    // As the controller calls it: on a blocking thread of the runtime.
    let module = default_module().clone();
    let blocking = tokio_runtime()
        .spawn_blocking(move || module.reconcile_sandbox(&ctx, new_sandbox_input("dev-alice")));
    let call = tokio_runtime().block_on(blocking).unwrap().unwrap();

    let output = call.value.unwrap();
    assert_eq!(cluster.creates(), new_sandbox_creates("dev-alice"));
    assert_eq!(cluster.log().len(), 5, "{:?}", cluster.log());
    assert_eq!(call.host_calls, 5);
    assert_eq!(output.status.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(
        output.status.rootfs_pvc.as_deref(),
        Some("dev-alice-rootfs-g1")
    );

    let applied: Vec<(Resource, String)> = call
        .effects
        .iter()
        .map(|e| match e {
            Effect::Applied {
                resource,
                namespace,
                name,
                object,
            } => {
                assert_eq!(namespace, NS);
                assert_eq!(object["metadata"]["name"], json!(name));
                (*resource, name.clone())
            }
            Effect::Deleted { .. } => panic!("unexpected delete: {e:?}"),
        })
        .collect();
    assert_eq!(
        applied,
        vec![
            (
                Resource::PersistentVolumeClaim,
                "dev-alice-workspace".to_string()
            ),
            (
                Resource::PersistentVolumeClaim,
                "dev-alice-rootfs-g1".to_string()
            ),
            (Resource::Secret, "dev-alice-credentials".to_string()),
            (Resource::NetworkPolicy, "dev-alice-network".to_string()),
            (Resource::Pod, "dev-alice".to_string()),
        ]
    );
    // The Pod's effect is the object as the API returned it, status included.
    let Some(Effect::Applied { object, .. }) = call.effects.last() else {
        unreachable!()
    };
    assert_eq!(object["status"]["podIP"], json!(POD_IP));

    let records = records.lock().unwrap();
    assert_eq!(records.len(), 5);
    assert!(
        records
            .iter()
            .all(|r| r.verb == "create" && r.result == "ok" && !r.refused)
    );
}

#[test]
fn existing_children_are_success_and_the_pod_ip_is_read_back() {
    let cluster = Arc::new(StubCluster::default());
    let ctx = context(&cluster);
    let module = default_module();
    module
        .reconcile_sandbox(&ctx, new_sandbox_input("dev-bob"))
        .unwrap()
        .value
        .unwrap();

    // The cache has not seen them yet: the same input again meets AlreadyExists everywhere.
    let again = module
        .reconcile_sandbox(&ctx, new_sandbox_input("dev-bob"))
        .unwrap();
    let output = again.value.unwrap();
    assert_eq!(output.status.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(again.effects.len(), 5);
    // The NetworkPolicy that exists is patched in place, the Pod's IP read back.
    let mut expected = new_sandbox_creates("dev-bob");
    expected.insert(4, format!("patch networkpolicies {NS}/dev-bob-network"));
    expected.push(format!("get pods {NS}/dev-bob"));
    assert_eq!(cluster.log()[5..], expected);
}

#[test]
fn host_calls_are_bounded_by_their_own_timeout_not_the_guest_deadline() {
    let module = default_module();

    // Four calls of 150 ms each: well past the 200 ms guest deadline, which counts only the
    // guest's own time, and each well within the host-call timeout.
    let cluster = Arc::new(StubCluster::slow(Duration::from_millis(150)));
    let call = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("dev-slow"))
        .unwrap();
    assert!(call.value.is_ok(), "{:?}", call.value);
    assert_eq!(cluster.creates(), new_sandbox_creates("dev-slow"));

    // A cluster slower than the host-call timeout: the guest is told to retry.
    let cluster = Arc::new(StubCluster::slow(Duration::from_secs(5)));
    let ctx = context(&cluster).with_host_call_timeout(Duration::from_millis(100));
    let started = Instant::now();
    let call = module
        .reconcile_sandbox(&ctx, new_sandbox_input("dev-stuck"))
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    match call.value {
        Err(KubeError::Retryable(retry)) => {
            assert_eq!(retry.delay_ms, 1000);
            assert!(
                retry.message.contains("did not answer"),
                "{}",
                retry.message
            );
        }
        other => panic!("expected a retryable error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The faulty policy: every bound, and the module still serves afterwards.

#[test]
fn an_endless_loop_is_stopped_at_the_deadline() {
    let module = faulty_module();
    let cluster = Arc::new(StubCluster::default());
    let started = Instant::now();
    let err = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("loop-x"))
        .unwrap_err();
    let elapsed = started.elapsed();
    println!("{err} after {elapsed:?}");
    assert!(
        matches!(
            err,
            RuntimeError::DeadlineExceeded {
                export: "reconcile-sandbox",
                deadline: DEADLINE
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "timeout");
    // The deadline plus a few ticks; generous for a loaded CI machine.
    assert!(
        elapsed < DEADLINE + Duration::from_millis(800),
        "{elapsed:?}"
    );
    assert_reconciles(module, "dev-alice");
}

#[test]
fn a_panic_is_a_trap_with_its_message() {
    let module = faulty_module();
    let cluster = Arc::new(StubCluster::default());
    let err = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("trap-x"))
        .unwrap_err();
    println!("{err}");
    let RuntimeError::Trap { export, message } = &err else {
        panic!("expected a trap, got {err:?}");
    };
    assert_eq!(*export, "reconcile-sandbox");
    assert!(message.contains("trap requested by trap-x"), "{message}");
    assert_eq!(err.metric_label(), "trap");
    assert_reconciles(module, "dev-alice");
}

#[test]
fn unbounded_allocation_hits_the_memory_limit() {
    let module = faulty_module();
    let cluster = Arc::new(StubCluster::default());
    let err = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("oom-x"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::MemoryExhausted {
                export: "reconcile-sandbox",
                limit: MEMORY_LIMIT
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "memory");
    assert_reconciles(module, "dev-alice");
}

#[test]
fn a_write_outside_the_namespaces_is_refused_with_the_reason() {
    let module = faulty_module();
    let cluster = Arc::new(StubCluster::default());
    let records = Arc::new(Mutex::new(Vec::<HostCallRecord>::new()));
    let seen = records.clone();
    let ctx = context(&cluster).with_observer(Arc::new(move |r| seen.lock().unwrap().push(r)));
    let call = module
        .reconcile_sandbox(&ctx, new_sandbox_input("escape-x"))
        .unwrap();
    match &call.value {
        Err(KubeError::Refused(reason)) => {
            assert!(reason.contains("\"kube-system\""), "{reason}");
            assert!(reason.contains("outside"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(call.host_calls, 1);
    assert!(call.effects.is_empty());
    assert!(
        cluster.log().is_empty(),
        "reached the cluster: {:?}",
        cluster.log()
    );
    let records = records.lock().unwrap();
    assert_eq!(records.len(), 1);
    assert!(records[0].refused);
    assert_eq!(records[0].resource, Resource::Secret);
    drop(records);
    assert_reconciles(module, "dev-alice");
}

#[test]
fn a_policy_may_write_much_to_stderr() {
    assert_reconciles(faulty_module(), "noisy-x");
}

#[test]
fn the_faulty_policy_describes_itself() {
    assert_eq!(faulty_module().info().name, "cubepod-faulty");
    assert_eq!(faulty_module().info().contract_version, CONTRACT_VERSION);
}

// ---------------------------------------------------------------------------------------------
// Loading

#[test]
fn garbage_does_not_compile() {
    let err = engine().load(b"\0asm but not really").unwrap_err();
    assert!(matches!(err, RuntimeError::Compile { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "compile");
}

#[test]
fn a_missing_file_is_an_io_error() {
    let err = engine()
        .load_file(Path::new("/nonexistent/policy.wasm"))
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Io { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/policy.wasm"),
        "{err}"
    );
}

#[test]
fn compiled_components_are_cached_by_digest() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cubepod-policy-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = PolicyEngine::new(RuntimeConfig {
        cache_dir: Some(dir.clone()),
        ..test_config()
    })
    .unwrap();

    let first = engine.load(DEFAULT_POLICY).unwrap();
    let cached: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let file = cached[0].file_name().unwrap().to_str().unwrap();
    assert!(file.starts_with(&format!("{}-", first.digest())), "{file}");
    assert!(file.ends_with(".cwasm"), "{file}");

    // Loaded from the file this time; the module works the same.
    let second = engine.load(DEFAULT_POLICY).unwrap();
    assert_eq!(second.digest(), first.digest());
    assert_eq!(second.info(), first.info());
    assert_reconciles(&second, "dev-cached");

    // A corrupt cache file is compiled around, not trusted. Replaced, not rewritten in place:
    // the loaded modules map the old file, as the runtime's own writes (temp + rename) allow.
    let corrupt = dir.join("corrupt.tmp");
    std::fs::write(&corrupt, b"not a precompiled component").unwrap();
    std::fs::rename(&corrupt, &cached[0]).unwrap();
    let third = engine.load(DEFAULT_POLICY).unwrap();
    assert_eq!(third.info(), first.info());
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// The contract

/// The `policy-module` world of `wit/`, as wit-parser reads it: (imports, exports, version).
fn wit_world() -> (Vec<String>, Vec<String>, String) {
    let mut resolve = wit_parser::Resolve::new();
    let (package, _) = resolve.push_dir(workspace().join("wit")).unwrap();
    let world = resolve
        .select_world(&[package], Some("policy-module"))
        .unwrap();
    let world = &resolve.worlds[world];
    let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
        let mut names: Vec<String> = items.keys().map(|k| resolve.name_world_key(k)).collect();
        names.sort();
        names
    };
    let version = resolve.packages[package]
        .name
        .version
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    (names(&world.imports), names(&world.exports), version)
}

#[test]
fn the_host_names_the_world_of_wit() {
    let (imports, exports, version) = wit_world();
    assert_eq!(version, CONTRACT_VERSION);
    let mut host_imports = world_imports();
    host_imports.sort();
    assert_eq!(host_imports, imports);
    assert_eq!(world_exports(), exports);
}

#[test]
fn the_components_implement_exactly_the_world_plus_allowed_wasi() {
    let (imports, exports, _) = wit_world();
    for module in [default_module(), faulty_module()] {
        let mut own: Vec<String> = module
            .imports()
            .iter()
            .filter(|n| !n.starts_with("wasi:"))
            .cloned()
            .collect();
        own.sort();
        assert_eq!(own, imports, "{}", module.info().name);
        let mut own_exports = module.exports().to_vec();
        own_exports.sort();
        assert_eq!(own_exports, exports, "{}", module.info().name);
        let wasi: Vec<&String> = module
            .imports()
            .iter()
            .filter(|n| n.starts_with("wasi:"))
            .collect();
        println!("{} imports WASI: {wasi:?}", module.info().name);
        for name in wasi {
            assert!(
                name.starts_with("wasi:cli/") || name.starts_with("wasi:io/"),
                "{name}"
            );
        }
    }
}

/// A full page of reap candidates, as the controller hands them, fits the default memory
/// bound and deadline: the bound an operator keeps need not grow with the cluster.
#[test]
fn a_page_of_reap_candidates_fits_the_default_bounds() {
    use cubepod_host::controller::reconciler::REAP_PAGE;
    use cubepod_host::runtime::bindings::ReapCandidate;
    let engine = PolicyEngine::new(RuntimeConfig::default()).unwrap();
    let module = engine.load(DEFAULT_POLICY).unwrap();
    let now = 1_800_000_000;
    let candidates: Vec<ReapCandidate> = (0..REAP_PAGE)
        .map(|i| ReapCandidate {
            name: format!("sandbox-{i:06}"),
            running: true,
            idle_timeout_seconds: Some(3600),
            // Every tenth idle for a day, the others active a minute ago.
            last_activity: Some(if i % 10 == 0 { now - 86_400 } else { now - 60 }),
            started_at: Some(now - 100_000),
            pool: None,
            claimed_by: None,
            claimed_member: None,
            shutdown_time: None,
            shutdown_policy: ShutdownPolicy::Delete,
        })
        .collect();
    let cluster = Arc::new(StubCluster::default());
    let call = module
        .reap(&context(&cluster), now, NS, &candidates)
        .expect("a page of candidates within the default bounds");
    assert_eq!(call.value.len(), REAP_PAGE / 10);
    assert!(call.value.iter().all(|d| d.name.ends_with('0')));
}
