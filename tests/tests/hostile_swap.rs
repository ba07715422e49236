//! The hostile policy hot-swapped into the real binary against the fake API server: every
//! case of `tests/policies/hostile` runs on a live cluster, and the cluster afterwards holds
//! nothing outside the containment rules, no write went past a bound, the controller still
//! serves, and its RSS stays under twice its idle figure through the oversized outputs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cubepod_apiserver::{MemoryCluster, WriteRecord};
use cubepod_kube::{ApiErrorKind, Cluster, Resource};
use cubepod_policy_host::model::sandbox::{CLAIMED_BY_LABEL, FINALIZER, POOL_LABEL};
use cubepod_policy_host::runtime::default_policy::DEFAULT_POLICY;
use cubepod_tests::apiserver::{DEFAULT_SEED, KubeconfigAuth};
use cubepod_tests::bench::process::memory_of;
use cubepod_tests::convergence::{
    NS, TOKEN, block, fake_server_with_namespaces, metric_sum, sandbox_manifest, until,
};
use cubepod_tests::{Controller, hostile_policy, metric, replace_file};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(180);

// The controller runs with its default memory bound of one policy call (32 MiB): a call's
// linear memory (its pooling-allocator slot) is resident while it runs, so the bound is what
// one call adds to the controller's RSS. The `huge-manifest` case builds a 4 MiB Pod, eight
// times the manifest bound, which the host refuses before parsing it; a guest building more
// stops at the memory bound (`unbounded-manifest`: `cubepod_guest_traps_total{reason="memory"}`).
// At 64 MiB, a 12 MiB manifest took the controller's RSS from about 57 to 127 MiB, past twice
// idle.

/// The bound of kube-client calls per policy call the controller runs with (its default).
const MAX_KUBE_CALLS: usize = 16;

/// Reap cases get a namespace each: the hostile reaper acts on the first candidate whose
/// name picks a case, and in [`NS`] that is always another case's sandbox. The reaper's
/// writes come first, so that a tick it fails would also starve the namespaces after it.
const REAP_WRITES_NS: &str = "cubepod-reap-writes";
const REAP_STRANGERS_NS: &str = "cubepod-reap-strangers";

/// The sandboxes whose reconcile (or cleanup) is a hostile case, in [`NS`].
const SANDBOX_CASES: [&str; 28] = [
    "privileged",
    "host-network",
    "no-runtime-class",
    "foreign-workspace",
    "foreign-secret",
    "clone-without-fork",
    "oversized-volume",
    "foreign-service-account",
    "sa-token-secret",
    "delete-unmanaged",
    "squat",
    "extra-child",
    "flood",
    "huge-manifest",
    "unbounded-manifest",
    "duplicate-key",
    "hostpath",
    "node-name",
    "unknown-field",
    // `pod-before-policy` is not here: on a live cluster its sandbox already has its
    // NetworkPolicy from before the swap, so its Pod is rightly admitted (host/tests/containment.rs
    // runs it against an empty cache).
    "foreign-network-policy",
    "open-egress",
    "foreign-service",
    "cleanup-foreign",
    "claim-non-candidate",
    "huge-status",
    "event-flood",
    "requeue-zero",
    "future-generation",
];

/// The pools whose reconcile is a hostile case, in [`NS`].
const POOL_CASES: [&str; 5] = [
    "pool-hundreds",
    "pool-clone",
    "pool-foreign-owner",
    "pool-delete-strangers",
    "pool-writes",
];

const VICTIM: &str = "victim";
const ORDINARY: &str = "ordinary";
const UNMANAGED_SECRET: &str = "registry-credentials";

/// Each pool's replicas under the default policy, and after the swap: the room the hostile
/// pool calls then get is one member.
const REPLICAS: u64 = 1;
const REPLICAS_AFTER: u64 = 2;

/// Every rule the cases exercise.
const RULES: [&str; 10] = [
    "scope", "pod", "pvc", "secret", "network", "service", "budget", "pool", "claim", "reap",
];

fn sandbox_in(namespace: &str, name: &str) -> Value {
    let mut sandbox = sandbox_manifest(name, json!({}));
    sandbox["metadata"]["namespace"] = json!(namespace);
    sandbox
}

fn seed(cluster: &MemoryCluster) {
    let mut sandboxes: Vec<Value> = SANDBOX_CASES
        .iter()
        .chain([&VICTIM, &ORDINARY])
        .map(|name| sandbox_in(NS, name))
        .collect();
    sandboxes.push(sandbox_in(REAP_WRITES_NS, "reap-writes"));
    sandboxes.push(sandbox_in(REAP_STRANGERS_NS, "reap-strangers"));
    for sandbox in sandboxes {
        cluster
            .insert(Resource::Sandbox, sandbox)
            .expect("seed a sandbox");
    }
    for pool in POOL_CASES {
        let pool = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
            "metadata": {"name": pool, "namespace": NS},
            "spec": {
                "replicas": REPLICAS,
                "template": {"image": cubepod_tests::convergence::IMAGE, "idleTimeoutSeconds": 0},
            },
        });
        cluster
            .insert(Resource::PodWarmPool, pool)
            .expect("seed a pool");
    }
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": UNMANAGED_SECRET, "namespace": NS},
        "type": "Opaque",
        "data": {"token": "c2VjcmV0"},
    });
    cluster
        .insert(Resource::Secret, secret)
        .expect("seed the unmanaged secret");
}

/// How many sandboxes there are once every pool is full.
fn expected_sandboxes() -> usize {
    SANDBOX_CASES.len() + 2 + 2 + POOL_CASES.len() * REPLICAS as usize
}

fn all_running(cluster: &MemoryCluster) -> bool {
    let sandboxes = cluster.objects(Resource::Sandbox);
    sandboxes.len() == expected_sandboxes()
        && sandboxes.iter().all(|s| s["status"]["phase"] == "Running")
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or("")
}

fn key_of(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        name_of(object)
    )
}

/// What a write may change of a child, keyed by namespace/name: its spec (type and data for
/// a Secret) and its labels, owners and finalizers; not its status or resourceVersion.
fn children(cluster: &MemoryCluster) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for resource in [
        Resource::Pod,
        Resource::PersistentVolumeClaim,
        Resource::Secret,
        Resource::NetworkPolicy,
        Resource::Service,
    ] {
        for object in cluster.objects(resource) {
            let meta = &object["metadata"];
            let held = json!({
                "spec": object["spec"], "type": object["type"], "data": object["data"],
                "labels": meta["labels"], "ownerReferences": meta["ownerReferences"],
                "finalizers": meta["finalizers"], "uid": meta["uid"],
            });
            all.insert(format!("{resource} {}", key_of(&object)), held);
        }
    }
    all
}

/// A write the test made itself: the pool patches, the deletion of `cleanup-foreign`.
fn test_write(write: &WriteRecord) -> bool {
    (write.resource == Resource::PodWarmPool && write.verb == "patch")
        || (write.resource == Resource::Sandbox
            && write.verb == "delete"
            && write.name == "cleanup-foreign")
}

/// The controller's RSS, sampled every 50 ms on a thread of its own until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Duration, u64)>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(memory) = memory_of(pid) {
                    samples.push((started.elapsed(), memory.rss_kib));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// Every sample: time since start, RSS KiB.
    fn finish(self) -> Vec<(Duration, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the sampler thread")
    }
}

/// Failed reconciles the controller logged, by work key (`sandbox NS/NAME`, `podwarmpool ...`):
/// how many, and the last error.
fn failures(controller: &Controller) -> BTreeMap<String, (usize, String)> {
    let mut by_key: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for line in controller.logs() {
        let fields = &line["fields"];
        if fields["message"] == "reconcile failed"
            && let Some(key) = fields["key"].as_str()
        {
            let entry = by_key.entry(key.to_string()).or_default();
            entry.0 += 1;
            entry.1 = fields["error"].as_str().unwrap_or_default().to_string();
        }
    }
    by_key
}

fn refusals(body: &str, rule: &str) -> f64 {
    metric_sum(body, "cubepod_boundary_refusals_total", &[("rule", rule)])
}

/// Quiet: no API write and an empty queue for three seconds running.
fn wait_quiet(controller: &Controller, cluster: &MemoryCluster) {
    let deadline = Instant::now() + PATIENCE;
    let mut last = usize::MAX;
    let mut still_since = Instant::now();
    loop {
        let writes = cluster.writes().len();
        let (_, body) = controller.get("/metrics").expect("GET /metrics");
        let depth = metric(&body, "cubepod_queue_depth", &[]).unwrap_or(0.0);
        if writes != last || depth > 0.0 {
            last = writes;
            still_since = Instant::now();
        } else if still_since.elapsed() >= Duration::from_secs(3) {
            return;
        }
        assert!(Instant::now() < deadline, "the controller never went quiet");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[test]
fn a_swap_to_the_hostile_module_creates_nothing_outside_the_rules_in_bounded_memory() {
    let fake = fake_server_with_namespaces(
        Duration::from_millis(50),
        DEFAULT_SEED,
        &[REAP_WRITES_NS, REAP_STRANGERS_NS],
    );
    let cluster = fake.cluster();
    seed(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let policy = dir.path().join("policy.wasm");
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    // Built before the controller starts: the build's CPU is not the controller's to share.
    let hostile = std::fs::read(hostile_policy()).expect("the hostile policy built");
    let controller = Controller::start_with_kubeconfig(
        &kubeconfig,
        &[
            &format!("--policy={}", policy.display()),
            &format!("--namespaces={REAP_WRITES_NS},{NS},{REAP_STRANGERS_NS}"),
            "--policy-poll-interval=200ms",
        ],
    );
    let pid = controller.child.id();

    // Under the default policy everything converges, and goes quiet.
    until(
        "every sandbox runs under the default policy",
        PATIENCE,
        || all_running(&cluster),
    );
    wait_quiet(&controller, &cluster);
    let idle_kib = median(
        (0..10)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(100));
                memory_of(pid).expect("the controller's memory").rss_kib
            })
            .collect(),
    );
    let hwm_before = memory_of(pid).unwrap().hwm_kib;
    let before = children(&cluster);
    let sandboxes_before: BTreeMap<String, Value> = cluster
        .objects(Resource::Sandbox)
        .into_iter()
        .map(|s| (key_of(&s), s))
        .collect();
    let pool_uids: BTreeMap<String, String> = cluster
        .objects(Resource::PodWarmPool)
        .iter()
        .map(|p| {
            let uid = p["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (name_of(p).to_string(), uid)
        })
        .collect();
    let (_, body) = controller.get("/metrics").unwrap();
    let applied = metric(
        &body,
        "cubepod_policy_swaps_total",
        &[("result", "applied")],
    )
    .unwrap_or(0.0);

    // The swap: admitted (contract and self-test) and serving.
    cluster.clear_writes();
    let sampler = Sampler::start(pid);
    let swapped_at = Instant::now();
    replace_file(&policy, &hostile);
    let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
        let swaps =
            |r: &str| metric(body, "cubepod_policy_swaps_total", &[("result", r)]).unwrap_or(0.0);
        swaps("applied") > applied
            || cubepod_host::admission::REFUSAL_REASONS
                .iter()
                .any(|r| swaps(r) > 0.0)
    });
    assert_eq!(
        metric(
            &body,
            "cubepod_policy_swaps_total",
            &[("result", "applied")]
        ),
        Some(applied + 1.0),
        "the hostile module is well-formed and is admitted: {}",
        body.lines()
            .filter(|l| l.starts_with("cubepod_policy_swaps_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // What makes the rest of the cases run: a deletion (cleanup), and room in every pool.
    block(cluster.delete(Resource::Sandbox, NS, "cleanup-foreign")).expect("delete a sandbox");
    for pool in POOL_CASES {
        block(cluster.patch(
            Resource::PodWarmPool,
            NS,
            pool,
            json!({"spec": {"replicas": REPLICAS_AFTER}}),
        ))
        .expect("patch a pool");
    }

    // Every case ran at least twice (a failed reconcile is retried with backoff), and every
    // rule refused something.
    let failing_keys: Vec<String> = SANDBOX_CASES
        .iter()
        .filter(|name| **name != "requeue-zero")
        .map(|name| format!("sandbox {NS}/{name}"))
        .chain(
            POOL_CASES
                .iter()
                .map(|name| format!("podwarmpool {NS}/{name}")),
        )
        .collect();
    let requeue_ok_before = metric_sum(
        &body,
        "cubepod_reconciles_total",
        &[("kind", "sandbox"), ("result", "ok")],
    );
    let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
        let seen = failures(&controller);
        let every_case = failing_keys
            .iter()
            .all(|key| seen.get(key).is_some_and(|(n, _)| *n >= 2));
        let every_rule = RULES.iter().all(|rule| refusals(body, rule) >= 2.0);
        // The reaper's delete of a Pod in its namespace, refused twice.
        let reap_writes = controller
            .logs()
            .iter()
            .filter(|l| {
                l["fields"]["message"] == "refused a policy's call"
                    && l["fields"]["what"]
                        .as_str()
                        .is_some_and(|w| w.contains(&format!("{REAP_WRITES_NS}/")))
            })
            .count()
            >= 2;
        let requeued = metric_sum(
            body,
            "cubepod_reconciles_total",
            &[("kind", "sandbox"), ("result", "ok")],
        ) >= requeue_ok_before + 2.0;
        every_case && every_rule && reap_writes && requeued
    });
    // A little longer: the retries of the costliest cases keep coming.
    std::thread::sleep(Duration::from_secs(5));
    let last_failures = failures(&controller);
    let samples = sampler.finish();
    // Every failed case was stopped by a rule or a bound, never by an error of its own.
    for key in &failing_keys {
        let (_, error) = &last_failures[key];
        assert!(
            error.contains("refused by rule")
                || error.contains("past its budget")
                || error.contains("memory limit"),
            "{key} failed otherwise: {error}"
        );
    }
    let hostile_phase = swapped_at.elapsed();
    let memory_after = memory_of(pid).unwrap();

    // The cluster: nothing outside the rules.
    let pods = cluster.objects(Resource::Pod);
    let sandboxes = cluster.objects(Resource::Sandbox);
    let sandbox_keys: BTreeSet<String> = sandboxes.iter().map(key_of).collect();
    for pod in &pods {
        let key = key_of(pod);
        let own = name_of(pod);
        let spec = &pod["spec"];
        assert!(sandbox_keys.contains(&key), "a Pod of no sandbox: {key}");
        assert!(!own.ends_with("-debug"), "an extra child: {key}");
        assert_eq!(spec["runtimeClassName"], "kata-qemu", "{key}");
        assert_ne!(spec["hostNetwork"], true, "{key}");
        assert!(spec["nodeName"].is_null(), "{key}: nodeName");
        assert!(
            matches!(spec["serviceAccountName"].as_str(), None | Some("default")),
            "{key}: service account"
        );
        assert_eq!(spec["automountServiceAccountToken"], false, "{key}");
        for container in spec["containers"].as_array().into_iter().flatten() {
            assert_ne!(
                container["securityContext"]["privileged"], true,
                "{key}: privileged"
            );
            assert!(container["hostDevices"].is_null(), "{key}: unknown field");
        }
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            assert!(volume["hostPath"].is_null(), "{key}: hostPath");
            if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
                assert!(
                    claim.starts_with(&format!("{own}-")),
                    "{key} mounts {claim}"
                );
            }
        }
        let mut secrets = Vec::new();
        secret_refs(spec, &mut secrets);
        for secret in secrets {
            assert_eq!(
                secret,
                format!("{own}-credentials"),
                "{key} references a Secret not its own"
            );
        }
    }
    for pvc in cluster.objects(Resource::PersistentVolumeClaim) {
        let key = key_of(&pvc);
        // No sandbox here forks, so none may clone.
        assert!(pvc["spec"]["dataSource"].is_null(), "{key} clones");
        // Every sandbox here asks for generation 1: no rootfs PVC of a later one.
        assert!(
            !name_of(&pvc).contains("-rootfs-g") || name_of(&pvc).ends_with("-rootfs-g1"),
            "{key}: a rootfs PVC of a generation the spec does not ask for"
        );
        assert_ne!(
            pvc["spec"]["resources"]["requests"]["storage"], "1Pi",
            "{key} is over the size bound"
        );
    }
    for secret in cluster.objects(Resource::Secret) {
        assert_eq!(secret["type"], "Opaque", "{}", key_of(&secret));
    }
    // Every child as it was before the swap: the victim's, the unmanaged Secret, all.
    let after = children(&cluster);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "children came or went"
    );
    for (key, held) in &before {
        assert_eq!(Some(held), after.get(key), "{key} changed");
    }
    assert!(after.contains_key(&format!("secrets {NS}/{UNMANAGED_SECRET}")));
    assert!(after.contains_key(&format!("pods {NS}/{VICTIM}")));

    // Pools: no member beyond the room, none forking the victim or with another owner.
    for (pool, uid) in &pool_uids {
        let members: Vec<&Value> = sandboxes
            .iter()
            .filter(|s| s["metadata"]["labels"][POOL_LABEL] == pool.as_str())
            .collect();
        assert!(
            members.len() as u64 <= REPLICAS_AFTER,
            "{pool} has {} members",
            members.len()
        );
        for member in members {
            let key = key_of(member);
            assert!(member["spec"]["forkFrom"].is_null(), "{key} forks");
            let owners = member["metadata"]["ownerReferences"].as_array();
            assert_eq!(
                owners.map(|o| o.iter().map(|o| o["uid"].clone()).collect::<Vec<_>>()),
                Some(vec![json!(uid)]),
                "{key}: owners"
            );
            for finalizer in member["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
            {
                assert_eq!(
                    finalizer, FINALIZER,
                    "{key}: a finalizer not the controller's"
                );
            }
        }
    }
    // The victim: there, not deleting, not claimed, not marked idle; the same for every
    // sandbox of the reap cases' namespaces.
    let victim = sandboxes
        .iter()
        .find(|s| key_of(s) == format!("{NS}/{VICTIM}"))
        .expect("the victim is still there");
    assert!(victim["metadata"]["deletionTimestamp"].is_null());
    assert!(victim["metadata"]["labels"][CLAIMED_BY_LABEL].is_null());
    for sandbox in &sandboxes {
        let key = key_of(sandbox);
        assert!(
            sandbox["status"]["idlePausedAt"].is_null(),
            "{key} was marked idle"
        );
        assert_eq!(
            sandbox["metadata"]["labels"], sandboxes_before[&key]["metadata"]["labels"],
            "{key}: labels (a claim)"
        );
    }
    let ordinary = sandboxes
        .iter()
        .find(|s| key_of(s) == format!("{NS}/{ORDINARY}"))
        .expect("the ordinary sandbox");
    assert_eq!(ordinary["status"]["phase"], "Running");

    // The write log: besides the test's own (the deletion, the pool patches) and the flood's
    // creates of its own Secret, nothing but Events and status writes, and few.
    let writes = cluster.writes();
    let flood_secret = "flood-credentials";
    let (flood, theirs): (Vec<_>, Vec<_>) = writes
        .iter()
        .filter(|w| !test_write(w))
        .partition(|w| w.resource == Resource::Secret && w.name == flood_secret);
    let theirs: Vec<String> = theirs
        .iter()
        .map(|w| format!("{} {} {}/{}", w.verb, w.resource, w.namespace, w.name))
        .collect();
    for write in &theirs {
        assert!(
            write.starts_with("create events ") || write.starts_with("patch_status "),
            "a write of the hostile module: {write}\nall: {theirs:#?}"
        );
    }
    // Each flood call may send up to the calls bound of creates of the Secret it has: the API
    // refuses them all, and the budget stops the rest of its 50,000.
    let flood_attempts = last_failures
        .get(&format!("sandbox {NS}/flood"))
        .map_or(0, |(n, _)| *n);
    assert!(
        flood
            .iter()
            .all(|w| w.verb == "create" && w.error == Some(ApiErrorKind::AlreadyExists)),
        "the flood changed its Secret: {flood:?}"
    );
    let flood_writes = flood.len();
    // One more attempt than logged: the one in flight when the log was read.
    assert!(
        flood_writes <= MAX_KUBE_CALLS * (flood_attempts + 1),
        "flood wrote {flood_writes} times in {flood_attempts} reconciles"
    );
    let attempts: usize =
        last_failures.values().map(|(n, _)| n).sum::<usize>() + SANDBOX_CASES.len();
    let events = writes
        .iter()
        .filter(|w| w.resource == Resource::Event)
        .count();
    assert!(
        events <= 8 * attempts,
        "{events} Events in {attempts} reconciles"
    );

    // The controller serves on.
    assert_eq!(controller.get("/healthz").unwrap().0, 200);
    let (status, ready) = controller.get("/readyz").unwrap();
    assert_eq!(status, 200, "{ready}");
    assert!(ready.contains("policy: cubepod-hostile"), "{ready}");

    // Every rule refused, and the calls budget failed calls.
    let counts: Vec<(&str, f64)> = RULES.iter().map(|r| (*r, refusals(&body, r))).collect();
    for (rule, count) in &counts {
        assert!(*count > 0.0, "no refusal of rule {rule}: {counts:?}");
    }
    let budget_traps = metric_sum(&body, "cubepod_guest_traps_total", &[("reason", "budget")]);
    assert!(budget_traps > 0.0, "the calls budget never failed a call");
    let memory_traps = metric_sum(&body, "cubepod_guest_traps_total", &[("reason", "memory")]);
    assert!(
        memory_traps > 0.0,
        "unbounded-manifest never met the memory bound"
    );

    // Memory: the peak of the hostile phase, sampled, or the process's high-water mark if it
    // rose above the one before the swap (it sees the peaks between samples).
    let (peak_at, sampled_peak) = samples
        .iter()
        .copied()
        .max_by_key(|(_, rss)| *rss)
        .unwrap_or_default();
    let peak_kib = if memory_after.hwm_kib > hwm_before {
        sampled_peak.max(memory_after.hwm_kib)
    } else {
        sampled_peak
    };
    println!(
        "RSS: idle {idle_kib} KiB, hostile phase peak {peak_kib} KiB (sampled {sampled_peak} \
         KiB at {peak_at:?} of {hostile_phase:?}, {} samples; VmHWM {} KiB before the swap, \
         {} after); refusals {counts:?}; budget traps {budget_traps}; failures \
         {last_failures:?}; flood writes {flood_writes}; events {events}",
        samples.len(),
        hwm_before,
        memory_after.hwm_kib
    );
    assert!(
        peak_kib < 2 * idle_kib,
        "RSS peaked at {peak_kib} KiB in the hostile phase, idle {idle_kib} KiB"
    );
}

/// Every Secret name `spec` references: volumes, projected sources, env and envFrom, image
/// pull secrets.
fn secret_refs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match key.as_str() {
                    "secret" => {
                        if let Some(name) = inner["secretName"].as_str().or(inner["name"].as_str())
                        {
                            found.push(name.to_string());
                        }
                    }
                    "secretKeyRef" | "secretRef" => {
                        if let Some(name) = inner["name"].as_str() {
                            found.push(name.to_string());
                        }
                    }
                    "imagePullSecrets" => {
                        for secret in inner.as_array().into_iter().flatten() {
                            if let Some(name) = secret["name"].as_str() {
                                found.push(name.to_string());
                            }
                        }
                    }
                    _ => {}
                }
                secret_refs(inner, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| secret_refs(i, found)),
        _ => {}
    }
}
