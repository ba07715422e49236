//! A policy's failure is on the object, where `kubectl` shows it: the real binary with a policy
//! that traps, runs past its deadline or its memory on some sandboxes, and a sandbox whose
//! volume the boundary refuses. Each gets `Ready=False`, reason `PolicyFailed`, with the trap,
//! bound or rule in the message (sizes as quantities) and one Warning Event however often the
//! reconcile is retried; fixing it (a good module swapped in, the spec corrected) clears it.

use std::time::Duration;

use cubepod_policy_host::runtime::DEFAULT_POLICY;
use cubepod_tests::kubectl::Embedded;
use cubepod_tests::{FAULTY_SEED, faulty_policy, replace_file, sandbox_traps, seed_file};
use serde_json::Value;

const NS: &str = "cubepod-workloads";
const SETTLE: Duration = Duration::from_secs(90);

/// The faulty policy's sandboxes, and one whose volume the boundary refuses.
const BIG: &str = r#"---
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: big, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0, storage: {rootfsSize: 500Ti}}
"#;

/// The Sandbox's `Ready` condition, as kubectl reads it: (status, reason, message).
fn ready(cluster: &Embedded, name: &str) -> Option<(String, String, String)> {
    let out = cluster.run(&["get", "sandbox", name, "-n", NS, "-o", "json"]);
    let sandbox: Value = serde_json::from_slice(&out.stdout).ok()?;
    let conditions = sandbox["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    let text = |key: &str| ready[key].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// The Warning Events about `name` with `reason`, as kubectl lists them: (count, message) each.
fn warnings(cluster: &Embedded, name: &str, reason: &str) -> Vec<(u64, String)> {
    let selector = format!("involvedObject.name={name}");
    let out = cluster.ok(&[
        "get",
        "events",
        "-n",
        NS,
        "--field-selector",
        &selector,
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).expect("an event list");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "Warning" && e["reason"] == reason)
        .map(|e| {
            (
                e["count"].as_u64().unwrap_or(1),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn each_policy_failure_is_a_condition_and_one_event_until_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let seed = seed_file(dir.path(), &format!("{FAULTY_SEED}{BIG}"));
    let policy = dir.path().join("policy.wasm");
    std::fs::copy(faulty_policy(), &policy).unwrap();
    let policy_flag = format!("--policy={}", policy.display());
    let seed_flag = format!("--seed={}", seed.display());
    let cluster = Embedded::start(&[
        &policy_flag,
        &seed_flag,
        "--guest-deadline=200ms",
        "--guest-memory-mib=16",
    ]);

    // Each failure retried at least three times, so that a second Event would have shown.
    cluster.controller.wait_for("/metrics", SETTLE, |_, body| {
        sandbox_traps(body, "trap") >= 3.0
            && sandbox_traps(body, "timeout") >= 3.0
            && sandbox_traps(body, "memory") >= 3.0
    });
    let expected = [
        (
            "trap-a",
            "policy cubepod-faulty",
            "trapped in reconcile-sandbox",
        ),
        (
            "loop-a",
            "policy cubepod-faulty",
            "ran past its 200ms deadline",
        ),
        (
            "oom-a",
            "policy cubepod-faulty",
            "exceeded its memory limit of 16Mi",
        ),
        (
            "big",
            "\"500Ti\"",
            "more than the largest volume allowed, 1Ti",
        ),
    ];
    for (name, first, second) in expected {
        let (status, reason, message) =
            ready(&cluster, name).unwrap_or_else(|| panic!("{name} has no Ready condition"));
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "PolicyFailed"),
            "{name}"
        );
        assert!(
            message.contains(first) && message.contains(second),
            "{name}: {message}"
        );
    }
    for name in ["trap-a", "loop-a", "oom-a"] {
        let events = warnings(&cluster, name, "PolicyFailed");
        assert_eq!(events.len(), 1, "{name}: {events:?}");
        assert_eq!(events[0].0, 1, "{name}: one failure, told once: {events:?}");
    }
    // The refused volume was told by the refusal's own Event, naming the rule: not twice.
    assert!(warnings(&cluster, "big", "PolicyFailed").is_empty());
    let refused = warnings(&cluster, "big", "PolicyRefused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].1.contains("1Ti"), "{refused:?}");

    // Fixed: a module that does not fail, and a size within the bound.
    replace_file(&policy, DEFAULT_POLICY);
    cluster.ok(&[
        "patch",
        "sandbox",
        "big",
        "-n",
        NS,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"storage":{"rootfsSize":"10Gi"}}}"#,
    ]);
    for name in ["trap-a", "loop-a", "oom-a", "big"] {
        cluster.until(
            &[
                "get",
                "sandbox",
                name,
                "-n",
                NS,
                "-o",
                "jsonpath={.status.phase}",
            ],
            |phase| phase == "Running",
        );
        let (status, reason, _) = ready(&cluster, name).expect("a Ready condition");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "PodReady"),
            "{name}"
        );
    }
}
