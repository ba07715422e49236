//! `cubepod-controller policy test`, `policy inspect` and `policy export`, run as the built
//! binary: the default policy passes `tests/scenarios/` (the lifecycle table), a wrong scenario
//! fails with a readable diff and a non-zero exit, the JUnit report is well-formed XML, inspect
//! names what a module is, the contract it targets, or why it does not fit one the host
//! supports, and export writes the built-in module's bytes. The frozen module of contract 0.1.0
//! (`tests/fixtures/contract-0.1.0/`) passes its own scenarios and the conformance cases on this
//! host, and inspect says it targets 0.1.0.
//!
//! Run: `cargo test -p cubepod-host --test policy_cli`

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cubepod_policy_host::runtime::{CONTRACT_VERSION, DEFAULT_POLICY};
use sha2::{Digest, Sha256};

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
mod wasm_build {
    include!("../policy/wasm_build.rs");
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

/// The default policy as built against contract 0.1.0, before 0.2.0 (never rebuilt).
const FIXTURE_0_1: &str = "tests/fixtures/contract-0.1.0/cubepod-default-0.1.0.wasm";
const FIXTURE_0_1_SCENARIOS: &str = "tests/fixtures/contract-0.1.0/scenarios";

/// The host's conversion of a 0.1 module's calls, as `policy test`'s header names it.
fn converted_header() -> String {
    format!("(contract 0.1.0, its calls converted to and from {CONTRACT_VERSION}, sha256 ")
}

fn wrong_scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scenarios-wrong")
}

/// Runs the binary from the workspace root (so that `tests/scenarios` resolves as in CI).
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
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    (
        status.code().expect("exited, not killed"),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

/// The conformance cases `policy test` runs before the scenarios.
fn conformance_cases() -> usize {
    cubepod_host::scenario::conformance::cases().len()
}

/// The closing `N passed, M failed` line, alone on its line.
fn summary(stdout: &str) -> (usize, usize) {
    let last = stdout.lines().last().expect("some output");
    let (passed, failed) = last
        .strip_suffix(" failed")
        .and_then(|s| s.split_once(" passed, "))
        .unwrap_or_else(|| panic!("no summary line at the end: {stdout}"));
    (passed.parse().unwrap(), failed.parse().unwrap())
}

#[test]
fn the_default_policy_passes_the_lifecycle_scenarios() {
    let (code, stdout, stderr) = run(&["policy", "test", "builtin:default", "tests/scenarios"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let files = std::fs::read_dir(workspace().join("tests/scenarios"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    let (passed, failed) = summary(&stdout);
    assert_eq!(failed, 0, "{stdout}");
    assert!(
        passed >= files && files >= 14,
        "{passed} passed of {files} files"
    );
    assert_eq!(stdout.matches("\nPASS ").count(), passed, "{stdout}");
    // The report alone: no log line of the controller's beside it.
    assert_eq!(stderr, "", "{stdout}");
    assert!(
        stdout.contains("PASS reset to generation 2 replaces the rootfs and keeps the workspace (tests/scenarios/reset.yaml)"),
        "{stdout}"
    );
}

#[test]
fn a_module_file_works_like_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("policy.wasm");
    std::fs::write(&module, DEFAULT_POLICY).unwrap();
    let (code, stdout, stderr) = run(&[
        "policy",
        "test",
        module.to_str().unwrap(),
        "tests/scenarios/pause.yaml",
        "tests/scenarios/warm-pool-claim.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(summary(&stdout), (conformance_cases() + 2, 0), "{stdout}");
}

#[test]
fn export_writes_the_builtin_module_as_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("default.wasm");
    let (code, stdout, stderr) = run(&[
        "policy",
        "export",
        "builtin:default",
        "-o",
        module.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(std::fs::read(&module).unwrap(), DEFAULT_POLICY);
    let digest = hex::encode(Sha256::digest(DEFAULT_POLICY));
    assert!(stdout.contains(&digest), "{stdout}");

    // Into a directory that does not exist: nothing written, and the path named.
    let nowhere = dir.path().join("missing").join("default.wasm");
    let (code, _, stderr) = run(&[
        "policy",
        "export",
        "builtin:default",
        "-o",
        nowhere.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains(nowhere.to_str().unwrap()), "{stderr}");
}

#[test]
fn a_wrong_scenario_fails_with_a_readable_diff() {
    let wrong = wrong_scenarios();
    let (code, stdout, _) = run(&[
        "policy",
        "test",
        "builtin:default",
        "tests/scenarios/pause.yaml",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(summary(&stdout), (conformance_cases() + 1, 1), "{stdout}");
    for expected in [
        "FAIL a wrong expectation of pause (",
        "    calls (- expected, + actual):\n        delete-pod a\n      - delete-pvc a-workspace\n",
        "    status.phase: expected \"Running\", got \"Paused\"\n",
        "    status.conditions[type=Paused].status: expected false, got \"True\" (YAML reads an unquoted False as a boolean: write \"False\")\n",
        "    PersistentVolumeClaim/a-workspace: expected absent, exists\n",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

#[test]
fn the_junit_report_is_well_formed_with_a_failure_element() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("out.xml");
    let wrong = wrong_scenarios();
    let (code, stdout, _) = run(&[
        "policy",
        "test",
        "builtin:default",
        "--junit",
        report.to_str().unwrap(),
        "tests/scenarios/pause.yaml",
        "tests/scenarios/fork.yaml",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    let xml = std::fs::read_to_string(&report).unwrap();
    check_well_formed(&xml);
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    // The conformance cases first, one suite each, then the three scenario files.
    let cases = conformance_cases() + 3;
    assert!(
        xml.contains(&format!(
            "<testsuites name=\"cubepod-controller policy test\" tests=\"{cases}\" failures=\"1\""
        )),
        "{xml}"
    );
    assert_eq!(xml.matches("<testsuite ").count(), cases, "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), cases, "{xml}");
    assert!(
        xml.contains("<testcase name=\"new running sandbox\" classname=\"new-sandbox\" file=\"builtin:conformance/new-sandbox.yaml\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
    assert!(
        xml.contains("testcase name=\"a wrong expectation of pause\""),
        "{xml}"
    );
    assert!(
        xml.contains("status.phase: expected &quot;Running&quot;, got &quot;Paused&quot;"),
        "{xml}"
    );
}

#[test]
fn a_scenario_with_a_typo_names_file_field_and_line_and_the_rest_still_runs() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        "now: \"2026-01-01T00:00:00Z\"\nreconcile: a\nexpect:\n  cals: []\n",
    )
    .unwrap();
    let (code, stdout, _) = run(&[
        "policy",
        "test",
        "builtin:default",
        typo.to_str().unwrap(),
        "tests/scenarios/resume.yaml",
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(summary(&stdout), (conformance_cases() + 1, 1), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("unknown field `cals`"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("typo.yaml: expect: unknown field `cals`"),
        "{line}"
    );
    assert!(line.contains("line 4"), "{line}");
}

#[test]
fn without_scenarios_it_runs_the_conformance_cases() {
    let (code, stdout, stderr) = run(&["policy", "test", "builtin:default"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("PASS new running sandbox (builtin:conformance/new-sandbox.yaml)"));
    let (passed, failed) = summary(&stdout);
    assert_eq!((failed, passed >= 5), (0, true), "{stdout}");
}

/// The faulty test policy built to leave every new sandbox alone, with no child and no reason:
/// the controller refuses it at start and in a swap (`tests/tests/bad_config.rs`, `hot_swap.rs`).
fn nonconforming_wasm() -> PathBuf {
    wasm_build::build_policy_variant(
        workspace(),
        "cubepod-faulty-policy",
        "cubepod_faulty_policy",
        Some("nonconforming"),
    )
    .unwrap_or_else(|why| panic!("{why}"))
}

#[test]
fn a_module_the_controller_refuses_fails_policy_test_unless_no_conformance() {
    let wasm = nonconforming_wasm();
    let wasm = wasm.to_str().expect("a UTF-8 path");
    // A scenario it passes: its pools are the default's.
    let scenario = "tests/scenarios/warm-pool-fill.yaml";
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.xml");
    let (code, stdout, _) = run(&[
        "policy",
        "test",
        wasm,
        scenario,
        "--junit",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    for expected in [
        "FAIL new running sandbox (builtin:conformance/new-sandbox.yaml)\n    conformance 'new \
         running sandbox' on Sandbox conformance-new (image registry.example/conformance:1): a \
         new Running sandbox gets children, or SpecValid=False saying why not: the first \
         reconcile created nothing (no call); the policy answered phase Pending, no condition\n",
        "admission: refused (self_test): `run` with these flags would not run this module\n",
        // The scenarios still run, and say how the module does on them.
        &format!("PASS warm pool fills, and does not over-create while members start ({scenario})"),
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert_eq!(summary(&stdout), (conformance_cases(), 1), "{stdout}");
    let xml = std::fs::read_to_string(&report).unwrap();
    check_well_formed(&xml);
    let case = xml
        .split("<testcase ")
        .find(|c| c.starts_with("name=\"new running sandbox\""))
        .unwrap_or_else(|| panic!("no conformance case in {xml}"));
    assert!(
        case.contains("<failure message=\"conformance &apos;new running sandbox&apos; on Sandbox conformance-new (image registry.example/conformance:1)"),
        "{case}"
    );

    // The scenarios alone: it passes them.
    let (code, stdout, stderr) = run(&["policy", "test", wasm, scenario, "--no-conformance"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(summary(&stdout), (1, 0), "{stdout}");
    assert!(!stdout.contains("conformance"), "{stdout}");
    // With nothing left to run, it says so rather than pass.
    let (code, _, stderr) = run(&["policy", "test", wasm, "--no-conformance"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("nothing to run"), "{stderr}");
}

#[test]
fn the_0_1_module_passes_its_own_scenarios_on_this_host() {
    let (code, stdout, stderr) = run(&["policy", "test", FIXTURE_0_1, FIXTURE_0_1_SCENARIOS]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("policy cubepod-default 0.1.0 ") && stdout.contains(&converted_header()),
        "{stdout}"
    );
    let files = std::fs::read_dir(workspace().join(FIXTURE_0_1_SCENARIOS))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    let (passed, failed) = summary(&stdout);
    assert_eq!(failed, 0, "{stdout}");
    assert!(
        passed >= files && files >= 15,
        "{passed} passed of {files} files"
    );
    // The rows that go through each export: reconcile, cleanup, reap, pool (and a claim).
    for row in [
        "new running sandbox gets two block PVCs, a Secret and a kata Pod (tests/fixtures/contract-0.1.0/scenarios/new-running.yaml)",
        "delete removes every child, then the finalizer",
        "idle reap pauses, activity resumes",
        "warm pool fills, and does not over-create while members start",
        "a claim adopts a ready member and the pool refills",
    ] {
        assert!(stdout.contains(&format!("PASS {row}")), "{row}: {stdout}");
    }
}

#[test]
fn the_0_1_module_passes_the_conformance_cases() {
    let (code, stdout, stderr) = run(&["policy", "test", FIXTURE_0_1]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains(&converted_header()), "{stdout}");
    assert!(
        stdout.contains(
            "PASS describe names the contract the module targets (builtin:conformance/describe)"
        ),
        "{stdout}"
    );
    assert_eq!(summary(&stdout), (5, 0), "{stdout}");
    // The current contract's own modules get no such header.
    let (_, stdout, _) = run(&["policy", "test", "builtin:default"]);
    assert!(!stdout.contains("converted"), "{stdout}");
}

#[test]
fn a_missing_scenario_path_or_module_is_a_usage_error() {
    let (code, _, stderr) = run(&["policy", "test", "builtin:default", "tests/no-such-dir"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("tests/no-such-dir"), "{stderr}");
    let (code, _, stderr) = run(&["policy", "test", "/no/such/policy.wasm", "tests/scenarios"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("/no/such/policy.wasm"), "{stderr}");
}

#[test]
fn inspect_names_the_default_policy() {
    let (code, stdout, stderr) = run(&["policy", "inspect", "builtin:default"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let digest = hex::encode(Sha256::digest(DEFAULT_POLICY));
    for expected in [
        "name:      cubepod-default\n".to_string(),
        "version:   0.1.0\n".to_string(),
        format!("contract:  {CONTRACT_VERSION} (the host supports 0.1.0 and {CONTRACT_VERSION})\n"),
        format!("digest:    sha256:{digest}\n"),
        format!("size:      {} bytes\n", DEFAULT_POLICY.len()),
        format!("imports:\n  cubepod:controller/types@{CONTRACT_VERSION}\n"),
        format!("  cubepod:controller/kube-client@{CONTRACT_VERSION}\n"),
        format!("exports:\n  cubepod:controller/policy@{CONTRACT_VERSION}\n"),
        format!("fits the contract cubepod:controller@{CONTRACT_VERSION}: yes"),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }

    let (code, stdout, _) = run(&["policy", "inspect", "--json", "builtin:default"]);
    assert_eq!(code, 0, "{stdout}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["name"], "cubepod-default");
    assert_eq!(json["contractVersion"], CONTRACT_VERSION);
    assert_eq!(
        json["contract"],
        format!("cubepod:controller@{CONTRACT_VERSION}")
    );
    assert_eq!(
        json["hostContracts"],
        serde_json::json!([
            "cubepod:controller@0.1.0",
            format!("cubepod:controller@{CONTRACT_VERSION}")
        ])
    );
    assert_eq!(json["digest"], digest.as_str());
    assert_eq!(json["fits"], true);
}

#[test]
fn inspect_says_the_0_1_module_targets_0_1() {
    let (code, stdout, stderr) = run(&["policy", "inspect", FIXTURE_0_1]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for expected in [
        "name:      cubepod-default\n".to_string(),
        format!("contract:  0.1.0 (the host supports 0.1.0 and {CONTRACT_VERSION})\n"),
        "imports:\n  cubepod:controller/types@0.1.0\n  cubepod:controller/kube-client@0.1.0\n"
            .to_string(),
        "exports:\n  cubepod:controller/policy@0.1.0\n".to_string(),
        "fits the contract cubepod:controller@0.1.0: yes (conformance: 5 cases passed)\n"
            .to_string(),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let (code, stdout, _) = run(&["policy", "inspect", "--json", FIXTURE_0_1]);
    assert_eq!(code, 0, "{stdout}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["contractVersion"], "0.1.0");
    assert_eq!(json["contract"], "cubepod:controller@0.1.0");
    assert_eq!(json["fits"], true);
}

#[test]
fn inspect_says_why_garbage_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    let script = b"#!/bin/sh\necho not a policy\n";
    std::fs::write(&garbage, script).unwrap();
    let (code, stdout, _) = run(&["policy", "inspect", garbage.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "contract:  unknown (the host supports 0.1.0 and {CONTRACT_VERSION})\n"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "does not fit a contract the host supports (0.1.0 and {CONTRACT_VERSION}): it is not WebAssembly at all"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("size:      {} bytes", script.len())),
        "{stdout}"
    );

    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let (code, stdout, _) = run(&["policy", "inspect", core.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("it is a core WebAssembly module, not a component"),
        "{stdout}"
    );
}

/// A component of another world: it imports `kube-client` of contract `version` and exports
/// nothing. Encoded by hand (component binary format: a type section with one empty instance
/// type, an import section importing it under the interface's name).
fn other_world_component(version: &str) -> Vec<u8> {
    let name = format!("cubepod:controller/kube-client@{version}");
    let name = name.as_bytes();
    let mut import = vec![0x01, 0x00, name.len() as u8];
    import.extend_from_slice(name);
    import.extend_from_slice(&[0x05, 0x00]);
    let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
    bytes.extend_from_slice(&[0x07, 0x03, 0x01, 0x42, 0x00]);
    bytes.extend_from_slice(&[0x0a, import.len() as u8]);
    bytes.extend_from_slice(&import);
    bytes
}

/// The default policy with every `cubepod:controller/...@<current>` name changed to 0.3.0: a
/// whole module of a contract this host does not know.
fn contract_0_3_module() -> Vec<u8> {
    let from = format!("@{CONTRACT_VERSION}");
    let to = "@0.3.0";
    assert_eq!(from.len(), to.len(), "a patch in place keeps the lengths");
    let mut bytes = DEFAULT_POLICY.to_vec();
    let package = b"cubepod:controller/";
    let mut i = 0;
    let mut changed = 0;
    while let Some(at) = bytes[i..].windows(package.len()).position(|w| w == package) {
        let start = i + at + package.len();
        if let Some(v) = bytes[start..]
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            && v < 24
        {
            bytes[start + v..start + v + to.len()].copy_from_slice(to.as_bytes());
            changed += 1;
        }
        i = start;
    }
    assert!(changed > 0, "no versioned name found to change");
    bytes
}

#[test]
fn inspect_says_why_a_component_of_another_world_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.wasm");
    std::fs::write(&other, other_world_component(CONTRACT_VERSION)).unwrap();
    let (code, stdout, _) = run(&["policy", "inspect", other.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    for expected in [
        format!("imports:\n  cubepod:controller/kube-client@{CONTRACT_VERSION}\n"),
        "exports:   none\n".to_string(),
        format!("does not fit the contract cubepod:controller@{CONTRACT_VERSION}: "),
        format!("missing import cubepod:controller/types@{CONTRACT_VERSION}"),
        format!("missing export cubepod:controller/policy@{CONTRACT_VERSION}"),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

#[test]
fn a_module_of_an_unsupported_contract_is_refused_naming_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("policy-0.3.wasm");
    std::fs::write(&module, contract_0_3_module()).unwrap();
    let (code, stdout, _) = run(&["policy", "inspect", module.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    for expected in [
        format!("contract:  0.3.0 (the host supports 0.1.0 and {CONTRACT_VERSION})\n"),
        "exports:\n  cubepod:controller/policy@0.3.0\n".to_string(),
        format!(
            "does not fit a contract the host supports (0.1.0 and {CONTRACT_VERSION}): the \
             component was built against contract 0.3.0; the host runs modules of contract 0.1.0 \
             and {CONTRACT_VERSION} only\n"
        ),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // `policy test` fails it as the controller refuses it, with the same words, and the
    // report says so.
    let report = dir.path().join("report.xml");
    let (code, stdout, _) = run(&[
        "policy",
        "test",
        module.to_str().unwrap(),
        "tests/scenarios/pause.yaml",
        "--junit",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    let refusal = format!(
        "refused (contract): policy breaks the contract cubepod:controller@0.3.0: the component \
         was built against contract 0.3.0; the host runs modules of contract 0.1.0 and \
         {CONTRACT_VERSION} only"
    );
    assert!(
        stdout.contains(&format!(
            "FAIL the module loads as the controller loads it (compile, contract, describe) \
             (builtin:admission/load)\n    {refusal}"
        )),
        "{stdout}"
    );
    assert_eq!(summary(&stdout), (0, 1), "{stdout}");
    let xml = std::fs::read_to_string(&report).unwrap();
    check_well_formed(&xml);
    assert!(xml.contains("tests=\"1\" failures=\"1\""), "{xml}");

    // A component whose only name of the package is a 0.3.0 import is refused the same way.
    let other = dir.path().join("other-0.3.wasm");
    std::fs::write(&other, other_world_component("0.3.0")).unwrap();
    let (code, stdout, _) = run(&["policy", "inspect", other.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("built against contract 0.3.0; the host runs modules of contract 0.1.0"),
        "{stdout}"
    );
}

/// Enough of XML 1.0 to catch what a hand-written writer gets wrong: elements nest and close,
/// attribute values are quoted without a raw `<` or `&`, text has no raw `<`, and every `&`
/// starts a known entity.
fn check_well_formed(xml: &str) {
    let body = xml
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
        .expect("an XML declaration");
    let mut open: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find('<') {
        check_text(&rest[..start]);
        let end = rest[start..].find('>').expect("a tag ends") + start;
        let tag = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop().as_deref(), Some(name), "misnested </{name}>");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, mut attrs) = tag.split_once(' ').unwrap_or((tag, ""));
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "bad element name {name:?}"
        );
        while !attrs.trim().is_empty() {
            let (key, value) = attrs.trim_start().split_once("=\"").expect("key=\"value\"");
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric()),
                "bad key {key:?}"
            );
            let close = value.find('"').expect("a closing quote");
            check_text(&value[..close]);
            attrs = &value[close + 1..];
        }
        if !self_closing {
            open.push(name.to_string());
        }
    }
    check_text(rest);
    assert!(open.is_empty(), "unclosed: {open:?}");
}

fn check_text(text: &str) {
    assert!(!text.contains('<'), "raw < in {text:?}");
    for (index, _) in text.match_indices('&') {
        let entity = &text[index..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| entity.starts_with(e)),
            "bare & in {text:?}"
        );
    }
}
