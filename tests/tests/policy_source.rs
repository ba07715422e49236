//! One source of the serving module. A controller run with `--policy FILE` serves the file's
//! modules only: every PolicyRollout is refused at once (phase `Refused`, reason
//! `FileSourceSet`, one Warning Event), including one whose status a replica without
//! `--policy` left `Promoted`, and whatever the order in which the file, the rollout's
//! ConfigMap, the rollout's spec and the Lease change, `/readyz`, `cubepod_policy_info`, the
//! rollout's status and the sandboxes' decisions agree once quiet. The real binary, two
//! replicas and a leader change, against the tests' API server over HTTPS.
//!
//! Run: `cargo test -p cubepod-tests --test policy_source`

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use cubepod_apiserver::MemoryCluster;
use cubepod_host::controller::policy_watch::sha256_hex;
use cubepod_kube::{Cluster, Resource};
use cubepod_tests::apiserver::{DEFAULT_SEED, KubeconfigAuth};
use cubepod_tests::convergence::{NS, TOKEN, block, fake_server};
use cubepod_tests::{Controller, binary, image_allowlist_policy, metric, replace_file};
use serde_json::{Value, json};

/// The controller's namespace, where rollouts live.
const SYSTEM: &str = "cubepod-system";
const ROLLOUT: &str = "next";
const PATIENCE: Duration = Duration::from_secs(60);

/// `bytes` with a custom section named `tag` appended: the same behaviour, another digest.
fn variant(bytes: &[u8], tag: [u8; 4]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out.extend_from_slice(&[0, 5, 4]);
    out.extend_from_slice(&tag);
    out
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn election(identity: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-duration=2s",
        "--lease-renew-deadline=1500ms",
        "--lease-retry-period=200ms",
        "--metrics-secure=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--identity={identity}")])
    .collect()
}

fn start(kubeconfig: &Path, flags: &[String]) -> Controller {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Controller::start_with_kubeconfig(kubeconfig, &flags)
}

fn leads(controller: &Controller) -> Result<(), String> {
    let (_, body) = controller.get("/readyz").map_err(|e| e.to_string())?;
    body.contains("leader: yes").then_some(()).ok_or(body)
}

/// Waits until `check` holds; panics with `what` and the last `said` otherwise.
fn until(what: &str, check: impl Fn() -> Result<(), String>) {
    let started = Instant::now();
    loop {
        match check() {
            Ok(()) => return,
            Err(said) if started.elapsed() > PATIENCE => panic!("{what}: {said}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn rollout(cluster: &MemoryCluster, namespace: &str, name: &str) -> Value {
    block(cluster.get(Resource::PolicyRollout, namespace, name)).unwrap_or_default()
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// `type reason: message` of each Event about the PolicyRollout `namespace/name`.
fn events(cluster: &MemoryCluster, namespace: &str, name: &str) -> Vec<String> {
    cluster
        .objects(Resource::Event)
        .iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "PolicyRollout"
                && e["involvedObject"]["name"] == name
                && e["metadata"]["namespace"] == namespace
        })
        .map(|e| {
            format!(
                "{} {}: {}",
                e["type"].as_str().unwrap_or_default(),
                e["reason"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Every place that names the module serving agrees with `digest` (the file's), and the
/// rollout says it is refused because of the file.
fn agree(
    cluster: &MemoryCluster,
    replica: &Controller,
    path: &str,
    digest: &str,
) -> Result<(), String> {
    let (_, ready) = replica.get("/readyz").map_err(|e| e.to_string())?;
    if !ready.contains(&format!("sha256 {digest})")) {
        return Err(format!("/readyz names another module:\n{ready}"));
    }
    let (_, metrics) = replica.get("/metrics").map_err(|e| e.to_string())?;
    let serving: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("cubepod_policy_info{"))
        .collect();
    if serving.len() != 1
        || metric(&metrics, "cubepod_policy_info", &[("digest", digest)]) != Some(1.0)
    {
        return Err(format!("cubepod_policy_info: {serving:?}"));
    }
    let status = rollout(cluster, SYSTEM, ROLLOUT)["status"].clone();
    let admitted = condition(&status, "Admitted");
    let says = status["phase"] == "Refused"
        && admitted["status"] == "False"
        && admitted["reason"] == "FileSourceSet"
        && admitted["message"].as_str().is_some_and(|m| {
            m.contains(&format!("--policy {path}")) && m.contains("remove --policy")
        })
        && status["stable"]["digest"] == digest
        && status["candidate"].is_null()
        && status["weight"] == 0
        && condition(&status, "Progressing")["reason"] == "FileSourceSet";
    if !says {
        return Err(format!("the rollout's status: {status:#}"));
    }
    Ok(())
}

#[test]
fn with_a_policy_file_every_rollout_is_refused_and_every_report_names_the_files_module() {
    let fake = fake_server(Duration::from_millis(50), DEFAULT_SEED);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let cluster: Arc<MemoryCluster> = fake.cluster();

    // The file's module: the built-in default as the binary exports it.
    let policy_dir = dir.path().join("policy");
    std::fs::create_dir_all(&policy_dir).unwrap();
    let path = policy_dir.join("policy.wasm");
    let exported = Command::new(binary())
        .args(["policy", "export", "builtin:default", "-o"])
        .arg(&path)
        .status()
        .expect("policy export runs");
    assert!(exported.success());
    let default = std::fs::read(&path).unwrap();
    let allowlist = std::fs::read(image_allowlist_policy()).unwrap();

    // A sandbox the allowlist declines, and one it runs.
    for (name, image) in [
        ("busybox", "docker.io/library/busybox:1.36"),
        ("allowed", "ghcr.io/cubepod/sandbox-base:1.0"),
    ] {
        let sandbox = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"image": image},
        });
        block(cluster.create(Resource::Sandbox, NS, sandbox)).expect("a sandbox");
    }

    // A replica without --policy leads and promotes the allowlist by a rollout.
    let a = start(&kubeconfig, &election("a"));
    until("a leads", || leads(&a));
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ROLLOUT, "namespace": SYSTEM},
        "binaryData": {"policy.wasm": base64(&allowlist)},
    });
    block(cluster.create(Resource::ConfigMap, SYSTEM, map)).expect("the module's ConfigMap");
    let manifest = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "PolicyRollout",
        "metadata": {"name": ROLLOUT, "namespace": SYSTEM},
        "spec": {"module": {"configMap": ROLLOUT}, "strategy": {"type": "Immediate"}},
    });
    block(cluster.create(Resource::PolicyRollout, SYSTEM, manifest)).expect("the rollout");
    until("a promotes the allowlist", || {
        let status = &rollout(&cluster, SYSTEM, ROLLOUT)["status"];
        (status["phase"] == "Promoted" && status["stable"]["name"] == "cubepod-image-allowlist")
            .then_some(())
            .ok_or_else(|| format!("{status:#}"))
    });

    // A replica with --policy joins (the signed-policy patch rolling out), and everything
    // changes at once: the leader goes, the file is replaced, the rollout's module and spec
    // change.
    let mut flags = election("b");
    flags.push(format!("--policy={}", path.display()));
    flags.push("--policy-poll-interval=100ms".to_string());
    let b = start(&kubeconfig, &flags);
    b.wait_for("/readyz", PATIENCE, |_, body| body.contains("leader: no"));
    let mut a = a;
    let churn_file = {
        let (path, default) = (path.clone(), default.clone());
        std::thread::spawn(move || {
            for n in 0..6u8 {
                replace_file(&path, &variant(&default, [b'f', b'i', b'l', b'0' + n]));
                std::thread::sleep(Duration::from_millis(150));
            }
        })
    };
    let churn_rollout = {
        let (cluster, allowlist) = (cluster.clone(), allowlist.clone());
        std::thread::spawn(move || {
            for n in 0..6u8 {
                let module = variant(&allowlist, [b'c', b'm', b'0', b'0' + n]);
                let patch = json!({"binaryData": {"policy.wasm": base64(&module)}});
                let _ = block(cluster.patch(Resource::ConfigMap, SYSTEM, ROLLOUT, patch));
                let strategy = if n % 2 == 0 {
                    json!({"type": "Progressive", "canary": {"steps": [{"weight": 50, "duration": "1s"}, {"weight": 100, "duration": "1s"}]}})
                } else {
                    json!({"type": "Immediate"})
                };
                let patch = json!({"spec": {"strategy": strategy}});
                let _ = block(cluster.patch(Resource::PolicyRollout, SYSTEM, ROLLOUT, patch));
                std::thread::sleep(Duration::from_millis(120));
            }
        })
    };
    a.terminate(Duration::from_secs(20)).expect("a stops");
    churn_file.join().unwrap();
    churn_rollout.join().unwrap();
    until("b leads", || leads(&b));

    // Quiet: the file's last module serves, and everything says so, and keeps saying so.
    let last = variant(&default, [b'f', b'i', b'l', b'5']);
    let digest = sha256_hex(&last);
    let shown = path.display().to_string();
    until("every report names the file's module", || {
        agree(&cluster, &b, &shown, &digest)
    });
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        if let Err(said) = agree(&cluster, &b, &shown, &digest) {
            panic!("a report changed once quiet: {said}");
        }
    }
    // The decisions are the file's module's: the default runs the sandbox the allowlist
    // declines.
    until("busybox runs under the file's module", || {
        let sandbox = block(cluster.get(Resource::Sandbox, NS, "busybox")).unwrap_or_default();
        (sandbox["status"]["phase"] == "Running")
            .then_some(())
            .ok_or_else(|| format!("{:#}", sandbox["status"]))
    });
    let told = events(&cluster, SYSTEM, ROLLOUT);
    let refusals = told
        .iter()
        .filter(|e| {
            e.starts_with("Warning RolloutRefused: this controller serves the module of --policy")
        })
        .count();
    assert_eq!(refusals, 1, "one Event for the refusal: {told:?}");
    let logged = b.logs().into_iter().any(|line| {
        line["fields"]["reason"] == "FileSourceSet" && line["fields"]["rollout"] == ROLLOUT
    });
    assert!(logged, "a log line says why");
}

/// A rollout outside the controller's namespace is refused at once: its status, one Event.
#[test]
fn a_rollout_outside_the_controllers_namespace_is_told_it_is_not_acted_on() {
    let fake = fake_server(Duration::from_millis(50), DEFAULT_SEED);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path(), &KubeconfigAuth::Token(TOKEN.to_string()))
        .unwrap();
    let cluster = fake.cluster();
    let controller = start(&kubeconfig, &["--metrics-secure=false".to_string()]);
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    let manifest = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "PolicyRollout",
        "metadata": {"name": "elsewhere", "namespace": NS},
        "spec": {"module": {"configMap": "elsewhere"}},
    });
    block(cluster.create(Resource::PolicyRollout, NS, manifest)).expect("the rollout");
    until("the rollout is told", || {
        let status = &rollout(&cluster, NS, "elsewhere")["status"];
        let admitted = condition(status, "Admitted");
        (status["phase"] == "Refused"
            && admitted["reason"] == "OutsideControllerNamespace"
            && admitted["message"]
                .as_str()
                .is_some_and(|m| m.contains("only in its own namespace cubepod-system")))
        .then_some(())
        .ok_or_else(|| format!("{status:#}"))
    });
    std::thread::sleep(Duration::from_millis(800));
    let told = events(&cluster, NS, "elsewhere");
    assert!(
        told.len() == 1 && told[0].starts_with("Warning RolloutRefused: not acted on"),
        "one Event: {told:?}"
    );
}
