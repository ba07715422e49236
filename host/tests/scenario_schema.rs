//! Scenario files are as strict as the API server: every object a shipped scenario declares
//! passes the schema check (the CRDs' and core/v1's, `scenario::schema`), and `policy test`
//! refuses a Sandbox with `spec: {cpu: 500m}` (the field is `spec.resources.cpu`), naming the
//! file, the object and the field.
//!
//! Run: `cargo test -p cubepod-host --test scenario_schema`

use std::path::{Path, PathBuf};
use std::process::Command;

use cubepod_host::scenario::format;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

/// Every folder of scenario files the project ships.
const SHIPPED: [&str; 4] = [
    "tests/scenarios",
    "examples/policies/guarded/scenarios",
    "examples/policies/image-allowlist/scenarios",
    "tests/policies/hostile/scenarios",
];

fn files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_shipped_scenario_declares_only_objects_the_api_server_accepts() {
    let mut objects = 0;
    let mut errors = Vec::new();
    for dir in SHIPPED {
        let found = files(dir);
        assert!(!found.is_empty(), "{dir} holds no scenario");
        for file in found {
            match format::read_file(&file) {
                Ok(scenarios) => {
                    objects += scenarios.iter().map(|s| s.objects.len()).sum::<usize>()
                }
                Err(error) => errors.push(error.to_string()),
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // Not vacuous: the folders declare objects of every kind.
    assert!(objects > 50, "{objects} objects");
}

#[test]
fn policy_test_refuses_a_field_the_schema_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu.yaml");
    std::fs::write(
        &file,
        "now: \"2026-01-01T00:00:00Z\"\nobjects:\n  - apiVersion: cubepod.io/v1alpha1\n    kind: Sandbox\n    metadata: {name: a}\n    spec: {image: ghcr.io/cubepod/sandbox-base:1.0, cpu: 500m}\nreconcile: a\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_cubepod-controller"))
        .args(["policy", "test", "builtin:default"])
        .arg(&file)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("spec.cpu"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("cpu.yaml: objects[0]: Sandbox/a: "), "{line}");
    assert!(line.contains("unknown field \"spec.cpu\""), "{line}");
    assert!(line.contains("line 3"), "{line}");
}
