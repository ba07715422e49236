//! What the host's rollout tests share: their runtime, the policy components they build, a
//! module rolled out as a `PolicyRollout` and the wait for its status.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use cubepod_kube::{Cluster, Resource};

pub(crate) mod js;

// Its items are `pub` for every includer; each uses only some of them.
#[allow(unreachable_pub)]
pub(crate) mod wasm_build {
    include!("../../policy/wasm_build.rs");
}

/// The workspace's root.
pub(crate) fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
}

/// The component of the workspace's policy crate `package` (its library `lib`), built: its
/// file.
pub(crate) fn built(package: &str, lib: &str) -> PathBuf {
    wasm_build::build_policy_component(workspace(), package, lib)
        .unwrap_or_else(|why| panic!("{why}"))
}

/// [`built`]'s component, read.
pub(crate) fn component(package: &str, lib: &str) -> Vec<u8> {
    let file = built(package, lib);
    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The name of the rollout [`roll_out`] makes, and of its module's ConfigMap.
pub(crate) const ROLLOUT: &str = "next";

/// A runtime of two workers, for the control loop beside the test's own tasks.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Rolls `module` out in `namespace` (the controller's): its ConfigMap, then a `PolicyRollout`
/// of it by `strategy`.
pub(crate) async fn roll_out(
    cluster: &dyn Cluster,
    namespace: &str,
    module: &[u8],
    strategy: Value,
) {
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ROLLOUT, "namespace": namespace},
        "binaryData": {
            "policy.wasm": base64::engine::general_purpose::STANDARD.encode(module)
        },
    });
    cluster
        .create(Resource::ConfigMap, namespace, map)
        .await
        .expect("the module's ConfigMap");
    let rollout = json!({
        "apiVersion": "cubepod.io/v1alpha1", "kind": "PolicyRollout",
        "metadata": {"name": ROLLOUT, "namespace": namespace},
        "spec": {"module": {"configMap": ROLLOUT}, "strategy": strategy},
    });
    cluster
        .create(Resource::PolicyRollout, namespace, rollout)
        .await
        .expect("the rollout");
}

/// Waits (real time, a minute at most) until the status of [`roll_out`]'s rollout satisfies
/// `done`; returns it. `what` names the wait in the failure.
pub(crate) async fn until(
    cluster: &dyn Cluster,
    namespace: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    until_named(cluster, namespace, ROLLOUT, what, done).await
}

/// [`until`] for the rollout `name`.
pub(crate) async fn until_named(
    cluster: &dyn Cluster,
    namespace: &str,
    name: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    until_within(
        cluster,
        namespace,
        name,
        what,
        Duration::from_secs(60),
        done,
    )
    .await
}

/// [`until_named`], waiting `within` at most: an admission (a module compiled and
/// self-tested) on a loaded machine may take longer than a minute.
pub(crate) async fn until_within(
    cluster: &dyn Cluster,
    namespace: &str,
    name: &str,
    what: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let status = cluster
            .get(Resource::PolicyRollout, namespace, name)
            .await
            .map(|o| o["status"].clone())
            .unwrap_or_default();
        if done(&status) {
            return status;
        }
        assert!(started.elapsed() < within, "{what}: {status:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
