//! No ANSI colour where no terminal reads: the real binary's logs (`run`, text format) and
//! `policy test`'s stderr, written to files. (The terminal and `NO_COLOR` cases are the unit
//! tests of `cubepod_host::colour`: a test has no terminal to give the binary.)

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cubepod_tests::{binary, free_port, workspace};

const ESC: char = '\u{1b}';

#[test]
fn run_logs_to_a_file_carry_no_escape_codes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stdout.log");
    let mut child = Command::new(binary())
        .args([
            "run",
            "--embedded",
            "--log-format=text",
            "--pod-start-delay=100ms",
        ])
        .arg(format!("--listen=127.0.0.1:{}", free_port()))
        .arg(format!(
            "--cache-dir={}",
            dir.path().join("cache").display()
        ))
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start cubepod-controller");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut text = String::new();
    while Instant::now() < deadline {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("serving /healthz") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(text.contains(" INFO "), "the text log was written: {text}");
    assert!(!text.contains(ESC), "escape codes in a log file:\n{text}");
}

#[test]
fn policy_test_stderr_in_a_file_carries_no_escape_codes() {
    let output = Command::new(binary())
        .current_dir(workspace())
        .args([
            "policy",
            "test",
            "builtin:default",
            "tests/scenarios/pause.yaml",
        ])
        // Info, so that the reconcile core's log lines reach stderr.
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .expect("run policy test");
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stderr.contains("INFO"), "log lines on stderr: {stderr}");
    assert!(!stderr.contains(ESC), "escape codes on stderr:\n{stderr}");
    assert!(!stdout.contains(ESC), "escape codes on stdout:\n{stdout}");
}
