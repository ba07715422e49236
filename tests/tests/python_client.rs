//! A second real client as a test peer: the official Kubernetes Python client (`kubernetes`
//! 37.0.3, installed into `target/python-client` by `.ci/python-client`, which `.ci/run` runs)
//! against the real binary's embedded cluster. `tests/python/client_peer.py` lists, reads,
//! watches, creates, patches and deletes every kind the demo serves through the typed APIs,
//! whose models refuse what the API server would never send. Without the venv the test fails,
//! naming the command that installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use cubepod_tests::kubectl::Embedded;

const NS: &str = "cubepod-workloads";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The venv's python, with the pinned client importable; panics naming the fix otherwise.
fn python() -> PathBuf {
    let python = repository().join("target/python-client/bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        installed,
        "the official Kubernetes Python client is not installed in {}: run `.ci/python-client` \
         (.ci/run does)",
        python.display()
    );
    python
}

#[test]
fn the_official_python_client_reads_and_writes_every_kind_typed() {
    let python = python();
    let cluster = Embedded::start(&[]);
    // The seeded sandboxes' pods run before the client reads them.
    cluster.until(&["get", "pods", "-n", NS], |out| out.contains("Running"));
    let script = repository().join("tests/python/client_peer.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(cluster.kubeconfig())
        .arg(NS)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed:\n{stdout}\n{stderr}"
    );
    for line in [
        "ConfigMap: created, patched, read, replaced, listed, deleted",
        "Event (events.k8s.io/v1): created, read as core/v1, patched, listed, watched, deleted",
        "Pod: created, ran, read, patched, replaced, deleted",
        "python client: every kind read and written, typed",
    ] {
        assert!(stdout.contains(line), "{line:?} in:\n{stdout}\n{stderr}");
    }
}
