//! A module of contract 0.1.0 in the real binary on its embedded cluster: the frozen default
//! policy (`tests/fixtures/contract-0.1.0/`) started with `--policy` converges a new Sandbox to
//! Running, and a live controller swaps from the current default policy to it and back, each
//! module reconciling new sandboxes in turn. The cluster is read through the embedded API, with
//! the controller's own REST client and the kubeconfig `run` wrote.
//!
//! Run: `cargo build -p cubepod-host && cargo test -p cubepod-tests --test contract_0_1`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cubepod_kube::rest::{ConnectionConfig, RestCluster, RestOptions};
use cubepod_kube::{Cluster, Resource};
use cubepod_policy_host::runtime::CONTRACT_VERSION;
use cubepod_policy_host::runtime::default_policy::DEFAULT_POLICY;
use cubepod_tests::convergence::{NS, block, sandbox_manifest, until};
use cubepod_tests::{Controller, metric, replace_file, seed_file, workspace};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(90);

fn fixture() -> Vec<u8> {
    std::fs::read(workspace().join("tests/fixtures/contract-0.1.0/cubepod-default-0.1.0.wasm"))
        .expect("the 0.1.0 fixture")
}

/// The controller's REST client on the embedded API that `kubeconfig` describes.
fn embedded_api(kubeconfig: &Path) -> Arc<RestCluster> {
    let conn = ConnectionConfig::from_kubeconfig_file(kubeconfig).expect("the kubeconfig");
    RestCluster::new(conn, RestOptions::default()).expect("a client")
}

fn get(api: &RestCluster, resource: Resource, name: &str) -> Option<Value> {
    block(api.get(resource, NS, name)).ok()
}

/// Waits until Sandbox `name` is Running with its Pod, and both PVCs and the Secret exist.
fn wait_running(api: &RestCluster, name: &str) {
    until(
        &format!("{name} Running with its children"),
        PATIENCE,
        || {
            let running = get(api, Resource::Sandbox, name).is_some_and(|s| {
                s["status"]["phase"] == "Running" && s["status"]["podIP"].is_string()
            });
            running
                && get(api, Resource::Pod, name).is_some()
                && get(
                    api,
                    Resource::PersistentVolumeClaim,
                    &format!("{name}-rootfs-g1"),
                )
                .is_some()
                && get(
                    api,
                    Resource::PersistentVolumeClaim,
                    &format!("{name}-workspace"),
                )
                .is_some()
                && get(api, Resource::Secret, &format!("{name}-credentials")).is_some()
        },
    );
}

fn swaps(body: &str, result: &str) -> f64 {
    metric(body, "cubepod_policy_swaps_total", &[("result", result)]).unwrap_or(0.0)
}

/// The reconciles that failed for any reason but a refusal of an output or a status write
/// conflict.
fn failed_reconciles(body: &str) -> f64 {
    let failed: f64 = ["api_error", "budget", "trap", "timeout", "memory", "panic"]
        .iter()
        .filter_map(|r| {
            metric(
                body,
                "cubepod_reconciles_total",
                &[("kind", "sandbox"), ("result", r)],
            )
        })
        .sum();
    // A Sandbox's status written while another write of it was under way is refused (409)
    // and written again by the next reconcile, whichever contract the module speaks: not a
    // failure of the module.
    let conflicts = metric(
        body,
        "cubepod_kube_requests_total",
        &[
            ("resource", "sandboxes"),
            ("verb", "patch_status"),
            ("result", "conflict"),
        ],
    )
    .unwrap_or(0.0);
    (failed - conflicts).max(0.0)
}

struct Started {
    controller: Controller,
    api: Arc<RestCluster>,
    policy: PathBuf,
    _dir: tempfile::TempDir,
}

/// The binary on its embedded cluster with `module` at `--policy` (and `extra` flags).
fn start(module: &[u8], extra: &[&str]) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.wasm");
    std::fs::write(&policy, module).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut flags = vec![
        format!("--policy={}", policy.display()),
        format!("--embedded-kubeconfig={}", kubeconfig.display()),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let controller = Controller::start(&flags);
    controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
    let api = embedded_api(&kubeconfig);
    Started {
        controller,
        api,
        policy,
        _dir: dir,
    }
}

#[test]
fn a_controller_started_on_the_0_1_module_runs_a_new_sandbox() {
    let seeds = tempfile::tempdir().unwrap();
    let seed = seed_file(
        seeds.path(),
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\n\
         metadata: {name: old-contract, namespace: cubepod-workloads}\n\
         spec: {image: ghcr.io/cubepod/sandbox-base:1.0}\n",
    );
    let started = start(&fixture(), &[&format!("--seed={}", seed.display())]);
    let (_, ready) = started.controller.get("/readyz").unwrap();
    assert!(
        ready.contains("policy: cubepod-default 0.1.0 (contract 0.1.0, sha256 "),
        "{ready}"
    );
    wait_running(&started.api, "old-contract");

    // Its status is 0.1's, written as the host writes any: no field of 0.2 set.
    let sandbox = get(&started.api, Resource::Sandbox, "old-contract").unwrap();
    assert_eq!(sandbox["status"]["rootfsPVC"], "old-contract-rootfs-g1");
    assert!(
        sandbox["status"]
            .get("serviceFQDN")
            .is_none_or(Value::is_null)
    );
    // Its contract has no NetworkPolicy: the host applied the one the spec renders, the
    // default policy's, before the Pod.
    let policy = get(
        &started.api,
        Resource::NetworkPolicy,
        "old-contract-network",
    )
    .expect("the host's NetworkPolicy");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["cubepod.io/sandbox"],
        "old-contract"
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(
        policy["metadata"]["annotations"]["cubepod.io/spec-hash"].is_string(),
        "{policy}"
    );
    let (_, body) = started.controller.get("/metrics").unwrap();
    assert_eq!(failed_reconciles(&body), 0.0, "{body}");

    // Deleted: the Pod goes, then the host's NetworkPolicy, then the Sandbox.
    block(started.api.delete(Resource::Sandbox, NS, "old-contract")).expect("delete");
    until("old-contract and its children gone", PATIENCE, || {
        get(&started.api, Resource::Sandbox, "old-contract").is_none()
            && get(&started.api, Resource::Pod, "old-contract").is_none()
            && get(
                &started.api,
                Resource::NetworkPolicy,
                "old-contract-network",
            )
            .is_none()
    });
}

#[test]
fn a_live_controller_swaps_to_the_0_1_module_and_back() {
    let mut started = start(DEFAULT_POLICY, &["--policy-poll-interval=200ms"]);
    let current = format!("(contract {CONTRACT_VERSION}, sha256 ");
    let (_, ready) = started.controller.get("/readyz").unwrap();
    assert!(ready.contains(&current), "{ready}");
    let create = |api: &RestCluster, name: &str| {
        block(api.create(Resource::Sandbox, NS, sandbox_manifest(name, json!({}))))
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    };

    // To 0.1: admitted (self-test against its own contract), then it runs new sandboxes.
    let old = fixture();
    replace_file(&started.policy, &old);
    let digest = cubepod_host::controller::policy_watch::sha256_hex(&old);
    started.controller.wait_for("/readyz", PATIENCE, |_, body| {
        body.contains(&format!("(contract 0.1.0, sha256 {digest})"))
    });
    create(&started.api, "under-0-1");
    wait_running(&started.api, "under-0-1");

    // And back to the current contract: the same process, and new sandboxes run under it.
    replace_file(&started.policy, DEFAULT_POLICY);
    started
        .controller
        .wait_for("/readyz", PATIENCE, |_, body| body.contains(&current));
    create(&started.api, "under-current");
    wait_running(&started.api, "under-current");
    // What ran under 0.1 stays converged under the current policy.
    wait_running(&started.api, "under-0-1");

    let (_, body) = started.controller.get("/metrics").unwrap();
    assert_eq!(swaps(&body, "applied"), 2.0, "{body}");
    let refused: f64 = cubepod_host::admission::REFUSAL_REASONS
        .iter()
        .map(|r| swaps(&body, r))
        .sum();
    assert_eq!(refused, 0.0, "{body}");
    assert_eq!(failed_reconciles(&body), 0.0, "{body}");
    assert!(
        started.controller.child.try_wait().unwrap().is_none(),
        "the same process serves on"
    );
}
