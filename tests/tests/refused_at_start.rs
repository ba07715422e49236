//! A policy module refused at start does not stop the process: it stays up, alive, not ready
//! (`/readyz` names the module file, its digest and why), holding no Lease and touching no
//! object, while it watches the file; the first admissible module written there starts the
//! controller in the same process. The real binary, the embedded cluster and kubectl.

use std::time::Duration;

use cubepod_host::controller::policy_watch::sha256_hex;
use cubepod_host::signing::{SigningKey, signature_path};
use cubepod_policy_host::runtime::DEFAULT_POLICY;
use cubepod_tests::kubectl::Kubectl;
use cubepod_tests::{Controller, faulty_policy_variant, metric, p256_key_pair, replace_file};

const PATIENCE: Duration = Duration::from_secs(90);

const NS: &str = "cubepod-workloads";

/// A controller started on `policy` with `extra` flags and the embedded cluster, and kubectl
/// on its kubeconfig.
fn start(
    home: &std::path::Path,
    policy: &std::path::Path,
    extra: &[&str],
) -> (Controller, Kubectl) {
    let kubeconfig = home.join("embedded/kubeconfig");
    let mut flags = vec![
        format!("--embedded-kubeconfig={}", kubeconfig.display()),
        format!("--policy={}", policy.display()),
        "--policy-poll-interval=200ms".to_string(),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // Returns once /healthz answers 200: the process is up and alive.
    let controller = Controller::start(&flags);
    (controller, Kubectl::new(&kubeconfig, home))
}

/// `/readyz` once it says why the module was refused, not ready (503).
fn not_ready_saying(controller: &Controller, says: &[&str]) -> String {
    let body = controller.wait_for("/readyz", PATIENCE, |status, body| {
        status == 503 && says.iter().all(|s| body.contains(s))
    });
    assert!(body.contains("policy: none admitted yet"), "{body}");
    body
}

#[test]
fn a_module_refused_at_start_waits_not_ready_and_the_first_good_one_starts_the_controller() {
    let home = tempfile::tempdir().unwrap();
    let (private, public) = p256_key_pair(home.path(), "release");
    let key = SigningKey::load(&private).unwrap();
    let policy = home.path().join("policy.wasm");
    let sig = signature_path(&policy);
    // The default policy with a signature of other bytes: signature_invalid.
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    std::fs::write(&sig, key.sign(b"another module")).unwrap();
    let (mut controller, kubectl) = start(
        home.path(),
        &policy,
        &[
            &format!("--policy-verify-key={}", public.display()),
            "--leader-elect",
            "--lease-duration=2s",
            "--lease-renew-deadline=1s",
            "--lease-retry-period=200ms",
        ],
    );
    let pid = controller.child.id();
    let digest = sha256_hex(DEFAULT_POLICY);
    let body = not_ready_saying(
        &controller,
        &["refused (signature_invalid)", &digest, "policy.wasm"],
    );
    assert!(body.contains("cache: not started"), "{body}");
    assert!(body.contains("leader: no"), "{body}");

    // A Sandbox made while no module runs: nothing is done about it.
    let manifest = kubectl.write(
        "waiting.yaml",
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: waiting, namespace: cubepod-workloads}\n\
         spec: {image: ghcr.io/cubepod/sandbox-base:1.0}\n",
    );
    kubectl.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    // Longer than a reconcile, a status write and a Lease acquisition would take.
    std::thread::sleep(Duration::from_secs(3));
    // `kubectl get` of the waiting sandbox, printing `output`.
    let waiting = |output| ["get", "sandbox", "waiting", "-n", NS, "-o", output];
    let status = kubectl.ok(&waiting("jsonpath={.status}"));
    assert_eq!(status.trim(), "", "the sandbox was touched: {status}");
    let leases = kubectl.ok(&["get", "leases", "-n", "cubepod-system", "-o", "name"]);
    assert_eq!(leases.trim(), "", "a Lease was taken: {leases}");
    let pods = kubectl.ok(&["get", "pods", "-n", NS, "-o", "name"]);
    assert_eq!(pods.trim(), "", "a Pod was made: {pods}");
    let (status, _) = controller.get("/healthz").unwrap();
    assert_eq!(status, 200, "alive while waiting");
    // Told once, not at every poll (about 15 polls so far).
    let told = controller
        .logs()
        .into_iter()
        .filter(|l| l["fields"]["reason"] == "signature_invalid")
        .count();
    assert_eq!(told, 1, "one log line per distinct refusal");
    let metrics = controller.get("/metrics").unwrap().1;
    assert_eq!(
        metric(
            &metrics,
            "cubepod_policy_swaps_total",
            &[("result", "signature_invalid")]
        ),
        Some(1.0)
    );

    // Another refusal, garbage in the file: said in its turn.
    replace_file(&policy, b"this is not a component");
    replace_file(&sig, key.sign(b"this is not a component").as_bytes());
    not_ready_saying(
        &controller,
        &["refused (compile)", &sha256_hex(b"this is not a component")],
    );

    // The module and its signature: the controller starts, in the same process.
    replace_file(&policy, DEFAULT_POLICY);
    replace_file(&sig, key.sign(DEFAULT_POLICY).as_bytes());
    let ready = controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    assert!(ready.contains("policy: cubepod-default"), "{ready}");
    assert!(!ready.contains("policy file:"), "no refusal told: {ready}");
    kubectl.until(&waiting("jsonpath={.status.phase}"), |phase| {
        phase == "Running"
    });
    kubectl.until(
        &["get", "leases", "-n", "cubepod-system", "-o", "name"],
        |leases| leases.contains("cubepod-controller"),
    );
    assert_eq!(controller.child.id(), pid);
    assert!(
        controller.child.try_wait().unwrap().is_none(),
        "the same process serves on"
    );
    // And it goes on watching: a later module is a hot swap.
    replace_file(
        &policy,
        &std::fs::read(cubepod_tests::faulty_policy()).unwrap(),
    );
    replace_file(
        &sig,
        key.sign(&std::fs::read(cubepod_tests::faulty_policy()).unwrap())
            .as_bytes(),
    );
    controller.wait_for("/readyz", PATIENCE, |_, body| {
        body.contains("policy: cubepod-faulty")
    });
}

/// No file at all, then a module that fails its self-test: each said on `/readyz` in its turn,
/// and the process stops cleanly on SIGTERM while it waits.
#[test]
fn a_missing_or_failing_module_is_said_and_a_stop_while_waiting_is_clean() {
    let home = tempfile::tempdir().unwrap();
    let policy = home.path().join("policy.wasm");
    let (mut controller, _kubectl) = start(home.path(), &policy, &[]);
    not_ready_saying(&controller, &["unreadable", "policy.wasm", "No such file"]);

    let nonconforming = std::fs::read(faulty_policy_variant("nonconforming")).unwrap();
    replace_file(&policy, &nonconforming);
    let body = not_ready_saying(
        &controller,
        &[
            "refused (self_test)",
            &sha256_hex(&nonconforming),
            "policy.wasm",
        ],
    );
    assert!(body.contains("conformance"), "{body}");

    let status = controller
        .terminate(PATIENCE)
        .expect("stops on SIGTERM while waiting");
    assert!(status.success(), "exit {status}: {}", controller.stderr());
}

/// With a verification key, an unsigned module waits for its signature, which `/readyz` names.
#[test]
fn an_unsigned_module_waits_for_its_signature() {
    let home = tempfile::tempdir().unwrap();
    let (private, public) = p256_key_pair(home.path(), "release");
    let policy = home.path().join("unsigned.wasm");
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    let (controller, _kubectl) = start(
        home.path(),
        &policy,
        &[&format!("--policy-verify-key={}", public.display())],
    );
    not_ready_saying(
        &controller,
        &["refused (signature_missing)", "unsigned.wasm.sig"],
    );
    let key = SigningKey::load(&private).unwrap();
    replace_file(
        &signature_path(&policy),
        key.sign(DEFAULT_POLICY).as_bytes(),
    );
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
}
