//! The wasm runtime against real components: the embedded default policy, the frozen default
//! policy of contract 0.1.0 (`tests/fixtures/contract-0.1.0/`), `tests/policies/faulty`, built
//! here with a nested cargo, which traps, loops, hogs memory, writes outside the boundary or
//! floods stderr on request, `tests/policies/nostd`, which panics or hogs memory without
//! std, as the default policy is built, and `tests/policies/python-raises`, built by
//! componentize-py (installed by `.ci/policy-toolchains`), which raises and sleeps. The cluster
//! is a small in-test stub.
//!
//! Run: `cargo test -p cubepod-host --test runtime`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cubepod_kube::{
    ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, ObjectList, Resource, Scope, WatchEvent,
};
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::containment::Containment;
use cubepod_policy_host::fixtures;
use cubepod_policy_host::runtime::bindings::{
    DesiredState, EgressMode, KubeError, ObservedChildren, ObservedObject, ObservedPod,
    ObservedPvc, PoolInput, ReapAction, ReapCandidate, ReconcileInput, Sandbox, SandboxPhase,
    ShutdownPolicy, UpdateStrategy, WarmPool, WarmPoolSpec, WarmPoolStatus,
};
use cubepod_policy_host::runtime::{
    AddressSpace, CONTRACT_VERSION, CallContext, Contract, DEFAULT_POLICY, Effect, HostCallRecord,
    MemoBounds, MemoStats, PolicyEngine, PolicyModule, RuntimeConfig, RuntimeError,
    wasmtime_config,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../policy/wasm_build.rs");
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

/// `tests/policies/nostd` as a component, built and compiled once per test run.
fn nostd_module() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| {
        let wasm = wasm_build::build_policy_component(
            workspace(),
            "cubepod-nostd-policy",
            "cubepod_nostd_policy",
        )
        .unwrap_or_else(|why| panic!("{why}"));
        engine().load(&std::fs::read(wasm).unwrap()).unwrap()
    })
}

/// The default policy as built against contract 0.1.0, frozen.
fn fixture_0_1_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        std::fs::read(workspace().join("tests/fixtures/contract-0.1.0/cubepod-default-0.1.0.wasm"))
            .unwrap()
    })
}

fn fixture_0_1() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| engine().load(fixture_0_1_bytes()).unwrap())
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
    fixtures::new_sandbox(NS, name)
}

fn new_sandbox_input(name: &str) -> ReconcileInput {
    fixtures::new_sandbox_input(NS, name, 1_800_000_000)
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

/// What a 0.1 module's call creates for a new sandbox: the host's NetworkPolicy first (its
/// contract has none), then the module's four.
fn creates_of_a_0_1_module(name: &str) -> Vec<String> {
    let mut creates = new_sandbox_creates(name);
    let policy = creates.remove(3);
    creates.insert(0, policy);
    creates
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
    assert_eq!(module.info().contract_version, CONTRACT_VERSION);
    assert_eq!(module.contract(), Contract::CURRENT);
    assert_eq!(module.describe().unwrap(), *module.info());
    assert_eq!(module.digest(), hex::encode(Sha256::digest(DEFAULT_POLICY)));
    assert_eq!(module.size(), DEFAULT_POLICY.len());
    assert_eq!(module.exports(), Contract::CURRENT.world_exports());
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

    // The cache has not seen them yet: the same input again meets AlreadyExists everywhere;
    // each object read back carries this sandbox's controller reference, so it is its own (a
    // stranger's is a NameConflict: host/tests/containment.rs), and the Pod's IP is read back.
    let unseen = module
        .reconcile_sandbox(&ctx, new_sandbox_input("dev-bob"))
        .unwrap();
    match &unseen.value {
        Ok(output) => assert_eq!(output.status.pod_ip.as_deref(), Some(POD_IP)),
        Err(error) => panic!("the sandbox's own children refused: {error:?}"),
    }
    let after_unseen = cluster.log().len();
    // Observed as its own (with an older spec's digest), it is patched in place and the Pod's
    // IP read back.
    let mut input = new_sandbox_input("dev-bob");
    input.observed.network_policy = Some(ObservedObject {
        name: "dev-bob-network".to_string(),
        deleting: false,
        spec_hash: Some("0000000000000000".to_string()),
    });
    let again = module.reconcile_sandbox(&ctx, input).unwrap();
    let output = again.value.unwrap();
    assert_eq!(output.status.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(again.effects.len(), 5);
    // Each object met is read back to see whose it is; the NetworkPolicy, observed as the
    // sandbox's own, is patched instead.
    let expected: Vec<String> = [
        "create persistentvolumeclaims {NS}/dev-bob-workspace",
        "get persistentvolumeclaims {NS}/dev-bob-workspace",
        "create persistentvolumeclaims {NS}/dev-bob-rootfs-g1",
        "get persistentvolumeclaims {NS}/dev-bob-rootfs-g1",
        "create secrets {NS}/dev-bob-credentials",
        "get secrets {NS}/dev-bob-credentials",
        "create networkpolicies {NS}/dev-bob-network",
        "patch networkpolicies {NS}/dev-bob-network",
        "create pods {NS}/dev-bob",
        "get pods {NS}/dev-bob",
    ]
    .iter()
    .map(|line| line.replace("{NS}", NS))
    .collect();
    assert_eq!(cluster.log()[after_unseen..], expected);
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
    let module = PolicyEngine::new(RuntimeConfig {
        host_call_timeout: Duration::from_millis(100),
        ..test_config()
    })
    .unwrap()
    .load(DEFAULT_POLICY)
    .unwrap();
    let started = Instant::now();
    let call = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("dev-stuck"))
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
fn an_endless_loop_leaves_the_runtime_to_its_other_tasks() {
    // One thread for everything, as a controller's busy worker is: the spinning call must
    // yield to the other tasks (watches, leases, /healthz) at every epoch tick while it runs.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cluster: Arc<dyn Cluster> = Arc::new(StubCluster::default());
    let ctx = CallContext::new(
        cluster,
        Arc::new(Boundary::new([NS])),
        runtime.handle().clone(),
    );
    let ticks = Arc::new(AtomicU32::new(0));
    let err = runtime.block_on(async {
        let counted = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        let err = faulty_module()
            .reconcile_sandbox_async(&ctx, new_sandbox_input("loop-x"))
            .await
            .unwrap_err();
        ticker.abort();
        err
    });
    assert!(
        matches!(err, RuntimeError::DeadlineExceeded { .. }),
        "{err:?}"
    );
    // 200 ms of spinning, a yield every 10 ms tick: the other task ran between them (it could
    // not run at all if the call held the thread to its deadline).
    let ticks = ticks.load(Ordering::Relaxed);
    assert!(
        ticks >= 5,
        "the other task ran {ticks} times during the call"
    );
}

#[test]
fn calls_sharing_a_thread_are_each_charged_only_their_own_time() {
    // One thread, four spinning calls at once, as a busy controller runs several reconciles
    // on a worker: each yields at every tick and the others run meanwhile. Each must still get
    // its whole deadline of its own time, so together they hold the thread for at least four
    // deadlines. Charged the others' time as well, every one would stop after about one.
    const CALLS: u32 = 4;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cluster: Arc<dyn Cluster> = Arc::new(StubCluster::default());
    let ctx = CallContext::new(
        cluster,
        Arc::new(Boundary::new([NS])),
        runtime.handle().clone(),
    );
    let module = faulty_module();
    let started = Instant::now();
    let errors = runtime.block_on(async {
        let calls: Vec<_> = (0..CALLS)
            .map(|n| {
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    module
                        .reconcile_sandbox_async(&ctx, new_sandbox_input(&format!("loop-{n}")))
                        .await
                        .err()
                })
            })
            .collect();
        let mut errors = Vec::new();
        for call in calls {
            errors.push(call.await.unwrap());
        }
        errors
    });
    let elapsed = started.elapsed();
    for error in errors {
        assert!(
            matches!(error, Some(RuntimeError::DeadlineExceeded { .. })),
            "{error:?}"
        );
    }
    // A lower bound only: a loaded machine can make the calls slower, never faster.
    assert!(
        elapsed >= DEADLINE * CALLS,
        "{CALLS} calls of a {DEADLINE:?} deadline each ended after {elapsed:?} in all"
    );
}

#[test]
fn a_module_that_names_itself_with_a_forged_line_is_refused_at_load() {
    // The default policy, its name's `-` made a newline in the data its `describe` copies: a
    // name that would write a line of its own into `/readyz` and the text log.
    let (from, to) = (b"cubepod-default", b"cubepod\ndefault");
    let at = DEFAULT_POLICY
        .windows(from.len())
        .position(|w| w == from)
        .expect("the default policy holds its name");
    let mut bytes = DEFAULT_POLICY.to_vec();
    bytes[at..at + to.len()].copy_from_slice(to);
    let err = engine().load(&bytes).unwrap_err();
    assert!(matches!(err, RuntimeError::Contract { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(r#"describe gives the name "cubepod\ndefault""#),
        "{message}"
    );
    assert!(
        !message.contains('\n'),
        "the refusal is one line: {message}"
    );
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
    assert_hits_memory_limit(faulty_module());
}

/// Without std the panic handler is the SDK's (`no_std_runtime!`): its message still reaches
/// the trap's, and the module goes on.
#[test]
fn a_no_std_policy_s_panic_is_a_trap_with_its_message() {
    let module = nostd_module();
    let cluster = Arc::new(StubCluster::default());
    let err = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("panic-x"))
        .unwrap_err();
    let RuntimeError::Trap { export, message } = &err else {
        panic!("expected a trap, got {err:?}");
    };
    assert_eq!(*export, "reconcile-sandbox");
    assert!(
        message.contains("panicked at ")
            && message.contains("nostd policy: panic requested by panic-x"),
        "{message}"
    );
    assert_eq!(err.metric_label(), "trap");
    assert_reconciles(module, "dev-alice");
}

/// A panic's message longer than the runtime's stack buffer is cut there, not lost: the trap
/// carries its start.
#[test]
fn a_no_std_policy_s_long_panic_message_is_cut_not_lost() {
    let module = nostd_module();
    let cluster = Arc::new(StubCluster::default());
    let err = module
        .reconcile_sandbox(&context(&cluster), new_sandbox_input("long-panic-x"))
        .unwrap_err();
    let RuntimeError::Trap { message, .. } = &err else {
        panic!("expected a trap, got {err:?}");
    };
    assert!(
        message.contains("nostd policy: long panic requested by long-panic-x: yyy"),
        "{message}"
    );
    // The message's 4,096 `y`s, as many as fit in the buffer after its start.
    let longest_run = message.split(|c| c != 'y').map(str::len).max().unwrap_or(0);
    let buffer = cubepod_policy_sdk::bare::PANIC_MESSAGE_BYTES;
    assert!(
        longest_run > buffer - 200 && longest_run < buffer,
        "{longest_run} of the message's 4096 bytes of filler"
    );
    assert_reconciles(module, "dev-alice");
}

/// Without std an allocation that fails panics (`handle_alloc_error`) into the SDK's handler,
/// not std's abort: the call still ends at the memory limit as with std, and the module goes
/// on.
#[test]
fn a_no_std_policy_s_unbounded_allocation_hits_the_memory_limit() {
    assert_hits_memory_limit(nostd_module());
}

/// The faulty policy's `oom-x` is refused at the memory limit, and the module goes on.
fn assert_hits_memory_limit(module: &PolicyModule) {
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

/// Both layouts of a policy's memory stop an access past its end: the guarded one by the
/// guard's fault, the compact one (no guard) by the bounds check its code makes instead.
#[test]
fn an_access_past_the_memory_traps_in_either_address_space() {
    let wat = r#"(module
        (memory 1)
        (func (export "load") (param i32) (result i32) (i32.load (local.get 0))))"#;
    for address_space in [AddressSpace::Guarded, AddressSpace::Compact] {
        let config = RuntimeConfig {
            address_space,
            ..test_config()
        };
        let engine = wasmtime::Engine::new(&wasmtime_config(&config)).unwrap();
        let module = wasmtime::Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
        for (address, in_bounds) in [(65_532_i32, true), (65_533, false), (0x7fff_fff0, false)] {
            // A fresh store per call: a trap poisons its store.
            let mut store = wasmtime::Store::new(&engine, ());
            store.set_epoch_deadline(1_000);
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
            let load = instance
                .get_typed_func::<i32, i32>(&mut store, "load")
                .unwrap();
            let result = load.call(&mut store, address);
            match (in_bounds, result) {
                (true, Ok(value)) => assert_eq!(value, 0),
                (false, Err(e)) => assert_eq!(
                    e.downcast_ref::<wasmtime::Trap>(),
                    Some(&wasmtime::Trap::MemoryOutOfBounds),
                    "{address_space:?} at {address}: {e:?}"
                ),
                (_, other) => panic!("{address_space:?} at {address}: {other:?}"),
            }
        }
    }
}

/// The compact layout runs a policy to the same answers under the same memory bound.
#[test]
fn a_compact_address_space_decides_the_same_under_the_same_memory_limit() {
    let engine = PolicyEngine::new(RuntimeConfig {
        address_space: AddressSpace::Compact,
        ..test_config()
    })
    .unwrap();
    assert_reconciles(&engine.load(DEFAULT_POLICY).unwrap(), "dev-alice");
    assert_hits_memory_limit(&engine.load(faulty_bytes()).unwrap());
}

/// A real component that reads far past its memory is stopped by a trap in both layouts (the
/// compact one by its code's bounds check), the read's value never reaching the host, and the
/// module goes on.
#[test]
fn a_policy_that_reads_past_its_memory_traps_in_either_address_space() {
    let compact = PolicyEngine::new(RuntimeConfig {
        address_space: AddressSpace::Compact,
        ..test_config()
    })
    .unwrap();
    let compact_faulty = compact.load(faulty_bytes()).unwrap();
    for module in [faulty_module(), &compact_faulty] {
        let cluster = Arc::new(StubCluster::default());
        let err = module
            .reconcile_sandbox(&context(&cluster), new_sandbox_input("wild-x"))
            .unwrap_err();
        let RuntimeError::Trap { export, message } = &err else {
            panic!("expected a trap, got {err:?}");
        };
        assert_eq!(*export, "reconcile-sandbox");
        assert!(message.contains("out of bounds"), "{message}");
        assert!(!message.contains("was not stopped"), "{message}");
        assert!(cluster.log().is_empty(), "{:?}", cluster.log());
        assert_reconciles(module, "dev-alice");
    }
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

/// Each call starts from the module's initial state: what a call left in the guest's statics
/// (a count, another sandbox's name) is gone in the next one, whichever sandbox it is for.
#[test]
fn no_guest_state_survives_from_one_call_to_the_next() {
    let cluster = Arc::new(StubCluster::default());
    for (call, name) in ["remember-a", "remember-b", "remember-a"]
        .into_iter()
        .enumerate()
    {
        // A label of its own: no call's input repeats, so none is answered from the memo.
        let mut input = new_sandbox_input(name);
        input.sandbox.labels = vec![("call".to_string(), call.to_string())];
        let call = faulty_module()
            .reconcile_sandbox(&context(&cluster), input)
            .unwrap();
        let events = call.value.unwrap().events;
        let said: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(said, ["0 earlier calls; the last for none"], "{name}");
    }
    assert!(cluster.creates().is_empty());
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

/// The `policy-module` world of `wit/` (or of a frozen contract's directory under it), as
/// wit-parser reads it: (imports, exports, version).
fn wit_world(dir: &str) -> (Vec<String>, Vec<String>, String) {
    let mut resolve = wit_parser::Resolve::new();
    let (package, _) = resolve.push_dir(workspace().join(dir)).unwrap();
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

/// Each supported contract and the directory of its WIT.
const WIT_DIRS: [(Contract, &str); 2] = [(Contract::V0_1, "wit/0.1.0"), (Contract::V0_2, "wit")];

#[test]
fn the_host_names_the_world_of_each_supported_wit() {
    assert_eq!(
        WIT_DIRS.map(|(c, _)| c),
        Contract::SUPPORTED,
        "a WIT directory for every supported contract"
    );
    for (contract, dir) in WIT_DIRS {
        let (imports, exports, version) = wit_world(dir);
        assert_eq!(version, contract.version(), "{dir}");
        let mut host_imports = contract.world_imports();
        host_imports.sort();
        assert_eq!(host_imports, imports, "{dir}");
        assert_eq!(contract.world_exports(), exports, "{dir}");
    }
    assert_eq!(Contract::CURRENT.version(), CONTRACT_VERSION);
    assert_eq!(Contract::of_version("0.1.0"), Some(Contract::V0_1));
    assert_eq!(Contract::of_version("0.3.0"), None);
}

#[test]
fn the_components_implement_exactly_the_world_plus_allowed_wasi() {
    for module in [default_module(), faulty_module(), fixture_0_1()] {
        let dir = WIT_DIRS
            .iter()
            .find(|(c, _)| *c == module.contract())
            .map(|(_, dir)| *dir)
            .unwrap();
        let (imports, exports, _) = wit_world(dir);
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

/// The default policy is `no_std`: its component imports the contract and, for a panic's
/// message, stderr and the stream types it needs, so no call's instance lowers the other ten
/// interfaces Rust's std brings (environment, exit, stdin, stdout, terminals, poll), which a std
/// policy (the faulty one) still imports and gets.
#[test]
fn the_default_component_imports_only_stderr_of_wasi() {
    let wasi_of = |module: &PolicyModule| -> Vec<String> {
        let mut wasi: Vec<String> = module
            .imports()
            .iter()
            .filter(|n| n.starts_with("wasi:"))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect();
        wasi.sort();
        wasi
    };
    assert_eq!(
        wasi_of(default_module()),
        ["wasi:cli/stderr", "wasi:io/error", "wasi:io/streams"]
    );
    assert_eq!(wasi_of(nostd_module()), wasi_of(default_module()));
    let std_policy = wasi_of(faulty_module());
    assert!(
        std_policy.contains(&"wasi:cli/environment".to_string())
            && std_policy.contains(&"wasi:cli/stderr".to_string()),
        "{std_policy:?}"
    );
}

/// A full page of reap candidates, as the controller hands them, fits the default memory
/// bound and deadline: the bound an operator keeps need not grow with the cluster.
#[test]
fn a_page_of_reap_candidates_fits_the_default_bounds() {
    use cubepod_host::controller::reconcile::REAP_PAGE;
    use cubepod_policy_host::runtime::bindings::ReapCandidate;
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

// ---------------------------------------------------------------------------------------------
// Contract 0.1.0: the frozen default policy runs through every export, with its inputs and
// outputs converted, under the same bounds, and its kube-client calls held to the same rules.

#[test]
fn the_0_1_module_loads_as_its_own_contract_and_describes_itself() {
    let module = fixture_0_1();
    assert_eq!(module.contract(), Contract::V0_1);
    assert_eq!(module.info().name, "cubepod-default");
    assert_eq!(module.info().contract_version, "0.1.0");
    assert_eq!(module.describe().unwrap(), *module.info());
    assert_eq!(module.exports(), Contract::V0_1.world_exports());
}

#[test]
fn the_0_1_module_reconciles_a_new_sandbox_through_the_same_import() {
    let cluster = Arc::new(StubCluster::default());
    let records = Arc::new(Mutex::new(Vec::<HostCallRecord>::new()));
    let seen = records.clone();
    let ctx = context(&cluster).with_observer(Arc::new(move |r| seen.lock().unwrap().push(r)));
    let module = fixture_0_1().clone();
    let blocking = tokio_runtime()
        .spawn_blocking(move || module.reconcile_sandbox(&ctx, new_sandbox_input("old-alice")));
    let call = tokio_runtime().block_on(blocking).unwrap().unwrap();
    let output = call.value.unwrap();
    assert_eq!(cluster.creates(), creates_of_a_0_1_module("old-alice"));
    // The module's four calls; the host's NetworkPolicy is an effect and a request, not one
    // of its calls.
    assert_eq!(call.host_calls, 4);
    assert_eq!(call.effects.len(), 5);
    let ops: Vec<&str> = call.calls.iter().map(|c| c.op).collect();
    assert_eq!(
        ops,
        ["ensure-pvc", "ensure-pvc", "ensure-secret", "ensure-pod"]
    );
    assert!(call.calls.iter().all(|c| c.result.is_ok()));
    assert_eq!(records.lock().unwrap().len(), 5);
    // The Pod's IP came back through 0.1's `ensure-pod`; 0.2's new status fields are empty.
    assert_eq!(output.status.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(
        output.status.rootfs_pvc.as_deref(),
        Some("old-alice-rootfs-g1")
    );
    assert_eq!(output.status.service_fqdn, None);
    assert_eq!(output.status.shutdown_in, None);
}

#[test]
fn the_0_1_module_is_held_to_the_same_boundary() {
    // A Sandbox of a namespace the boundary does not serve: every write refused, none sent,
    // and the refusal reaches the 0.1 module and comes back as the host's own error.
    let cluster = Arc::new(StubCluster::default());
    let records = Arc::new(Mutex::new(Vec::<HostCallRecord>::new()));
    let seen = records.clone();
    let ctx = context(&cluster).with_observer(Arc::new(move |r| seen.lock().unwrap().push(r)));
    let mut input = new_sandbox_input("elsewhere");
    input.sandbox.namespace = "kube-system".to_string();
    for module in [default_module(), fixture_0_1()] {
        let call = module.reconcile_sandbox(&ctx, input.clone()).unwrap();
        match &call.value {
            Err(KubeError::Refused(reason)) => {
                assert!(reason.contains("\"kube-system\""), "{reason}")
            }
            other => panic!("{:?}: expected a refusal, got {other:?}", module.contract()),
        }
        assert!(call.effects.is_empty());
        if module.contract() == Contract::V0_1 {
            // The host's own NetworkPolicy is refused first, and the module is not run.
            assert!(call.calls.is_empty(), "{:?}", call.calls);
            continue;
        }
        assert!(
            matches!(
                call.calls.first().map(|c| &c.result),
                Some(Err(KubeError::Refused(_)))
            ),
            "{:?}",
            call.calls
        );
    }
    assert!(cluster.log().is_empty(), "{:?}", cluster.log());
    let records = records.lock().unwrap();
    assert!(!records.is_empty() && records.iter().all(|r| r.refused));
}

#[test]
fn the_0_1_module_is_held_to_the_same_calls_budget() {
    let engine = PolicyEngine::new(RuntimeConfig {
        containment: Arc::new(Containment {
            max_kube_calls: 2,
            ..Containment::default()
        }),
        ..test_config()
    })
    .unwrap();
    for bytes in [DEFAULT_POLICY, fixture_0_1_bytes()] {
        let module = engine.load(bytes).unwrap();
        let cluster = Arc::new(StubCluster::default());
        let err = module
            .reconcile_sandbox(&context(&cluster), new_sandbox_input("flood"))
            .unwrap_err();
        assert!(
            matches!(&err, RuntimeError::Budget(m) if m.contains("more than 2 kube-client calls")),
            "{:?}: {err:?}",
            module.contract()
        );
        // A 0.1 module's first create is the host's NetworkPolicy, outside its budget.
        let host_made = usize::from(module.contract() == Contract::V0_1);
        assert_eq!(
            cluster.creates().len(),
            2 + host_made,
            "{:?}",
            module.contract()
        );
    }
}

/// `n` reap candidates that are to run, each idle for a day.
fn idle_candidates(n: usize, now: i64) -> Vec<ReapCandidate> {
    (0..n)
        .map(|i| ReapCandidate {
            name: format!("sandbox-{i:07}"),
            running: true,
            idle_timeout_seconds: Some(3600),
            last_activity: Some(now - 86_400),
            started_at: Some(now - 100_000),
            pool: None,
            claimed_by: None,
            claimed_member: None,
            shutdown_time: None,
            shutdown_policy: ShutdownPolicy::Delete,
        })
        .collect()
}

#[test]
fn the_0_1_module_is_held_to_the_same_memory_limit_and_deadline() {
    let now = 1_800_000_000;
    // Far more than 16 MiB of candidates: refused growth, in `reap`, for both versions.
    let many = idle_candidates(300_000, now);
    let cluster = Arc::new(StubCluster::default());
    // A deadline the work never reaches, however slow the machine: only memory stops it (a 0.1
    // module's inputs are converted inside the call, which in a debug build under load took
    // longer than the shared engine's 200 ms).
    let patient = PolicyEngine::new(RuntimeConfig {
        call_deadline: Duration::from_secs(60),
        ..test_config()
    })
    .unwrap();
    for bytes in [DEFAULT_POLICY, fixture_0_1_bytes()] {
        let module = patient.load(bytes).unwrap();
        let started = Instant::now();
        let err = module.reap(&context(&cluster), now, NS, &many).unwrap_err();
        println!(
            "{:?}: {err} after {:?}",
            module.contract(),
            started.elapsed()
        );
        assert!(
            matches!(
                err,
                RuntimeError::MemoryExhausted {
                    export: "reap",
                    limit: MEMORY_LIMIT
                }
            ),
            "{:?}: {err:?}",
            module.contract()
        );
    }
    // With room enough, a deadline far shorter than the work (seconds, in a debug build) and
    // far longer than `describe` at load: interrupted, for both.
    let engine = PolicyEngine::new(RuntimeConfig {
        call_deadline: Duration::from_millis(100),
        epoch_tick: Duration::from_millis(1),
        memory_limit_bytes: 512 << 20,
        // The calls' budget must hold one call at that bound.
        calls_memory_budget_bytes: 2 << 30,
        ..RuntimeConfig::default()
    })
    .unwrap();
    for bytes in [DEFAULT_POLICY, fixture_0_1_bytes()] {
        let module = engine.load(bytes).unwrap();
        let started = Instant::now();
        let err = module
            .reap(&context(&cluster), now, NS, &many)
            .map(|call| call.value.len())
            .unwrap_err();
        println!(
            "{:?}: {err} after {:?}",
            module.contract(),
            started.elapsed()
        );
        assert!(
            matches!(err, RuntimeError::DeadlineExceeded { export: "reap", .. }),
            "{:?}: {err:?}",
            module.contract()
        );
    }
}

#[test]
fn the_0_1_reaper_decides_only_about_sandboxes_that_are_to_run_as_idle_pauses() {
    let now = 1_800_000_000;
    let mut page = idle_candidates(3, now);
    // Idle too, but not to run: a candidate only for its shutdown time, which 0.1 never sees.
    page[1].running = false;
    page[1].shutdown_time = Some(now - 10);
    let cluster = Arc::new(StubCluster::default());
    let call = fixture_0_1()
        .reap(&context(&cluster), now, NS, &page)
        .unwrap();
    let decided: Vec<&str> = call.value.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(decided, ["sandbox-0000000", "sandbox-0000002"]);
    assert!(call.value.iter().all(|d| d.action == ReapAction::IdlePause
        && d.namespace == NS
        && d.idle_seconds >= 86_400));
    assert!(call.calls.is_empty());
}

#[test]
fn the_0_1_module_cleans_up_through_the_same_import() {
    let cluster = Arc::new(StubCluster::default());
    let ctx = context(&cluster);
    let module = fixture_0_1();
    module
        .reconcile_sandbox(&ctx, new_sandbox_input("old-bob"))
        .unwrap()
        .value
        .unwrap();
    let mut sandbox = sandbox("old-bob");
    sandbox.deleting = true;
    let observed = ObservedChildren {
        pvcs: vec![
            ObservedPvc {
                name: "old-bob-rootfs-g1".to_string(),
                deleting: false,
            },
            ObservedPvc {
                name: "old-bob-workspace".to_string(),
                deleting: false,
            },
        ],
        pod: Some(ObservedPod {
            name: "old-bob".to_string(),
            deleting: false,
            ip: Some(POD_IP.to_string()),
            ready: true,
            rootfs_generation: Some(1),
        }),
        secret: true,
        network_policy: None,
        service: None,
    };
    let call = module
        .cleanup_sandbox(&ctx, 1_800_000_100, sandbox, observed)
        .unwrap();
    let output = call.value.unwrap();
    let mut deletes: Vec<String> = cluster
        .log()
        .into_iter()
        .filter(|l| l.starts_with("delete "))
        .collect();
    deletes.sort();
    assert_eq!(
        deletes,
        [
            format!("delete persistentvolumeclaims {NS}/old-bob-rootfs-g1"),
            format!("delete persistentvolumeclaims {NS}/old-bob-workspace"),
            format!("delete pods {NS}/old-bob"),
            format!("delete secrets {NS}/old-bob-credentials"),
        ]
    );
    assert!(
        call.effects
            .iter()
            .all(|e| matches!(e, Effect::Deleted { .. }))
    );
    assert_eq!(output.status.phase, SandboxPhase::Terminating);
    assert_eq!(output.status.service_fqdn, None);
}

#[test]
fn the_host_keeps_a_0_1_modules_network_policy_while_its_pod_exists() {
    let cluster = Arc::new(StubCluster::default());
    let ctx = context(&cluster);
    let module = fixture_0_1();
    let first = module
        .reconcile_sandbox(&ctx, new_sandbox_input("old-carol"))
        .unwrap();
    first.value.unwrap();
    // The NetworkPolicy the spec renders, the SDK's, with its digest: before the Pod.
    let Some(Effect::Applied { object, .. }) = first.effects.first() else {
        panic!("{:?}", first.effects);
    };
    assert_eq!(object["kind"], "NetworkPolicy");
    assert_eq!(object["metadata"]["name"], "old-carol-network");
    assert_eq!(
        object["spec"]["podSelector"]["matchLabels"]["cubepod.io/sandbox"],
        "old-carol"
    );
    let hash = object["metadata"]["annotations"]["cubepod.io/spec-hash"]
        .as_str()
        .expect("a spec-hash")
        .to_string();
    let policy = ObservedObject {
        name: "old-carol-network".to_string(),
        deleting: false,
        spec_hash: Some(hash),
    };
    // Converged: the cache shows the same digest, and the host writes nothing.
    let mut input = new_sandbox_input("old-carol");
    input.observed.network_policy = Some(policy.clone());
    let before = cluster.log().len();
    let again = module.reconcile_sandbox(&ctx, input).unwrap();
    assert!(
        !cluster.log()[before..]
            .iter()
            .any(|l| l.contains("networkpolicies")),
        "{:?}",
        cluster.log()
    );
    assert!(again.effects.iter().all(|e| !matches!(
        e,
        Effect::Applied {
            resource: Resource::NetworkPolicy,
            ..
        }
    )));

    // Cleanup: kept while the Pod is there, deleted by the host once it is gone.
    let mut deleting = sandbox("old-carol");
    deleting.deleting = true;
    let mut observed = new_sandbox_input("old-carol").observed;
    observed.network_policy = Some(policy);
    observed.pod = Some(ObservedPod {
        name: "old-carol".to_string(),
        deleting: true,
        ip: None,
        ready: false,
        rootfs_generation: Some(1),
    });
    let before = cluster.log().len();
    module
        .cleanup_sandbox(&ctx, 1_800_000_100, deleting.clone(), observed.clone())
        .unwrap()
        .value
        .unwrap();
    assert!(
        !cluster.log()[before..]
            .iter()
            .any(|l| l.contains("networkpolicies")),
        "{:?}",
        cluster.log()
    );
    observed.pod = None;
    module
        .cleanup_sandbox(&ctx, 1_800_000_200, deleting, observed)
        .unwrap()
        .value
        .unwrap();
    assert!(
        cluster
            .log()
            .contains(&format!("delete networkpolicies {NS}/old-carol-network")),
        "{:?}",
        cluster.log()
    );
}

#[test]
fn the_0_1_module_fills_a_pool_and_its_status_reads_as_0_2() {
    let template = sandbox("unused").spec;
    let pool = WarmPool {
        namespace: NS.to_string(),
        name: "old-pool".to_string(),
        uid: "uid-old-pool".to_string(),
        generation: 1,
        spec: WarmPoolSpec {
            replicas: 2,
            template,
            update_strategy: UpdateStrategy::OnReplenish,
        },
        status: WarmPoolStatus {
            replicas: 0,
            ready_replicas: 0,
            observed_generation: 0,
            conditions: Vec::new(),
        },
    };
    let input = PoolInput {
        now: 1_800_000_000,
        pool,
        members: vec![cubepod_policy_host::runtime::bindings::PoolMember {
            name: "old-pool-ready".to_string(),
            ready: true,
            claimed: false,
            deleting: false,
            template_hash: None,
        }],
        max_replicas: 10,
    };
    let cluster = Arc::new(StubCluster::default());
    let call = fixture_0_1()
        .reconcile_pool(&context(&cluster), input)
        .unwrap();
    let output = call.value.unwrap();
    // One ready member of two wanted: one more made, and 0.1's `ready`/`members` read as
    // `ready-replicas`/`replicas`.
    assert_eq!(output.create.len(), 1, "{:?}", output.create);
    assert_eq!(
        (output.status.ready_replicas, output.status.replicas),
        (1, 1)
    );
    assert_eq!(output.status.observed_generation, 1);
    assert!(call.calls.is_empty() && cluster.log().is_empty());
}

/// A component that names contract 0.2 in every import and export, whose exports all take and
/// return nothing: what the bindings look up by name is there, only the types are wrong.
const WRONGLY_TYPED_0_2: &str = r#"(component
    (import "cubepod:controller/types@0.2.0" (instance))
    (import "cubepod:controller/kube-client@0.2.0" (instance))
    (core module $m (func (export "f")))
    (core instance $i (instantiate $m))
    (func $f (canon lift (core func $i "f")))
    (instance $policy
        (export "describe" (func $f))
        (export "reconcile-sandbox" (func $f))
        (export "cleanup-sandbox" (func $f))
        (export "reconcile-pool" (func $f))
        (export "reap" (func $f)))
    (export "cubepod:controller/policy@0.2.0" (instance $policy))
)"#;

#[test]
fn a_component_whose_reconcile_export_has_another_type_is_refused_at_load() {
    let bytes = wat::parse_str(WRONGLY_TYPED_0_2).unwrap();
    let err = engine().load(&bytes).unwrap_err();
    assert_eq!(err.metric_label(), "contract", "{err}");
    let message = err.to_string();
    assert!(
        message.contains("type-checking export func `reconcile-sandbox`"),
        "{message}"
    );
}

#[test]
fn a_0_1_component_whose_describe_names_0_2_is_refused() {
    // The fixture's one `0.1.0` that is not in a `...@0.1.0` name: the string `describe`
    // returns (as version and contract version). Made `0.2.0`, the component still targets 0.1.
    let mut bytes = fixture_0_1_bytes().to_vec();
    let at: Vec<usize> = bytes
        .windows(5)
        .enumerate()
        .filter(|(i, w)| *w == b"0.1.0" && *i > 0 && bytes[i - 1] != b'@')
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "one describe string in the fixture: {at:?}");
    bytes[at[0] + 2] = b'2';
    let err = engine().load(&bytes).unwrap_err();
    assert_eq!(err.metric_label(), "contract");
    assert_eq!(
        err.to_string(),
        "policy breaks the contract cubepod:controller@0.1.0: describe says contract \"0.2.0\", \
         the component is built against \"0.1.0\""
    );
}

// ---------------------------------------------------------------------------------------------
// A Python policy, built by componentize-py (installed, pinned, by .ci/policy-toolchains).

/// `tests/policies/python-raises` built by componentize-py, once per test run, into target/.
fn python_module() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| {
        let tool = workspace().join("target/componentize-py/bin/componentize-py");
        assert!(
            tool.exists(),
            "{} is missing: run .ci/policy-toolchains to install the pinned toolchains",
            tool.display()
        );
        let out = workspace().join("target/polyglot/python-raises.wasm");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let status = std::process::Command::new(&tool)
            .current_dir(workspace())
            .args(["-d", "wit", "-w", "policy-module", "componentize"])
            .args(["-p", "tests/policies/python-raises", "app", "-o"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "componentize-py failed: {status}");
        // A Python component is ~18 MB: more than the tests' memory bound, as it is more than
        // the default's. Its own engine, with the controller's default bounds.
        let engine = PolicyEngine::new(RuntimeConfig {
            call_deadline: Duration::from_secs(5),
            ..RuntimeConfig::default()
        })
        .unwrap();
        engine.load(&std::fs::read(out).unwrap()).unwrap()
    })
}

/// componentize-py keeps an export of its own (`exports`) and imports the Python runtime's
/// WASI (clocks, random, filesystem, sockets): the module loads all the same, and what the
/// stubs give it is the same at every call; its stdout and its traceback reach the error.
#[test]
fn a_python_policy_loads_and_its_output_and_traceback_reach_the_error() {
    let module = python_module();
    assert_eq!(module.info().name, "python-raises");
    let extra: Vec<&String> = module
        .exports()
        .iter()
        .filter(|n| !n.starts_with("cubepod:controller/"))
        .collect();
    assert!(
        !extra.is_empty(),
        "componentize-py adds an export of its own"
    );
    for denied in [
        "wasi:clocks/wall-clock",
        "wasi:random/random",
        "wasi:filesystem/preopens",
    ] {
        assert!(
            module.imports().iter().any(|n| n.starts_with(denied)),
            "{denied} among {:?}",
            module.imports()
        );
    }
    let cluster = Arc::new(StubCluster::default());
    let message = |name: &str| {
        let err = module
            .reconcile_sandbox(&context(&cluster), new_sandbox_input(name))
            .unwrap_err();
        let RuntimeError::Trap { export, message } = &err else {
            panic!("expected a trap, got {err}");
        };
        assert_eq!(*export, "reconcile-sandbox");
        message.clone()
    };
    let first = message("py-x");
    println!("{first}");
    for expected in [
        "ValueError: no decision for sandbox py-x",
        "clock 0.0 random ",
        "open refused (",
    ] {
        assert!(first.contains(expected), "missing {expected:?} in {first}");
    }
    assert!(!first.contains('\n'), "one line: {first}");
    assert_eq!(message("py-x"), first, "the same input, the same output");
}

/// A sleep waits on the monotonic clock, which the host does not give: the call traps at
/// once, naming why, rather than holding a worker in the host where no deadline reaches it.
#[test]
fn a_python_policy_that_sleeps_traps_at_once_naming_the_clock() {
    let module = python_module();
    let cluster = Arc::new(StubCluster::default());
    let input = new_sandbox_input("py-sleep");
    let started = Instant::now();
    let err = module
        .cleanup_sandbox(&context(&cluster), input.now, input.sandbox, input.observed)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "no sleep");
    let message = err.to_string();
    assert!(message.contains("wasi:clocks/monotonic-clock"), "{message}");
    assert!(message.contains("sleeping"), "its stderr: {message}");
}

/// `tests/policies/js-raises` built by componentize-js (StarlingMonkey), once per test run,
/// without the HTTP feature (the host links no `wasi:http`).
fn js_module() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| {
        let tool = workspace().join("target/componentize-js/node_modules/.bin/componentize-js");
        assert!(
            tool.exists(),
            "{} is missing: run .ci/policy-toolchains to install the pinned toolchains",
            tool.display()
        );
        let out = workspace().join("target/polyglot/js-raises.wasm");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let status = std::process::Command::new(&tool)
            .current_dir(workspace())
            .args([
                "-w",
                "wit",
                "-n",
                "policy-module",
                "-d",
                "http",
                "fetch-event",
                "-o",
            ])
            .arg(&out)
            .arg("tests/policies/js-raises/policy.js")
            .status()
            .unwrap();
        assert!(status.success(), "componentize-js failed: {status}");
        let engine = PolicyEngine::new(RuntimeConfig {
            call_deadline: Duration::from_secs(5),
            ..RuntimeConfig::default()
        })
        .unwrap();
        engine.load(&std::fs::read(out).unwrap()).unwrap()
    })
}

/// A JavaScript policy imports the WASI of its engine, at a newer 0.2 version than the host's:
/// it loads, and the error it throws reaches the trap's message, the same at every call.
#[test]
fn a_js_policy_loads_and_its_error_reaches_the_trap() {
    let module = js_module();
    assert_eq!(module.info().name, "js-raises");
    let cluster = Arc::new(StubCluster::default());
    let message = || {
        module
            .reconcile_sandbox(&context(&cluster), new_sandbox_input("js-x"))
            .unwrap_err()
            .to_string()
    };
    let first = message();
    println!("{first}");
    assert!(first.contains("no decision for sandbox js-x"), "{first}");
    assert_eq!(message(), first, "the same input, the same output");
}

// ---------------------------------------------------------------------------------------------
// The decision memo

/// The default policy on the shared engine, loaded apart: a memo of its own, whose counts no
/// other test moves.
fn own_default_module() -> PolicyModule {
    engine().load(DEFAULT_POLICY).unwrap()
}

/// `name`'s input once its children exist as the default policy made them, its status as the
/// policy wrote it: a converged resync, which makes no kube-client call.
fn converged_input(name: &str) -> ReconcileInput {
    let cluster = Arc::new(StubCluster::default());
    let new = new_sandbox_input(name);
    let created = default_module()
        .reconcile_sandbox(&context(&cluster), new.clone())
        .unwrap();
    let spec_hash = created.effects.iter().find_map(|effect| match effect {
        Effect::Applied {
            resource: Resource::NetworkPolicy,
            object,
            ..
        } => Some(
            object["metadata"]["annotations"]["cubepod.io/spec-hash"]
                .as_str()?
                .to_string(),
        ),
        _ => None,
    });
    let mut input = new;
    input.sandbox.status = created.value.unwrap().status;
    input.observed = ObservedChildren {
        pvcs: [format!("{name}-workspace"), format!("{name}-rootfs-g1")]
            .map(|name| ObservedPvc {
                name,
                deleting: false,
            })
            .to_vec(),
        pod: Some(ObservedPod {
            name: name.to_string(),
            deleting: false,
            ip: Some(POD_IP.to_string()),
            ready: true,
            rootfs_generation: Some(1),
        }),
        secret: true,
        network_policy: Some(ObservedObject {
            name: format!("{name}-network"),
            deleting: false,
            spec_hash,
        }),
        service: None,
    };
    // The status the converged pass writes: the next pass is handed that one.
    let pass = default_module()
        .reconcile_sandbox(&context(&cluster), input.clone())
        .unwrap();
    assert_eq!(pass.host_calls, 0, "{:?}", pass.calls);
    input.sandbox.status = pass.value.unwrap().status;
    input
}

fn memo_calls(module: &PolicyModule) -> (u64, u64) {
    let stats = module.memo_stats();
    (stats.hits, stats.misses)
}

/// A converged resync at a later time, with another credential, is answered from the memo as
/// the module would answer it: the same status, and the requeue the policy asked for counted
/// from its own call, until that requeue is due.
#[test]
fn a_converged_resync_is_answered_from_the_memo_as_the_module_would_answer_it() {
    let module = own_default_module();
    let off = PolicyEngine::new(RuntimeConfig {
        memo: MemoBounds {
            entries: 0,
            ..MemoBounds::default()
        },
        ..test_config()
    })
    .unwrap()
    .load(DEFAULT_POLICY)
    .unwrap();
    let cluster = Arc::new(StubCluster::default());
    let mut input = converged_input("resync-a");
    let t0 = input.now;
    // A shutdown 5 h 30 min away: shown as "5h", requeued when it turns "2h".
    input.sandbox.spec.shutdown_time = Some(t0 + 5 * 3600 + 1800);
    let first = module
        .reconcile_sandbox(&context(&cluster), input.clone())
        .unwrap();
    let first = first.value.unwrap();
    assert_eq!(first.requeue_after_seconds, Some(1801));
    input.sandbox.status = first.status.clone();

    for later in [0, 1, 600, 1800] {
        let mut at = input.clone();
        at.now = t0 + later;
        at.fresh_token = format!("token-{later}");
        let memoised = module
            .reconcile_sandbox(&context(&cluster), at.clone())
            .unwrap();
        let called = off.reconcile_sandbox(&context(&cluster), at).unwrap();
        assert_eq!(memoised, called, "{later} s later");
        assert_eq!(
            memoised.value.unwrap().requeue_after_seconds,
            Some(1801 - later as u32)
        );
    }
    assert_eq!(
        memo_calls(&module),
        (3, 2),
        "the first call, and the first with its status"
    );
    assert_eq!(off.memo_stats(), MemoStats::default(), "no memo");
    // The requeue is due: the policy is called, and its bucket has moved.
    let mut due = input.clone();
    due.now = t0 + 1801;
    let called = module.reconcile_sandbox(&context(&cluster), due).unwrap();
    assert_eq!(
        called.value.unwrap().status.shutdown_in.as_deref(),
        Some("2h")
    );
    assert_eq!(memo_calls(&module), (3, 3));
    // Before the answer's own time (a clock set back) it is not used either.
    let mut earlier = input;
    earlier.now = t0 - 1;
    module
        .reconcile_sandbox(&context(&cluster), earlier)
        .unwrap();
    assert_eq!(memo_calls(&module), (3, 4));
    assert!(cluster.creates().is_empty());
}

/// Every field of the input but `now` and `fresh-token` keys the memo: a policy that reads any
/// of them is called again when it changes. Each change is made to a converged resync whose
/// answer the memo holds.
#[test]
fn a_policy_is_called_again_when_any_field_of_its_input_changes() {
    type Change = (&'static str, fn(&mut ReconcileInput));
    let changes: &[Change] = &[
        ("sandbox.namespace", |i| i.sandbox.namespace.push('x')),
        ("sandbox.name", |i| i.sandbox.name.push('x')),
        ("sandbox.uid", |i| i.sandbox.uid.push('x')),
        ("sandbox.generation", |i| i.sandbox.generation += 1),
        ("sandbox.deleting", |i| i.sandbox.deleting = true),
        ("sandbox.last-activity", |i| {
            i.sandbox.last_activity = Some(1)
        }),
        ("sandbox.pool", |i| {
            i.sandbox.pool = Some("pool".to_string())
        }),
        ("sandbox.claimed-by", |i| {
            i.sandbox.claimed_by = Some("c".to_string())
        }),
        ("sandbox.labels", |i| {
            i.sandbox.labels.push(("k".to_string(), "v".to_string()))
        }),
        ("sandbox.annotations", |i| {
            i.sandbox
                .annotations
                .push(("k".to_string(), "v".to_string()))
        }),
        ("sandbox.meta-truncated", |i| {
            i.sandbox.meta_truncated = true
        }),
        ("spec.image", |i| i.sandbox.spec.image.push('x')),
        ("spec.desired-state", |i| {
            i.sandbox.spec.desired_state = DesiredState::Paused
        }),
        ("spec.rootfs-generation", |i| {
            i.sandbox.spec.rootfs_generation += 1
        }),
        ("spec.fork-from", |i| {
            i.sandbox.spec.fork_from = Some("f".to_string())
        }),
        ("spec.idle-timeout-seconds", |i| {
            i.sandbox.spec.idle_timeout_seconds = Some(60)
        }),
        ("spec.cpu", |i| i.sandbox.spec.cpu = Some("1".to_string())),
        ("spec.memory", |i| {
            i.sandbox.spec.memory = Some("1Gi".to_string())
        }),
        ("spec.storage-class", |i| {
            i.sandbox.spec.storage_class = Some("s".to_string())
        }),
        ("spec.rootfs-size", |i| {
            i.sandbox.spec.rootfs_size = "11Gi".to_string()
        }),
        ("spec.workspace-size", |i| {
            i.sandbox.spec.workspace_size = "11Gi".to_string()
        }),
        ("spec.runtime-class", |i| {
            i.sandbox.spec.runtime_class = Some("r".to_string())
        }),
        ("spec.warm-pool", |i| {
            i.sandbox.spec.warm_pool = Some("p".to_string())
        }),
        ("spec.network.egress", |i| {
            i.sandbox.spec.network.egress = EgressMode::None
        }),
        ("spec.network.allow-cidrs", |i| {
            i.sandbox
                .spec
                .network
                .allow_cidrs
                .push("10.0.0.0/8".to_string())
        }),
        ("spec.network.deny-cidrs", |i| {
            i.sandbox
                .spec
                .network
                .deny_cidrs
                .push("10.0.0.0/8".to_string())
        }),
        ("spec.service", |i| {
            i.sandbox.spec.service =
                Some(cubepod_policy_host::runtime::bindings::ServiceSpec { ports: Vec::new() })
        }),
        ("spec.shutdown-time", |i| {
            i.sandbox.spec.shutdown_time = Some(i.now + 86_400)
        }),
        ("spec.shutdown-policy", |i| {
            i.sandbox.spec.shutdown_policy = ShutdownPolicy::Pause
        }),
        ("status.phase", |i| {
            i.sandbox.status.phase = SandboxPhase::Failed
        }),
        ("status.pod-ip", |i| {
            i.sandbox.status.pod_ip = Some("10.9.9.9".to_string())
        }),
        ("status.rootfs-pvc", |i| {
            i.sandbox.status.rootfs_pvc = Some("x".to_string())
        }),
        ("status.workspace-pvc", |i| {
            i.sandbox.status.workspace_pvc = Some("x".to_string())
        }),
        ("status.observed-generation", |i| {
            i.sandbox.status.observed_generation += 1
        }),
        ("status.conditions", |i| i.sandbox.status.conditions.clear()),
        ("status.conditions[0].reason", |i| {
            i.sandbox.status.conditions[0].reason.push('x')
        }),
        ("status.conditions[0].message", |i| {
            i.sandbox.status.conditions[0].message.push('x')
        }),
        ("status.conditions[0].last-transition-time", |i| {
            i.sandbox.status.conditions[0].last_transition_time += 1
        }),
        ("status.started-at", |i| {
            i.sandbox.status.started_at = Some(1)
        }),
        ("status.idle-paused-at", |i| {
            i.sandbox.status.idle_paused_at = Some(1)
        }),
        ("status.claimed-member", |i| {
            i.sandbox.status.claimed_member = Some("m".to_string())
        }),
        ("status.service-fqdn", |i| {
            i.sandbox.status.service_fqdn = Some("f".to_string())
        }),
        ("status.shutdown-in", |i| {
            i.sandbox.status.shutdown_in = Some("1d".to_string())
        }),
        ("observed.pvcs", |i| {
            i.observed.pvcs.pop();
        }),
        ("observed.pvcs[0].deleting", |i| {
            i.observed.pvcs[0].deleting = true
        }),
        ("observed.pod", |i| i.observed.pod = None),
        ("observed.pod.ready", |i| {
            i.observed.pod.as_mut().map_or((), |p| p.ready = false)
        }),
        ("observed.pod.ip", |i| {
            i.observed.pod.as_mut().map_or((), |p| p.ip = None)
        }),
        ("observed.pod.deleting", |i| {
            i.observed.pod.as_mut().map_or((), |p| p.deleting = true)
        }),
        ("observed.pod.rootfs-generation", |i| {
            i.observed
                .pod
                .as_mut()
                .map_or((), |p| p.rootfs_generation = Some(2))
        }),
        ("observed.secret", |i| i.observed.secret = false),
        ("observed.network-policy", |i| {
            i.observed.network_policy = None
        }),
        ("observed.network-policy.spec-hash", |i| {
            i.observed
                .network_policy
                .as_mut()
                .map_or((), |p| p.spec_hash = Some("0".to_string()))
        }),
        ("observed.service", |i| {
            i.observed.service = Some(ObservedObject {
                name: "s".to_string(),
                deleting: false,
                spec_hash: None,
            })
        }),
        ("fork-source", |i| i.fork_source = Some(sandbox("source"))),
        ("pool-candidates", |i| {
            i.pool_candidates.push("member".to_string())
        }),
        ("claimed-member", |i| {
            i.claimed_member = Some(sandbox("member"))
        }),
        ("cluster-network.cluster-cidrs", |i| {
            i.cluster_network
                .cluster_cidrs
                .push("10.0.0.0/8".to_string())
        }),
        ("cluster-network.dns-namespace", |i| {
            i.cluster_network.dns_namespace.push('x')
        }),
        ("cluster-network.dns-pod-labels", |i| {
            i.cluster_network.dns_pod_labels.clear()
        }),
        ("cluster-network.ingress-from", |i| {
            i.cluster_network
                .ingress_from
                .push(("a".to_string(), "b".to_string()))
        }),
        ("cluster-network.cluster-domain", |i| {
            i.cluster_network.cluster_domain.push('x')
        }),
    ];
    let module = own_default_module();
    let cluster = Arc::new(StubCluster::default());
    let base = converged_input("field-a");
    assert!(!base.sandbox.status.conditions.is_empty());
    assert!(!base.cluster_network.dns_pod_labels.is_empty());
    for (field, change) in changes {
        module
            .reconcile_sandbox(&context(&cluster), base.clone())
            .unwrap();
        let (hits, misses) = memo_calls(&module);
        module
            .reconcile_sandbox(&context(&cluster), base.clone())
            .unwrap();
        assert_eq!(
            memo_calls(&module),
            (hits + 1, misses),
            "the base again, before {field}"
        );
        let mut changed = base.clone();
        change(&mut changed);
        assert_ne!(changed, base, "{field} changes nothing");
        // Whatever it answers (a namespace of another's is refused its writes): it is called.
        let _ = module.reconcile_sandbox(&context(&cluster), changed);
        assert_eq!(
            memo_calls(&module),
            (hits + 1, misses + 1),
            "{field} changed"
        );
    }
}

/// An answer is the module's own: another module handed the very same input is called, and
/// answers as itself.
#[test]
fn a_memoised_answer_is_never_served_to_another_module() {
    let default = own_default_module();
    let faulty = engine().load(faulty_bytes()).unwrap();
    let cluster = Arc::new(StubCluster::default());
    // A name the faulty policy answers with an Event of its count of earlier calls.
    let input = converged_input("remember-memo");
    let said = |module: &PolicyModule| -> Vec<String> {
        let call = module
            .reconcile_sandbox(&context(&cluster), input.clone())
            .unwrap();
        assert_eq!(call.host_calls, 0);
        call.value
            .unwrap()
            .events
            .into_iter()
            .map(|e| e.message)
            .collect()
    };
    for _ in 0..2 {
        assert!(said(&default).is_empty());
        assert_eq!(said(&faulty), ["0 earlier calls; the last for none"]);
    }
    assert_eq!(memo_calls(&default), (1, 1));
    assert_eq!(memo_calls(&faulty), (1, 1));
}

/// A call that asked the cluster anything (a new sandbox's creates) is not kept: the next one
/// with the same input asks again.
#[test]
fn a_call_that_asks_the_cluster_is_never_answered_from_the_memo() {
    let module = own_default_module();
    for token in ["token-first", "token-second"] {
        let cluster = Arc::new(StubCluster::default());
        let mut input = new_sandbox_input("asks");
        input.fresh_token = token.to_string();
        let call = module.reconcile_sandbox(&context(&cluster), input).unwrap();
        assert_eq!(call.host_calls, 5);
        assert_eq!(cluster.creates(), new_sandbox_creates("asks"));
    }
    assert_eq!(module.memo_stats().entries, 0);
    assert_eq!(memo_calls(&module), (0, 2));
}
