//! `policy diff` against a live cluster: the embedded one, read through the kubeconfig it
//! writes, as `run` would find a cluster. Only lists reach it: the objects are compared on
//! scratch clusters.

use std::process::Command;

use cubepod_tests::kubectl::Embedded;
use cubepod_tests::{binary, faulty_policy};

/// `policy diff` with `KUBECONFIG=kubeconfig`: (exit code, stdout, stderr).
fn diff(kubeconfig: &std::path::Path, stable: &str, candidate: &str) -> (i32, String, String) {
    let out = Command::new(binary())
        .args(["policy", "diff", stable, candidate])
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("CUBEPOD_NAMESPACES")
        .output()
        .expect("the binary runs");
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn policy_diff_reads_a_live_cluster_and_names_the_sandbox_the_candidate_treats_otherwise() {
    let cluster = Embedded::start(&[]);
    let manifest = cluster.write(
        "escape.yaml",
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: escape-x, namespace: cubepod-workloads}\n\
         spec: {image: ghcr.io/cubepod/sandbox-base:1.0}\n",
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    cluster.until(
        &[
            "get",
            "sandbox",
            "escape-x",
            "-n",
            "cubepod-workloads",
            "-o",
            "jsonpath={.status.phase}",
        ],
        |phase| phase == "Running",
    );
    let kubeconfig = cluster.kubeconfig().to_path_buf();

    let faulty = faulty_policy().to_str().unwrap();
    let (code, stdout, stderr) = diff(&kubeconfig, "builtin:default", faulty);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("\nDIFF Sandbox cubepod-workloads/escape-x\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nSAME Sandbox cubepod-workloads/dev-alice\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kube-system"),
        "the escape is shown: {stdout}"
    );
    assert!(
        stdout.contains(" decided differently by the candidate\n"),
        "{stdout}"
    );

    let (code, stdout, stderr) = diff(&kubeconfig, "builtin:default", "builtin:default");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.ends_with(" compared, 0 decided differently by the candidate\n"),
        "{stdout}"
    );
}
