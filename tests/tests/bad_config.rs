//! Bad configuration at start: the controller exits with a non-zero status and a message that
//! names the file (or flag) and what is wrong with it, and it never panics. A policy module
//! that admission refuses is not among them: the process waits for a good one
//! (`refused_at_start.rs`).

use std::path::Path;
use std::time::Duration;

use cubepod_tests::Controller;

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

/// `run --embedded` with one of its addresses already taken: it exits naming the address, the
/// flag that moves it and what to do, before it prints the `export KUBECONFIG` line that would
/// say the demo runs.
#[test]
fn a_busy_port_names_its_flag_before_anything_says_the_demo_runs() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let busy = taken.local_addr().expect("its address").to_string();
    for (flag, other) in [
        ("--listen", "--embedded-api-listen=127.0.0.1:0"),
        ("--embedded-api-listen", "--listen=127.0.0.1:0"),
    ] {
        let home = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(cubepod_tests::binary())
            .args(["run", "--embedded", &format!("{flag}={busy}"), other])
            .env("HOME", home.path())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("the binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {stdout}{stderr}");
        let said = stderr
            .lines()
            .find(|l| l.starts_with("cubepod-controller: "))
            .unwrap_or_default();
        assert!(said.contains(&busy), "{flag}: {stderr}");
        assert!(said.contains(&format!("({flag})")), "{flag}: {stderr}");
        assert!(
            said.contains(&format!("stop it, or give {flag} another address")),
            "{flag}: {stderr}"
        );
        assert!(!stdout.contains("export KUBECONFIG"), "{flag}: {stdout}");
    }
}
