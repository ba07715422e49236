//! The example policies `examples/policies/guarded` and `examples/policies/image-allowlist`,
//! built here with the shared nested cargo builder, as `docs/policy-authoring.md` tells an
//! operator to check a policy in CI: each passes the controller's admission (`policy inspect`,
//! and `policy test` before its scenarios) and its own scenarios (`policy test`), and the
//! default policy passes its own as well: every policy passes the scenarios it ships with.
//!
//! Run: `cargo test -p cubepod-host --test example_policy`

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use cubepod_policy_host::runtime::CONTRACT_VERSION;

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../policy/wasm_build.rs");
}

const SCENARIOS: &str = "examples/policies/guarded/scenarios";
/// The guarded policy adds node affinity and tolerations, outside the default Pod profile:
/// the operator allows them, as its documentation says.
const GUARDED_FLAGS: &str = "--allow-pod-field=affinity,tolerations";

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

const ALLOWLIST_SCENARIOS: &str = "examples/policies/image-allowlist/scenarios";

/// The image-allowlist policy's component, built once per test run.
fn allowlist_wasm() -> &'static Path {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    WASM.get_or_init(|| {
        wasm_build::build_policy_component(
            workspace(),
            "cubepod-policy-image-allowlist",
            "cubepod_policy_image_allowlist",
        )
        .unwrap_or_else(|why| panic!("{why}"))
    })
}

/// The guarded policy's component, built once per test run.
fn guarded_wasm() -> &'static Path {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    WASM.get_or_init(|| {
        wasm_build::build_policy_component(
            workspace(),
            "cubepod-policy-guarded",
            "cubepod_policy_guarded",
        )
        .unwrap_or_else(|why| panic!("{why}"))
    })
}

/// Runs the binary from the workspace root, so that the scenario paths resolve as in CI.
fn run(args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_cubepod-controller"))
        .args(args)
        .current_dir(workspace())
        // The flags' environment variables must not leak in from the developer's shell.
        .env_remove("CUBEPOD_GUEST_DEADLINE")
        .env_remove("CUBEPOD_GUEST_MEMORY_MIB")
        .env_remove("CUBEPOD_ALLOW_POD_FIELD")
        .output()
        .expect("the binary runs");
    (
        status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// The closing `N passed, M failed` line.
fn summary(stdout: &str) -> (usize, usize) {
    let last = stdout.lines().last().expect("some output");
    let (passed, failed) = last
        .strip_suffix(" failed")
        .and_then(|s| s.split_once(" passed, "))
        .unwrap_or_else(|| panic!("no summary line at the end: {stdout}"));
    (passed.parse().unwrap(), failed.parse().unwrap())
}

/// The scenarios in a folder's files: one per file, plus one per `---` separator.
fn scenario_count(folder: &str) -> usize {
    std::fs::read_dir(workspace().join(folder))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|x| x == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            1 + text.lines().filter(|line| line.trim_end() == "---").count()
        })
        .sum()
}

/// Every conformance case (the controller's admission) and every scenario of `folder` passed.
fn assert_all_pass(code: i32, stdout: &str, stderr: &str, folder: &str) {
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let scenarios = scenario_count(folder);
    assert!(scenarios > 0, "no scenario in {folder}");
    let expected = scenarios + cubepod_host::scenario::conformance::cases().len();
    assert_eq!(summary(stdout), (expected, 0), "{stdout}");
    assert_eq!(stdout.matches("\nPASS ").count(), expected, "{stdout}");
    assert!(
        stdout.contains("PASS new running sandbox (builtin:conformance/new-sandbox.yaml)"),
        "{stdout}"
    );
}

#[test]
fn the_guarded_policy_passes_its_scenarios() {
    let wasm = guarded_wasm().to_str().expect("a UTF-8 path");
    let (code, stdout, stderr) = run(&["policy", "test", wasm, SCENARIOS, GUARDED_FLAGS]);
    assert!(
        stdout.starts_with("policy cubepod-guarded 0.1.0 (contract "),
        "{stdout}"
    );
    assert_all_pass(code, &stdout, &stderr, SCENARIOS);
    assert!(
        stdout.contains(&format!(
            "PASS a new sandbox's Pod is pinned to Kata nodes with default limits ({SCENARIOS}/new-sandbox.yaml)"
        )),
        "{stdout}"
    );
}

#[test]
fn the_guarded_policy_fits_the_contract() {
    let wasm = guarded_wasm().to_str().expect("a UTF-8 path");
    let (code, stdout, stderr) = run(&["policy", "inspect", wasm, GUARDED_FLAGS]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for expected in [
        "name:      cubepod-guarded\n".to_string(),
        "version:   0.1.0\n".to_string(),
        format!("contract:  {CONTRACT_VERSION} (the host supports 0.1.0 and {CONTRACT_VERSION})\n"),
        format!("exports:\n  cubepod:controller/policy@{CONTRACT_VERSION}\n"),
        format!("fits the contract cubepod:controller@{CONTRACT_VERSION}: yes"),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

#[test]
fn the_guarded_policy_is_refused_without_the_flag() {
    let wasm = guarded_wasm().to_str().expect("a UTF-8 path");
    let (code, stdout, _) = run(&["policy", "test", wasm, SCENARIOS]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("refused by rule pod at spec.affinity"),
        "{stdout}"
    );
}

/// The conformance sandboxes run an image outside its list: the controller takes a policy that
/// declines them and says why, so `policy test` passes it with no flag, and so does `inspect`.
#[test]
fn the_image_allowlist_policy_is_admitted_and_passes_its_scenarios() {
    let wasm = allowlist_wasm().to_str().expect("a UTF-8 path");
    let (code, stdout, stderr) = run(&["policy", "test", wasm, ALLOWLIST_SCENARIOS]);
    assert!(
        stdout.starts_with("policy cubepod-image-allowlist 0.1.0 (contract "),
        "{stdout}"
    );
    assert_all_pass(code, &stdout, &stderr, ALLOWLIST_SCENARIOS);
    assert!(
        stdout.contains(&format!(
            "PASS an image outside the list is declined and says why ({ALLOWLIST_SCENARIOS}/image-not-allowed.yaml)"
        )),
        "{stdout}"
    );
    let (code, stdout, stderr) = run(&["policy", "inspect", wasm]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "fits the contract cubepod:controller@{CONTRACT_VERSION}: yes"
        )),
        "{stdout}"
    );
}

#[test]
fn the_default_policy_passes_its_scenarios() {
    let (code, stdout, stderr) = run(&["policy", "test", "builtin:default", "tests/scenarios"]);
    assert!(stdout.starts_with("policy cubepod-default "), "{stdout}");
    assert_all_pass(code, &stdout, &stderr, "tests/scenarios");
}

/// `policy diff`: the default policy against the image allowlist over the allowlist's own
/// scenarios. The sandboxes of an image outside the list are decided differently (no calls,
/// SpecValid False, Failed, an Event), object by object, exit 1; the others are the same; the
/// JUnit report has a testcase per object. The same module on both sides differs nowhere
/// (exit 0), and a module admission refuses stops it (exit 2).
#[test]
fn policy_diff_shows_what_the_allowlist_declines_and_nothing_for_the_same_module() {
    let wasm = allowlist_wasm().to_str().expect("a UTF-8 path");
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("diff.xml");
    let junit_flag = format!("--junit={}", junit.display());
    let (code, stdout, stderr) = run(&[
        "policy",
        "diff",
        "builtin:default",
        wasm,
        ALLOWLIST_SCENARIOS,
        &junit_flag,
    ]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("stable:    cubepod-default "),
        "{stdout}"
    );
    assert!(
        stdout.contains("candidate: cubepod-image-allowlist "),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nSAME Sandbox cubepod-workloads/a\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nSAME Sandbox cubepod-workloads/py\n"),
        "{stdout}"
    );
    // The declined sandbox: what the candidate does differently, under it.
    let b = stdout
        .split("\nDIFF Sandbox cubepod-workloads/b\n")
        .nth(1)
        .unwrap_or_else(|| panic!("b differs: {stdout}"));
    let b: Vec<&str> = b.lines().take_while(|l| l.starts_with("    ")).collect();
    for line in [
        "    calls (- stable, + candidate):",
        "      - ensure-pod b",
        "      + (none)",
        "    status.phase: \"Pending\" -> \"Failed\"",
        "    status.conditions[type=SpecValid].reason: \"Valid\" -> \"ImageNotAllowed\"",
        "      + ImageNotAllowed",
        "      - Started",
    ] {
        assert!(b.contains(&line), "{line:?} not in {b:#?}");
    }
    assert!(
        stdout.contains("\nDIFF Sandbox cubepod-workloads/lookalike\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("5 object(s) compared, 2 decided differently by the candidate\n"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(&junit).unwrap();
    assert!(report.contains(r#"tests="5" failures="2""#), "{report}");
    assert!(
        report.contains(r#"<testcase name="Sandbox cubepod-workloads/b""#),
        "{report}"
    );

    let (code, stdout, stderr) = run(&[
        "policy",
        "diff",
        "builtin:default",
        wasm,
        &format!("{ALLOWLIST_SCENARIOS}/allowed-image.yaml"),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (code, stdout, stderr) = run(&["policy", "diff", wasm, wasm, ALLOWLIST_SCENARIOS]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.ends_with("5 object(s) compared, 0 decided differently by the candidate\n"),
        "{stdout}"
    );

    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not a component").unwrap();
    let garbage = garbage.to_str().unwrap();
    let (code, stdout, stderr) = run(&[
        "policy",
        "diff",
        "builtin:default",
        garbage,
        ALLOWLIST_SCENARIOS,
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("garbage.wasm: refused (compile)"),
        "{stderr}"
    );
}
