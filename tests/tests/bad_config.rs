//! Bad configuration at start: the controller exits with a non-zero status and a message that
//! names the file (or flag) and what is wrong with it, and it never panics. A policy module
//! gets the checks a hot swap gives it (signature, contract, self-test): one that fails them
//! stops the start.

use std::path::Path;
use std::time::Duration;

use cubepod_policy_host::runtime::DEFAULT_POLICY;
use cubepod_tests::{Controller, faulty_policy_variant, p256_key_pair};

const PATIENCE: Duration = Duration::from_secs(60);

/// Starts the real binary with `kubeconfig` and `flags`, and returns its stderr once it exited
/// by itself with a failure.
fn refused(kubeconfig: &Path, flags: &[&str]) -> String {
    let mut controller = Controller::start_with_kubeconfig(kubeconfig, flags);
    let status = controller
        .wait_exit(PATIENCE)
        .expect("exits at start instead of running");
    let stderr = controller.stderr();
    assert!(!status.success(), "exit status {status}; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "a panic: {stderr}");
    stderr
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

#[test]
fn a_missing_kubeconfig_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let stderr = refused(&missing, &[]);
    assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");
}

#[test]
fn a_kubeconfig_that_is_not_yaml_is_named_with_where() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "broken",
        "clusters: [\n  - name: a\n    cluster: {\n",
    );
    let stderr = refused(&path, &[]);
    assert!(stderr.contains("broken"), "{stderr}");
    assert!(stderr.contains("not a valid kubeconfig"), "{stderr}");
}

#[test]
fn a_kubeconfig_whose_context_names_no_cluster_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "dangling",
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n\
         contexts:\n- name: ctx\n  context: {cluster: gone, user: u}\n\
         users:\n- name: u\n  user: {token: t}\nclusters: []\n",
    );
    let stderr = refused(&path, &[]);
    assert!(stderr.contains("dangling"), "{stderr}");
    assert!(
        stderr.contains("gone"),
        "the missing cluster is named: {stderr}"
    );
}

#[test]
fn a_kubeconfig_with_a_server_that_is_not_a_url_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "badserver",
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n\
         contexts:\n- name: ctx\n  context: {cluster: c, user: u}\n\
         users:\n- name: u\n  user: {token: t}\n\
         clusters:\n- name: c\n  cluster: {server: 'not a url'}\n",
    );
    let stderr = refused(&path, &[]);
    assert!(stderr.contains("not a url"), "{stderr}");
}

#[test]
fn a_bad_flag_value_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("kubeconfig");
    let stderr = refused(&unused, &["--concurrency=0"]);
    assert!(stderr.contains("--concurrency"), "{stderr}");
    let stderr = refused(&unused, &["--reap-interval=soon"]);
    assert!(stderr.contains("--reap-interval"), "{stderr}");
    let stderr = refused(&unused, &["--no-such-flag"]);
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
}

#[test]
fn a_policy_path_that_does_not_exist_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("kubeconfig");
    let policy = dir.path().join("missing-policy.wasm");
    let flag = format!("--policy={}", policy.display());
    let stderr = refused(&unused, &["--embedded", &flag]);
    assert!(stderr.contains("missing-policy.wasm"), "{stderr}");
}

#[test]
fn a_policy_file_that_is_not_a_component_is_refused_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("kubeconfig");
    let policy = write(dir.path(), "garbage.wasm", "this is not wasm");
    let flag = format!("--policy={}", policy.display());
    let stderr = refused(&unused, &["--embedded", &flag]);
    assert!(stderr.contains("garbage.wasm"), "{stderr}");
}

#[test]
fn a_policy_that_fails_its_self_test_stops_the_start_naming_it_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("kubeconfig");
    let policy = dir.path().join("nonconforming.wasm");
    std::fs::copy(faulty_policy_variant("nonconforming"), &policy).unwrap();
    let flag = format!("--policy={}", policy.display());
    let stderr = refused(&unused, &["--embedded", &flag]);
    assert!(stderr.contains("nonconforming.wasm"), "{stderr}");
    assert!(stderr.contains("refused (self_test)"), "{stderr}");
    assert!(stderr.contains("conformance"), "{stderr}");
}

#[test]
fn with_a_verify_key_an_unsigned_policy_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("kubeconfig");
    let (_, public) = p256_key_pair(dir.path(), "release");
    let policy = dir.path().join("unsigned.wasm");
    std::fs::write(&policy, DEFAULT_POLICY).unwrap();
    let stderr = refused(
        &unused,
        &[
            "--embedded",
            &format!("--policy={}", policy.display()),
            &format!("--policy-verify-key={}", public.display()),
        ],
    );
    assert!(stderr.contains("unsigned.wasm"), "{stderr}");
    assert!(stderr.contains("refused (signature_missing)"), "{stderr}");
    assert!(stderr.contains("unsigned.wasm.sig"), "{stderr}");
}

#[test]
fn a_verify_key_that_is_not_a_public_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("kubeconfig");
    let not_a_key = write(dir.path(), "release.pub", "hello");
    let stderr = refused(
        &unused,
        &[
            "--embedded",
            &format!("--policy-verify-key={}", not_a_key.display()),
        ],
    );
    assert!(stderr.contains("release.pub"), "{stderr}");
    assert!(stderr.contains("not a PEM public key"), "{stderr}");
}
