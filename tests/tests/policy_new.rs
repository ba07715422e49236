//! The whole path of a policy author, with the real binary: `policy new` writes a crate outside
//! the workspace, which builds for wasm32-wasip2, passes its own `cargo test` and, with
//! `policy test`, its scenarios; then the component is hot-swapped into a running embedded
//! controller that was started on the exported built-in module, and the new decision shows:
//! the example warm pool, filled to 3 by the default policy, is capped at 2.
//!
//! The new crate's dependencies (serde, wit-bindgen, ...) build once into `target/policy-new/`
//! of the workspace, so a rerun is incremental; the workspace's Cargo.lock is copied in so that
//! the versions are the ones the workspace already built (cargo fetches them when missing).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use cubepod_tests::{
    Controller, WASM_TARGET, binary, metric, nested_cargo, replace_file, target_root, workspace,
};

const PATIENCE: Duration = Duration::from_secs(90);
const NAME: &str = "pool-cap";

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

/// `cargo ARGS` in the new crate, with its dependencies built in one stable dir.
fn cargo(dir: &Path, args: &[&str]) -> String {
    let target = target_root(workspace()).join("policy-new");
    succeed(
        nested_cargo(dir)
            .args(args)
            .env("CARGO_TARGET_DIR", &target),
    )
}

#[test]
fn a_new_policy_builds_tests_passes_its_scenarios_and_swaps_in() {
    let dir = tempfile::tempdir().unwrap();
    let policy_dir = dir.path().join(NAME);

    // The SDK of the checkout the binary was built from, by default.
    let created = succeed(Command::new(binary()).args([
        "policy",
        "new",
        NAME,
        "--path",
        policy_dir.to_str().unwrap(),
    ]));
    let sdk = workspace().canonicalize().unwrap().join("sdk");
    assert!(
        created.contains(&format!(
            "cubepod-policy-sdk = {{ path = \"{}\" }}",
            sdk.display()
        )),
        "{created}"
    );
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "scenarios/pool-cap.yaml",
        ".github/workflows/policy.yml",
    ] {
        assert!(
            policy_dir.join(file).is_file(),
            "{file} missing:\n{created}"
        );
    }

    // A second `policy new` into the same directory writes nothing.
    let again = Command::new(binary())
        .args([
            "policy",
            "new",
            NAME,
            "--path",
            policy_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is not empty"),
        "{again:?}"
    );

    std::fs::copy(
        workspace().join("Cargo.lock"),
        policy_dir.join("Cargo.lock"),
    )
    .unwrap();
    let tested = cargo(&policy_dir, &["test", "--quiet"]);
    assert!(tested.contains("2 passed"), "{tested}");
    cargo(
        &policy_dir,
        &["build", "--quiet", "--release", "--target", WASM_TARGET],
    );
    let wasm = target_root(workspace())
        .join("policy-new")
        .join(WASM_TARGET)
        .join("release")
        .join("pool_cap.wasm");

    let junit = dir.path().join("junit.xml");
    let report = succeed(
        Command::new(binary())
            .args(["policy", "test"])
            .arg(&wasm)
            .arg(policy_dir.join("scenarios"))
            .arg("--junit")
            .arg(&junit),
    );
    assert!(report.contains("policy pool-cap 0.1.0"), "{report}");
    // Its two scenarios, after the conformance cases the controller admits it by.
    let passed = 2 + cubepod_host::scenario::conformance::cases().len();
    assert!(
        report.ends_with(&format!("{passed} passed, 0 failed\n")),
        "{report}"
    );
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("failures=\"0\"")
    );

    // The controller runs the built-in module, exported to the file it watches, over the
    // embedded cluster's examples: the default policy fills the pool of 3.
    let policy = dir.path().join("policy.wasm");
    succeed(Command::new(binary()).args([
        "policy",
        "export",
        "builtin:default",
        "-o",
        policy.to_str().unwrap(),
    ]));
    let controller = Controller::start(&[
        &format!("--policy={}", policy.display()),
        "--policy-poll-interval=200ms",
    ]);
    let pool_ready =
        |body: &str| metric(body, "cubepod_warmpool_ready", &[("pool", "python-pool")]);
    controller.wait_for("/metrics", PATIENCE, |_, body| {
        pool_ready(body) == Some(3.0)
    });
    let ready = controller.wait_for("/readyz", PATIENCE, |s, _| s == 200);
    assert!(ready.contains("policy: cubepod-default"), "{ready}");
    let capped = |fields: &serde_json::Value| fields["reason"] == "PolicyCapped";
    assert!(
        !controller.logs().iter().any(|l| capped(&l["fields"])),
        "the default policy has no cap of its own"
    );

    // The new policy takes over: the pool is capped at 2, says so, and loses a member.
    replace_file(&policy, &std::fs::read(&wasm).unwrap());
    controller.wait_for("/readyz", PATIENCE, |_, body| {
        body.contains("policy: pool-cap")
    });
    let line = controller.wait_for_log(PATIENCE, capped);
    assert_eq!(line["fields"]["name"], "python-pool", "{line}");
    assert_eq!(line["fields"]["kind"], "PodWarmPool", "{line}");
    let body = controller.wait_for("/metrics", PATIENCE, |_, body| {
        pool_ready(body) == Some(2.0)
    });
    assert_eq!(
        metric(
            &body,
            "cubepod_policy_swaps_total",
            &[("result", "applied")]
        ),
        Some(1.0)
    );
}

/// The same path in Python, as docs/policy-authoring.md ("In Python") writes it, its commands
/// run as they are: `policy new --lang python` writes a project on the Python SDK of this
/// checkout whose unit tests pass (`./build.sh test`, pytest), which builds with the
/// componentize-py its build script pins (here from the venv `.ci/policy-toolchains` installs)
/// and passes `policy test`: the conformance self-test and its two scenarios, the same as the
/// Rust crate's.
#[test]
fn the_python_walk_through_of_the_guide_makes_a_policy_that_passes_its_scenarios() {
    let guide = std::fs::read_to_string(workspace().join("docs/policy-authoring.md"))
        .expect("read docs/policy-authoring.md");
    let blocks = cubepod_tests::shell_blocks(&guide);
    let walk: Vec<&String> = blocks
        .iter()
        .filter(|b| b.contains("policy new pool-cap --lang python"))
        .collect();
    assert_eq!(walk.len(), 1, "the guide's Python walk-through: {blocks:?}");

    // A checkout-like directory whose `target/debug/cubepod-controller` is the binary under
    // test, which is also `cubepod-controller` on PATH; the project goes beside it.
    let dir = tempfile::tempdir().unwrap();
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("target/debug")).unwrap();
    std::os::unix::fs::symlink(binary(), checkout.join("target/debug/cubepod-controller")).unwrap();
    let bin = binary()
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let out = succeed(
        Command::new("sh")
            .args(["-ec", walk[0].as_str()])
            .current_dir(&checkout)
            .env("PATH", path)
            .env(
                "CUBEPOD_POLICY_VENV",
                workspace().join("target/componentize-py"),
            ),
    );
    let project = dir.path().join("pool-cap-py");
    for file in [
        "app.py",
        "test_app.py",
        "build.sh",
        "scenarios/pool-cap.yaml",
        ".github/workflows/policy.yml",
    ] {
        assert!(project.join(file).is_file(), "{file} missing:\n{out}");
    }
    assert!(out.contains("2 passed"), "the unit tests: {out}");
    assert!(out.contains("policy pool-cap 0.1.0"), "{out}");
    let passed = 2 + cubepod_host::scenario::conformance::cases().len();
    assert!(
        out.ends_with(&format!("{passed} passed, 0 failed\n")),
        "{out}"
    );
}
