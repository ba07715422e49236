//! `PolicyRollout` with the real binary, its embedded cluster and the real kubectl: a module put
//! in a ConfigMap and named by a rollout is admitted from the API, canaried on a growing share
//! of sandboxes, rolled back by its gate when it traps on some of them (the status and an Event
//! saying why, the stable module serving every sandbox afterwards), or promoted once it has
//! walked its steps; a module that does not load is refused and the running one stays; a
//! shadowed candidate's differences are reported and nothing of them is written.

use std::time::{Duration, Instant};

use cubepod_tests::kubectl::{Embedded, Kubectl, row};
use cubepod_tests::{faulty_policy, image_allowlist_policy, seed_file};

const NS: &str = "cubepod-workloads";
/// The controller's own namespace (`--lease-namespace`), where rollouts live.
const SYSTEM: &str = "cubepod-system";

fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

/// A Sandbox for the seed file.
fn sandbox(name: &str) -> String {
    format!(
        "---\napiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {{name: {name}, \
         namespace: {NS}}}\nspec: {{image: ghcr.io/cubepod/sandbox-base:1.0}}\n"
    )
}

/// A Progressive rollout of ConfigMap `map`'s module with these steps and gates.
fn rollout(name: &str, map: &str, steps: &[(u8, &str)], gates: &str) -> String {
    let steps: String = steps
        .iter()
        .map(|(weight, duration)| format!("\n        - {{weight: {weight}, duration: {duration}}}"))
        .collect();
    format!(
        "apiVersion: cubepod.io/v1alpha1\nkind: PolicyRollout\nmetadata:\n  name: {name}\n  \
         namespace: {SYSTEM}\nspec:\n  module: {{configMap: {map}}}\n  strategy:\n    \
         type: Progressive\n    canary:\n      steps:{steps}\n    gates: {gates}\n"
    )
}

/// Puts the faulty policy's component in ConfigMap `map` of the controller's namespace.
fn module_config_map(kubectl: &Kubectl, map: &str) {
    let file = format!("--from-file=policy.wasm={}", faulty_policy().display());
    kubectl.ok(&["create", "configmap", map, "-n", SYSTEM, &file]);
}

/// `.status` of rollout `name`, as JSON.
fn status(kubectl: &Kubectl, name: &str) -> serde_json::Value {
    let out = kubectl.ok(&["get", "policyrollout", name, "-n", SYSTEM, "-o", "json"]);
    let object: serde_json::Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    object["status"].clone()
}

fn condition(status: &serde_json::Value, kind: &str) -> serde_json::Value {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or_default()
}

/// `reason: message` of each Event about PolicyRollout `name`.
fn events(kubectl: &Kubectl, name: &str) -> Vec<String> {
    let out = kubectl.ok(&["get", "events", "-n", SYSTEM, "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["kind"] == "PolicyRollout" && e["involvedObject"]["name"] == name
        })
        .map(|e| {
            format!(
                "{} {}: {}",
                e["type"].as_str().unwrap_or_default(),
                e["reason"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_candidate_that_traps_on_some_sandboxes_is_rolled_back_by_its_gate() {
    let dir = tempfile::tempdir().unwrap();
    // Eight sandboxes the candidate traps on: at 50% at least one is its own, but for 1 in 256
    // runs; the second step (100%) then has all of them.
    let traps: Vec<String> = (0..8).map(|n| format!("trap-{n}")).collect();
    let seed: String = traps.iter().map(|name| sandbox(name)).collect();
    let seed = format!("--seed={}", seed_file(dir.path(), &seed).display());
    let cluster = Embedded::start(&[&seed]);
    let all_running = |out: &str| {
        traps
            .iter()
            .all(|name| row(out, name).is_some_and(|r| r[1] == "Running"))
    };
    // The built-in module runs them all.
    cluster.until(&["get", "sandboxes", "-n", NS], all_running);

    module_config_map(&cluster, "faulty");
    let manifest = cluster.write(
        "rollout.yaml",
        &rollout(
            "faulty",
            "faulty",
            &[(50, "3s"), (100, "60s")],
            "{maxTrapRatio: 0}",
        ),
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);

    let table = cluster.until(&["get", "policyrollouts", "-n", SYSTEM], |out| {
        row(out, "faulty").is_some_and(|r| r[1] == "RolledBack")
    });
    assert_eq!(
        header(&table),
        ["NAME", "PHASE", "STABLE", "CANDIDATE", "WEIGHT", "AGE"],
        "{table}"
    );
    let status = status(&cluster, "faulty");
    assert_eq!(status["weight"], 0, "{status}");
    assert!(
        status["stable"]["name"] == "cubepod-default",
        "the built-in stays stable: {status}"
    );
    assert_eq!(status["candidate"]["name"], "cubepod-faulty", "{status}");
    let touched = status["touched"].as_u64().unwrap_or(0);
    assert!(
        touched >= 1,
        "the candidate reconciled some sandboxes: {status}"
    );
    let progressing = condition(&status, "Progressing");
    assert_eq!(progressing["reason"], "GateBreached", "{status}");
    let message = progressing["message"].as_str().unwrap_or_default();
    assert!(message.contains("gate maxTrapRatio breached"), "{message}");
    assert!(
        status["gates"]["trapRatio"].as_f64().unwrap_or(0.0) > 0.0,
        "{status}"
    );

    let told = events(&cluster, "faulty");
    let rolled_back: Vec<_> = told
        .iter()
        .filter(|e| e.starts_with("Warning RolledBack"))
        .collect();
    assert_eq!(rolled_back.len(), 1, "{told:?}");
    assert!(rolled_back[0].contains("maxTrapRatio"), "{told:?}");

    // The stable module serves every sandbox again: each is Running and Ready, with no
    // policy failure left on it, and stays so.
    let ready = |out: &str| {
        let list: serde_json::Value = serde_json::from_str(out).unwrap_or_default();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        traps.iter().all(|name| {
            items.iter().any(|s| {
                s["metadata"]["name"] == name.as_str()
                    && s["status"]["phase"] == "Running"
                    && condition(&s["status"], "Ready")["status"] == "True"
            })
        })
    };
    cluster.until(&["get", "sandboxes", "-n", NS, "-o", "json"], ready);
    std::thread::sleep(Duration::from_secs(2));
    let out = cluster.ok(&["get", "sandboxes", "-n", NS, "-o", "json"]);
    assert!(ready(&out), "{out}");
    let (_, readyz) = cluster.controller.get("/readyz").unwrap();
    assert!(readyz.contains("policy: cubepod-default"), "{readyz}");
    assert_eq!(status_phase(&cluster, "faulty"), "RolledBack");
}

fn status_phase(kubectl: &Kubectl, name: &str) -> String {
    status(kubectl, name)["phase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_good_candidate_walks_its_steps_and_is_promoted_and_a_bad_module_is_refused() {
    let cluster = Embedded::start(&[]);
    cluster.until(&["get", "sandboxes", "-n", NS], |out| {
        row(out, "dev-alice").is_some_and(|r| r[1] == "Running")
    });

    // Not a module: refused at admission, the running module untouched.
    let junk = cluster.write("junk.wasm", "not a wasm component");
    let file = format!("--from-file=policy.wasm={}", junk.display());
    cluster.ok(&["create", "configmap", "next", "-n", SYSTEM, &file]);
    let manifest = cluster.write(
        "rollout.yaml",
        &rollout(
            "next",
            "next",
            &[(25, "2s"), (50, "2s"), (100, "2s")],
            "{maxTrapRatio: 0, maxRefusalRatio: 0, maxReadyLatencyRatio: 5}",
        ),
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    cluster.until(&["get", "policyrollouts", "-n", SYSTEM], |out| {
        row(out, "next").is_some_and(|r| r[1] == "Refused")
    });
    let refused = status(&cluster, "next");
    assert_eq!(
        condition(&refused, "Admitted")["status"],
        "False",
        "{refused}"
    );
    assert_eq!(
        condition(&refused, "Admitted")["reason"],
        "Compile",
        "{refused}"
    );
    let told = events(&cluster, "next");
    assert!(
        told.iter().any(|e| e.starts_with("Warning RolloutRefused")),
        "{told:?}"
    );
    let (_, readyz) = cluster.controller.get("/readyz").unwrap();
    assert!(readyz.contains("policy: cubepod-default"), "{readyz}");

    // The ConfigMap fixed: the module is admitted and walks 25, 50 and 100 percent.
    let started = Instant::now();
    cluster.ok(&["delete", "configmap", "next", "-n", SYSTEM]);
    module_config_map(&cluster, "next");
    cluster.until(&["get", "policyrollouts", "-n", SYSTEM], |out| {
        row(out, "next").is_some_and(|r| r[1] == "Promoted")
    });
    // Each step held about its time (whole seconds: at least one of each two).
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "three steps of 2 s each: {:?}",
        started.elapsed()
    );
    let weights: Vec<u64> = cluster
        .controller
        .logs()
        .iter()
        .filter(|line| {
            let fields = &line["fields"];
            fields["rollout"] == "next"
                && (fields["message"] == "canary started" || fields["message"] == "canary step")
        })
        .filter_map(|line| line["fields"]["weight"].as_u64())
        .collect();
    assert_eq!(weights, [25, 50, 100]);
    let table = cluster.ok(&["get", "policyrollouts", "-n", SYSTEM]);
    let words = row(&table, "next").expect("the rollout is listed");
    assert_eq!(words[1], "Promoted", "{table}");
    assert!(words[2].starts_with("cubepod-faulty@"), "{table}");
    let promoted = status(&cluster, "next");
    assert_eq!(promoted["weight"], 100, "{promoted}");
    assert_eq!(promoted["stable"]["name"], "cubepod-faulty", "{promoted}");
    assert!(promoted["touched"].as_u64() > Some(0), "{promoted}");
    let told = events(&cluster, "next");
    for reason in ["Normal CanaryStarted", "Normal Promoted"] {
        let n = told.iter().filter(|e| e.starts_with(reason)).count();
        assert_eq!(n, 1, "{reason}: {told:?}");
    }
    let (_, readyz) = cluster.controller.get("/readyz").unwrap();
    assert!(readyz.contains("policy: cubepod-faulty"), "{readyz}");

    // The promoted module serves new sandboxes.
    let manifest = cluster.write("late.yaml", &sandbox("late"));
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    cluster.until(&["get", "sandboxes", "-n", NS], |out| {
        row(out, "late").is_some_and(|r| r[1] == "Running")
    });
}

#[test]
fn a_shadow_reports_the_decision_the_candidate_changes_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let seed = "---\napiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {name: busybox, \
                namespace: cubepod-workloads}\nspec: {image: docker.io/library/busybox:1.36}\n";
    let seed = format!("--seed={}", seed_file(dir.path(), seed).display());
    let cluster = Embedded::start(&[&seed]);
    cluster.until(&["get", "sandboxes", "-n", NS], |out| {
        row(out, "busybox").is_some_and(|r| r[1] == "Running")
    });
    let before = cluster.ok(&["get", "sandbox", "busybox", "-n", NS, "-o", "json"]);
    let before: serde_json::Value = serde_json::from_str(&before).expect("JSON");

    let file = format!(
        "--from-file=policy.wasm={}",
        image_allowlist_policy().display()
    );
    cluster.ok(&["create", "configmap", "allowlist", "-n", SYSTEM, &file]);
    let manifest = cluster.write(
        "rollout.yaml",
        &format!(
            "apiVersion: cubepod.io/v1alpha1\nkind: PolicyRollout\nmetadata:\n  name: allowlist\n  \
             namespace: {SYSTEM}\nspec:\n  module: {{configMap: allowlist}}\n  strategy:\n    \
             type: Progressive\n    shadow: {{duration: 1h}}\n    canary:\n      steps:\n        \
             - {{weight: 100, duration: 1h}}\n"
        ),
    );
    cluster.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    cluster.until(&["get", "policyrollouts", "-n", SYSTEM], |out| {
        row(out, "allowlist").is_some_and(|r| r[1] == "Shadowing")
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let shadow = loop {
        let status = status(&cluster, "allowlist");
        let differences = status["shadow"]["differences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if differences.iter().any(|d| d["kind"] == "status") {
            break status["shadow"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no difference reported: {status}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let examples = shadow["examples"].as_array().cloned().unwrap_or_default();
    assert!(
        examples.iter().any(|e| e
            .as_str()
            .is_some_and(|e| e.contains("cubepod-workloads/busybox"))),
        "{shadow}"
    );
    // The seeded sandboxes run allowed images: only the declined one differs.
    assert!(
        examples
            .iter()
            .all(|e| e.as_str().is_some_and(|e| e.contains("/busybox"))),
        "{shadow}"
    );
    let metrics = cluster
        .controller
        .wait_for("/metrics", Duration::from_secs(30), |_, body| {
            cubepod_tests::metric(
                body,
                "cubepod_policy_shadow_differences_total",
                &[("export", "reconcile-sandbox"), ("kind", "status")],
            )
            .is_some_and(|n| n >= 1.0)
        });
    assert!(metrics.contains("cubepod_policy_shadow_differences_total"));

    // Nothing of the candidate's decision was written.
    let after = cluster.ok(&["get", "sandbox", "busybox", "-n", NS, "-o", "json"]);
    let after: serde_json::Value = serde_json::from_str(&after).expect("JSON");
    assert_eq!(after["status"], before["status"]);
    assert_eq!(after["status"]["phase"], "Running");
    let events = cluster.ok(&["get", "events", "-n", NS]);
    assert!(!events.contains("ImageNotAllowed"), "{events}");
    assert_eq!(status_phase(&cluster, "allowlist"), "Shadowing");
    let (_, readyz) = cluster.controller.get("/readyz").unwrap();
    assert!(readyz.contains("policy: cubepod-default"), "{readyz}");
}
