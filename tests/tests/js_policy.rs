//! Policies in JavaScript, as their authors make and run them, with the real binary and the
//! toolchain `.ci/policy-toolchains` pins (componentize-js 0.23.0, esbuild 0.28.2, under
//! `target/`):
//! - the example `examples/policies/js-image-allowlist` runs live in the embedded demo: started
//!   with `--policy`, it runs a sandbox of an allowed image and declines another, saying why;
//! - `policy new --lang js` writes a project whose unit tests pass under node's test runner,
//!   whose build script builds the component, and which passes `policy test`.
//!
//! A component of componentize-js is 13 MB, and the debug build of the controller compiles it
//! in minutes on a busy machine: hence the patience.
//!
//! Run: `cargo build -p cubepod-host && cargo test -p cubepod-tests --test js_policy`

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use cubepod_kube::rest::{ConnectionConfig, RestCluster, RestOptions};
use cubepod_kube::{Cluster, Resource};
use cubepod_tests::convergence::{NS, block, until};
use cubepod_tests::{Controller, binary, seed_file, target_root, workspace};

/// Compiling a 13 MB component with the debug build, on two shared cores.
const ADMISSION: Duration = Duration::from_secs(1200);
const PATIENCE: Duration = Duration::from_secs(90);

/// Runs `command`, failing with its output if it fails; returns stdout.
fn succeed(command: &mut Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("the command runs");
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "{command:?}: {status}\n{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

/// The pinned toolchain's `tool` under `target/`.
fn tool(dir: &str, tool: &str) -> std::path::PathBuf {
    let path = target_root(workspace())
        .join(dir)
        .join("node_modules/.bin")
        .join(tool);
    assert!(
        path.exists(),
        "{} is missing: run .ci/policy-toolchains",
        path.display()
    );
    path
}

#[test]
fn the_js_image_allowlist_runs_live_in_the_embedded_demo() {
    let wasm = target_root(workspace()).join("polyglot/js-image-allowlist.wasm");
    succeed(
        Command::new(workspace().join("examples/policies/js-image-allowlist/build.sh")).arg(&wasm),
    );
    let seeds = tempfile::tempdir().unwrap();
    let seed = seed_file(
        seeds.path(),
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: js-allowed, namespace: cubepod-workloads}\n\
         spec: {image: ghcr.io/cubepod/sandbox-base:1.0}\n\
         ---\n\
         apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: js-declined, namespace: cubepod-workloads}\n\
         spec: {image: quay.io/someone/miner:latest}\n",
    );
    let controller = Controller::start(&[
        &format!("--policy={}", wasm.display()),
        &format!("--seed={}", seed.display()),
    ]);
    let ready = controller.wait_for("/readyz", ADMISSION, |s, _| s == 200);
    assert!(
        ready.contains("policy: cubepod-image-allowlist 0.1.0"),
        "{ready}"
    );

    let conn = ConnectionConfig::from_kubeconfig_file(&controller.embedded_kubeconfig())
        .expect("the kubeconfig");
    let api: Arc<RestCluster> = RestCluster::new(conn, RestOptions::default()).expect("a client");
    let sandbox = |name: &str| block(api.get(Resource::Sandbox, NS, name)).ok();
    until("js-allowed Running", PATIENCE, || {
        sandbox("js-allowed").is_some_and(|s| s["status"]["phase"] == "Running")
    });
    assert!(block(api.get(Resource::Pod, NS, "js-allowed")).is_ok());

    until("js-declined Failed", PATIENCE, || {
        sandbox("js-declined").is_some_and(|s| s["status"]["phase"] == "Failed")
    });
    let declined = sandbox("js-declined").expect("js-declined");
    let conditions = declined["status"]["conditions"]
        .as_array()
        .expect("conditions");
    let valid = conditions
        .iter()
        .find(|c| c["type"] == "SpecValid")
        .expect("SpecValid");
    assert_eq!(valid["status"], "False", "{declined}");
    assert_eq!(valid["reason"], "ImageNotAllowed", "{declined}");
    assert_eq!(
        valid["message"],
        "image \"quay.io/someone/miner:latest\" is not one this cluster runs sandboxes of: \
         ghcr.io/cubepod/, docker.io/library/python"
    );
    assert!(block(api.get(Resource::Pod, NS, "js-declined")).is_err());
    assert!(block(api.get(Resource::PersistentVolumeClaim, NS, "js-declined-workspace")).is_err());
}

/// The JavaScript walk-through of docs/policy-authoring.md, run as it is written: `policy new
/// --lang js`, the unit tests, the build, `policy test` (conformance, then the project's
/// scenarios). npm installs the SDK by path; the toolchain package.json pins is under `target/`
/// already (ESBUILD and COMPONENTIZE_JS name it), so npm leaves the dev dependencies out.
#[test]
fn the_js_walk_through_of_the_guide_makes_a_policy_that_passes_policy_test() {
    let guide = std::fs::read_to_string(workspace().join("docs/policy-authoring.md"))
        .expect("read docs/policy-authoring.md");
    let blocks = cubepod_tests::shell_blocks(&guide);
    let walk: Vec<&String> = blocks.iter().filter(|b| b.contains("--lang js")).collect();
    assert_eq!(
        walk.len(),
        1,
        "the guide's JavaScript walk-through: {blocks:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bin = binary();
    let path = format!(
        "{}:{}",
        bin.parent().expect("the binary's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = succeed(
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", walk[0]])
            .current_dir(dir.path())
            .env("PATH", path)
            .env("npm_config_omit", "dev")
            .env("npm_config_package_lock", "false")
            .env("npm_config_prefer_offline", "true")
            .env("ESBUILD", tool("esbuild", "esbuild"))
            .env(
                "COMPONENTIZE_JS",
                tool("componentize-js", "componentize-js"),
            ),
    );
    let project = dir.path().join("pool-cap-js");
    for file in [
        "package.json",
        "policy.js",
        "test/policy.test.js",
        "build.sh",
        "scenarios/pool-cap.yaml",
        ".github/workflows/policy.yml",
    ] {
        assert!(project.join(file).is_file(), "{file} missing:\n{output}");
    }
    assert!(output.contains("# pass 2"), "{output}");
    assert!(project.join("target/pool-cap.wasm").is_file(), "{output}");
    assert!(output.contains("policy pool-cap 0.1.0"), "{output}");
    // Its two scenarios, after the conformance cases the controller admits it by.
    let passed = 2 + cubepod_host::scenario::conformance::cases().len();
    assert!(
        output.ends_with(&format!("{passed} passed, 0 failed\n")),
        "{output}"
    );
}
