//! A policy written in Python, live: `examples/policies/python-image-allowlist` (on the Python
//! SDK, built by componentize-py into target/polyglot/ by `.ci/policy-examples build`, once per
//! run) is the embedded controller's `--policy`. The controller admits it (contract and
//! self-test), and it decides as its scenarios say: a sandbox of an image on its list runs, one
//! outside it gets no child and a `SpecValid=False` condition that names the image and the list.
//!
//! Run: `cargo test -p cubepod-tests --test python_policy` (after `.ci/policy-toolchains`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cubepod_tests::{Controller, seed_file, workspace};

/// A Python component is ~18 MB: its first compilation, in a debug build on a loaded machine,
/// takes minutes.
const PATIENCE: Duration = Duration::from_secs(600);
const NS: &str = "cubepod-workloads";

/// `.ci/policy-examples`' component NAME, built (or found fresh) in target/polyglot/.
fn polyglot(name: &str) -> PathBuf {
    let status = Command::new("bash")
        .arg(workspace().join(".ci/policy-examples"))
        .arg("build")
        .status()
        .expect(".ci/policy-examples runs");
    assert!(
        status.success(),
        ".ci/policy-examples build failed ({status}): run .ci/policy-toolchains first"
    );
    workspace()
        .join("target/polyglot")
        .join(format!("{name}.wasm"))
}

fn sandbox(kubeconfig: &Path, name: &str) -> serde_json::Value {
    let output = Command::new("kubectl")
        .args(["get", "sandbox", name, "-n", NS, "-o", "json"])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl");
    serde_json::from_slice(&output.stdout).unwrap_or_default()
}

fn condition(sandbox: &serde_json::Value, kind: &str) -> serde_json::Value {
    sandbox["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_python_image_allowlist_runs_live_in_the_embedded_demo() {
    let policy = polyglot("python-image-allowlist");
    let dir = tempfile::tempdir().unwrap();
    let seed = seed_file(
        dir.path(),
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: py-allowed, namespace: cubepod-workloads}\n\
         spec: {image: ghcr.io/cubepod/sandbox-base:1.0}\n\
         ---\n\
         apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: py-denied, namespace: cubepod-workloads}\n\
         spec: {image: quay.io/someone/miner:latest}\n",
    );
    let controller = Controller::start(&[
        &format!("--policy={}", policy.display()),
        &format!("--seed={}", seed.display()),
    ]);
    let ready = controller.wait_for("/readyz", PATIENCE, |s, _| s == 200);
    assert!(
        ready.contains("policy: cubepod-image-allowlist-python"),
        "{ready}"
    );

    let kubeconfig = controller.embedded_kubeconfig();
    let started = Instant::now();
    let (allowed, denied) = loop {
        let (allowed, denied) = (
            sandbox(&kubeconfig, "py-allowed"),
            sandbox(&kubeconfig, "py-denied"),
        );
        if allowed["status"]["phase"] == "Running" && denied["status"]["phase"] == "Failed" {
            break (allowed, denied);
        }
        assert!(
            started.elapsed() < PATIENCE,
            "allowed: {allowed:#}\ndenied: {denied:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        condition(&allowed, "Ready")["status"],
        "True",
        "{allowed:#}"
    );
    let valid = condition(&denied, "SpecValid");
    assert_eq!(valid["status"], "False", "{denied:#}");
    assert_eq!(valid["reason"], "ImageNotAllowed", "{denied:#}");
    assert_eq!(
        valid["message"],
        "image \"quay.io/someone/miner:latest\" is not one this cluster runs sandboxes of: \
         ghcr.io/cubepod/, docker.io/library/python",
        "{denied:#}"
    );
    assert_eq!(denied["status"]["rootfsPVC"], serde_json::Value::Null);
}
