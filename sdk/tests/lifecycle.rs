//! Every row of the lifecycle table (docs/architecture.md), with the exact kube-client calls
//! and manifests.

use cubepod_policy_sdk::bindings::{
    ConditionStatus, DesiredState, KubeError, ReconcileInput, ReconcileOutput, RetryAfter,
    SandboxPhase,
};
use cubepod_policy_sdk::fixtures::{NAMESPACE, NOW, observe, sandbox};
use cubepod_policy_sdk::recording::{Call, RecordingClient};
use cubepod_policy_sdk::{cleanup, reconcile, status};
use serde_json::json;

fn client() -> RecordingClient {
    RecordingClient {
        pod_ip: Some("10.0.0.7".to_string()),
        ..Default::default()
    }
}

/// Runs one reconcile and returns its output; the input's status advances to the output's, as
/// the host writes it back.
fn step(
    client: &mut RecordingClient,
    input: &mut ReconcileInput,
    pods_ready: bool,
) -> ReconcileOutput {
    input.observed = observe(client, &input.sandbox.name, pods_ready);
    let out = reconcile::reconcile(client, input).expect("reconcile");
    input.sandbox.status = out.status.clone();
    out
}

fn manifest<'a>(client: &'a RecordingClient, summary: &str) -> &'a serde_json::Value {
    client
        .calls
        .iter()
        .find(|c| c.summary() == summary)
        .and_then(Call::manifest)
        .unwrap_or_else(|| panic!("no call {summary}"))
}

fn ready(out: &ReconcileOutput) -> ConditionStatus {
    status::condition(&out.status.conditions, "Ready")
        .expect("Ready")
        .status
}

#[test]
fn new_running_sandbox_gets_two_block_pvcs_a_secret_and_a_kata_pod() {
    let mut client = client();
    let mut input = sandbox("a").input();
    let out = step(&mut client, &mut input, false);
    assert_eq!(
        client.summaries(),
        [
            "ensure-pvc a-workspace",
            "ensure-pvc a-rootfs-g1",
            "ensure-secret a-credentials",
            "apply-network-policy a-network",
            "ensure-pod a"
        ]
    );
    let owner = json!([{
        "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox", "name": "a", "uid": "uid-a",
        "controller": true, "blockOwnerDeletion": true
    }]);
    let rootfs = manifest(&client, "ensure-pvc a-rootfs-g1");
    assert_eq!(
        rootfs,
        &json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "a-rootfs-g1", "namespace": NAMESPACE,
                "labels": {
                    "app.kubernetes.io/managed-by": "cubepod-controller",
                    "cubepod.io/sandbox": "a", "cubepod.io/volume": "rootfs",
                    "cubepod.io/rootfs-generation": "1"
                },
                "ownerReferences": owner
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"], "volumeMode": "Block",
                "resources": {"requests": {"storage": "10Gi"}}
            }
        })
    );
    let workspace = manifest(&client, "ensure-pvc a-workspace");
    assert_eq!(workspace["spec"]["volumeMode"], "Block");
    assert!(workspace["spec"].get("dataSource").is_none());

    let secret = manifest(&client, "ensure-secret a-credentials");
    assert_eq!(secret["stringData"]["token"], "token-0123456789abcdef");
    assert_eq!(secret["metadata"]["ownerReferences"], owner);

    let pod = manifest(&client, "ensure-pod a");
    assert_eq!(pod["spec"]["runtimeClassName"], "kata-qemu");
    assert_eq!(pod["metadata"]["labels"]["cubepod.io/sandbox"], "a");
    assert_eq!(
        pod["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "cubepod-controller"
    );
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "prepare-rootfs");
    assert_eq!(
        pod["spec"]["initContainers"][0]["volumeDevices"],
        json!([{"name": "rootfs", "devicePath": "/dev/cubepod/rootfs"}])
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeDevices"],
        json!([
            {"name": "rootfs", "devicePath": "/dev/cubepod/rootfs"},
            {"name": "workspace", "devicePath": "/dev/cubepod/workspace"}
        ])
    );
    assert_eq!(
        pod["spec"]["volumes"],
        json!([
            {"name": "rootfs", "persistentVolumeClaim": {"claimName": "a-rootfs-g1"}},
            {"name": "workspace", "persistentVolumeClaim": {"claimName": "a-workspace"}}
        ])
    );
    assert_eq!(
        pod["spec"]["containers"][0]["env"][3],
        json!({"name": "CUBEPOD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "a-credentials", "key": "token"}}})
    );

    assert_eq!(out.status.phase, SandboxPhase::Pending);
    assert_eq!(out.status.pod_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(out.status.rootfs_pvc.as_deref(), Some("a-rootfs-g1"));
    assert_eq!(out.status.workspace_pvc.as_deref(), Some("a-workspace"));
    assert_eq!(out.status.started_at, Some(NOW));
    assert_eq!(out.status.observed_generation, 1);
    assert_eq!(ready(&out), ConditionStatus::False);
}

#[test]
fn converged_sandbox_makes_zero_calls_and_an_unchanged_status() {
    let mut client = client();
    let mut input = sandbox("a").input();
    step(&mut client, &mut input, false);
    client.calls.clear();

    let running = step(&mut client, &mut input, true);
    assert!(client.calls.is_empty(), "{:?}", client.summaries());
    assert_eq!(running.status.phase, SandboxPhase::Running);
    assert_eq!(ready(&running), ConditionStatus::True);

    input.now += 60;
    let again = step(&mut client, &mut input, true);
    assert!(client.calls.is_empty());
    assert_eq!(
        again.status, running.status,
        "a resync must not change the status"
    );
    assert!(again.events.is_empty());
}

#[test]
fn a_pod_found_without_a_recorded_start_starts_the_idle_clock_now() {
    let mut client = client();
    let mut input = sandbox("a").idle_timeout(60).input();
    step(&mut client, &mut input, true);
    // The status written after the Pod's creation was lost.
    input.sandbox.status = cubepod_policy_sdk::fixtures::new_status();
    input.now = NOW + 30;
    let out = step(&mut client, &mut input, true);
    assert!(
        client.calls.len() == 5,
        "only the first pass created: {:?}",
        client.summaries()
    );
    assert_eq!(out.status.started_at, Some(NOW + 30));
}

#[test]
fn pause_deletes_only_the_pod_and_resume_recreates_it_on_the_same_volumes() {
    let mut client = client();
    let mut input = sandbox("a").input();
    step(&mut client, &mut input, true);
    step(&mut client, &mut input, true);
    client.calls.clear();

    input.sandbox.spec.desired_state = DesiredState::Paused;
    let paused = step(&mut client, &mut input, true);
    assert_eq!(client.take_summaries(), ["delete-pod a"]);
    assert_eq!(paused.status.phase, SandboxPhase::Paused);
    assert_eq!(paused.status.pod_ip, None);
    let keys: Vec<&String> = client.objects.keys().collect();
    assert_eq!(
        keys,
        [
            "networkpolicy a-network",
            "pvc a-rootfs-g1",
            "pvc a-workspace",
            "secret a-credentials"
        ]
    );
    let paused_condition = status::condition(&paused.status.conditions, "Paused").unwrap();
    assert_eq!(paused_condition.status, ConditionStatus::True);

    let still = step(&mut client, &mut input, true);
    assert!(client.calls.is_empty());
    assert_eq!(still.status, paused.status);

    input.sandbox.spec.desired_state = DesiredState::Running;
    let resumed = step(&mut client, &mut input, false);
    assert_eq!(client.take_summaries(), ["ensure-pod a"]);
    let pod = &client.objects["pod a"];
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "a-rootfs-g1"
    );
    let paused_condition = status::condition(&resumed.status.conditions, "Paused").unwrap();
    assert_eq!(
        paused_condition.status,
        ConditionStatus::False,
        "no stale Paused condition"
    );
}

#[test]
fn reset_to_generation_two_replaces_the_rootfs_and_keeps_the_workspace() {
    let mut client = client();
    let mut input = sandbox("a").input();
    step(&mut client, &mut input, true);
    client.calls.clear();

    input.sandbox.spec.rootfs_generation = 2;
    input.sandbox.generation = 2;
    let resetting = step(&mut client, &mut input, true);
    assert_eq!(
        client.take_summaries(),
        [
            "delete-pod a",
            "delete-pvc a-rootfs-g1",
            "ensure-pvc a-rootfs-g2"
        ]
    );
    // The old Pod is still terminating in a real cluster: it is recreated on the next pass.
    assert_eq!(resetting.requeue_after_seconds, Some(2));
    assert_eq!(resetting.status.rootfs_pvc.as_deref(), Some("a-rootfs-g2"));

    step(&mut client, &mut input, false);
    assert_eq!(client.take_summaries(), ["ensure-pod a"]);
    let pod = &client.objects["pod a"];
    assert_eq!(
        pod["metadata"]["labels"]["cubepod.io/rootfs-generation"],
        "2"
    );
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "a-rootfs-g2"
    );
    assert!(client.objects.contains_key("pvc a-workspace"));
    assert!(!client.objects.contains_key("pvc a-rootfs-g1"));

    step(&mut client, &mut input, true);
    assert!(client.calls.is_empty());
}

#[test]
fn reset_while_paused_swaps_the_rootfs_without_starting_a_pod() {
    let mut client = client();
    let mut input = sandbox("a").paused().input();
    step(&mut client, &mut input, false);
    assert_eq!(
        client.take_summaries(),
        [
            "ensure-pvc a-workspace",
            "ensure-pvc a-rootfs-g1",
            "ensure-secret a-credentials",
            "apply-network-policy a-network"
        ]
    );
    input.sandbox.spec.rootfs_generation = 2;
    step(&mut client, &mut input, false);
    assert_eq!(
        client.take_summaries(),
        ["delete-pvc a-rootfs-g1", "ensure-pvc a-rootfs-g2"]
    );
}

#[test]
fn fork_clones_both_volumes_from_the_source_current_pvcs() {
    let source = sandbox("src")
        .generation(3)
        .with_status(|s| {
            s.rootfs_pvc = Some("src-rootfs-g3".to_string());
            s.workspace_pvc = Some("src-workspace".to_string());
        })
        .build();
    let mut client = client();
    let mut input = sandbox("b").forked_from("src").input();
    input.fork_source = Some(source);
    step(&mut client, &mut input, false);
    assert_eq!(
        manifest(&client, "ensure-pvc b-rootfs-g1")["spec"]["dataSource"],
        json!({"kind": "PersistentVolumeClaim", "name": "src-rootfs-g3"})
    );
    assert_eq!(
        manifest(&client, "ensure-pvc b-workspace")["spec"]["dataSource"],
        json!({"kind": "PersistentVolumeClaim", "name": "src-workspace"})
    );
    client.calls.clear();

    // Once cloned, the fork lives on its own: the source may go, and a reset starts fresh.
    input.fork_source = None;
    input.sandbox.spec.rootfs_generation = 2;
    step(&mut client, &mut input, true);
    let reset = manifest(&client, "ensure-pvc b-rootfs-g2");
    assert!(reset["spec"].get("dataSource").is_none());
}

#[test]
fn fork_of_a_missing_source_creates_nothing_and_says_why() {
    let mut client = client();
    let mut input = sandbox("b").forked_from("ghost").input();
    let out = step(&mut client, &mut input, false);
    assert!(client.calls.is_empty());
    let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
    assert_eq!(valid.status, ConditionStatus::False);
    assert_eq!(valid.reason, "ForkSourceNotFound");
    assert!(valid.message.contains("ghost"));
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.requeue_after_seconds, Some(10));

    // The source appears: the fork proceeds without a restart.
    input.fork_source = Some(
        sandbox("ghost")
            .with_status(|s| {
                s.rootfs_pvc = Some("ghost-rootfs-g1".to_string());
                s.workspace_pvc = Some("ghost-workspace".to_string());
            })
            .build(),
    );
    step(&mut client, &mut input, false);
    assert_eq!(client.calls.len(), 5);
}

#[test]
fn fork_of_a_source_without_volumes_waits_without_failing() {
    let mut client = client();
    let mut input = sandbox("b").forked_from("young").input();
    input.fork_source = Some(sandbox("young").build());
    let out = step(&mut client, &mut input, false);
    assert!(client.calls.is_empty());
    assert_eq!(out.status.phase, SandboxPhase::Pending);
    let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
    assert_eq!(valid.status, ConditionStatus::True);
    let ready = status::condition(&out.status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "ForkSourceNotReady");
    assert_eq!(out.requeue_after_seconds, Some(10));
}

#[test]
fn deleted_sandbox_deletes_every_child_then_reports_done() {
    let mut client = client();
    let mut input = sandbox("a").input();
    step(&mut client, &mut input, true);
    client.calls.clear();

    let deleting = sandbox("a").deleting().build();
    let observed = observe(&client, "a", true);
    let out = cleanup::cleanup(&mut client, NOW, &deleting, &observed).unwrap();
    assert_eq!(
        client.take_summaries(),
        [
            "delete-pod a",
            "delete-pvc a-rootfs-g1",
            "delete-pvc a-workspace",
            "delete-secret a-credentials"
        ]
    );
    assert!(!out.done, "children were still observed");
    assert_eq!(out.status.phase, SandboxPhase::Terminating);

    // The NetworkPolicy goes only once the Pod is gone: a terminating Pod still runs.
    let observed = observe(&client, "a", true);
    let out = cleanup::cleanup(&mut client, NOW, &deleting, &observed).unwrap();
    assert_eq!(client.take_summaries(), ["delete-network-policy a-network"]);
    assert!(!out.done);

    let observed = observe(&client, "a", true);
    let out = cleanup::cleanup(&mut client, NOW, &deleting, &observed).unwrap();
    assert!(client.calls.is_empty());
    assert!(out.done);
}

#[test]
fn a_failed_call_leaves_nothing_a_retry_cannot_finish() {
    let failures = [
        "ensure-pvc a-workspace",
        "ensure-pvc a-rootfs-g1",
        "ensure-secret a-credentials",
        "apply-network-policy a-network",
        "ensure-pod a",
    ];
    for failing in failures {
        let mut client = client();
        client.fail = Some((
            failing.to_string(),
            KubeError::Retryable(RetryAfter {
                delay_ms: 100,
                message: "503".to_string(),
            }),
        ));
        let mut input = sandbox("a").input();
        input.observed = observe(&client, "a", false);
        let error = reconcile::reconcile(&mut client, &input).unwrap_err();
        assert!(matches!(error, KubeError::Retryable(_)));
        let before = client.take_summaries();
        // The retry sees what the failed pass made, and makes only the rest.
        let out = step(&mut client, &mut input, false);
        let after = client.take_summaries();
        let mut all = before.clone();
        all.extend(after.clone());
        all.sort();
        let mut expected: Vec<String> = failures.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(
            all, expected,
            "failing {failing}: before {before:?} after {after:?}"
        );
        assert_eq!(out.status.rootfs_pvc.as_deref(), Some("a-rootfs-g1"));
        step(&mut client, &mut input, true);
        assert!(client.calls.is_empty());
    }
}

#[test]
fn reaper_pause_holds_until_activity_and_a_user_pause_is_never_undone() {
    let mut client = client();
    let mut input = sandbox("a").idle_timeout(60).input();
    step(&mut client, &mut input, true);
    step(&mut client, &mut input, true);
    client.calls.clear();

    // The host marks the reaper's decision; the reconcile carries it out.
    input.sandbox.status.idle_paused_at = Some(NOW + 100);
    input.now = NOW + 100;
    let paused = step(&mut client, &mut input, true);
    assert_eq!(client.take_summaries(), ["delete-pod a"]);
    assert_eq!(paused.status.phase, SandboxPhase::Paused);
    let reason = &status::condition(&paused.status.conditions, "Paused")
        .unwrap()
        .reason;
    assert_eq!(reason, "Idle");

    // Activity from before the pause changes nothing.
    input.sandbox.last_activity = Some(NOW + 50);
    step(&mut client, &mut input, false);
    assert!(client.calls.is_empty());

    input.sandbox.last_activity = Some(NOW + 200);
    input.now = NOW + 200;
    let resumed = step(&mut client, &mut input, false);
    assert_eq!(client.take_summaries(), ["ensure-pod a"]);
    assert_eq!(resumed.status.idle_paused_at, None);
    assert_eq!(resumed.status.started_at, Some(NOW + 200));
    assert_eq!(resumed.events[0].reason, "Resumed");

    input.sandbox.spec.desired_state = DesiredState::Paused;
    step(&mut client, &mut input, true);
    assert_eq!(client.take_summaries(), ["delete-pod a"]);
    input.sandbox.last_activity = Some(NOW + 999);
    let user_paused = step(&mut client, &mut input, false);
    assert!(
        client.calls.is_empty(),
        "activity must not undo a user's pause"
    );
    assert_eq!(user_paused.status.phase, SandboxPhase::Paused);
}

#[test]
fn claim_adopts_the_first_ready_member_without_creating_children() {
    let mut client = client();
    let mut input = sandbox("claim").claiming_from("pool").input();
    input.pool_candidates = vec!["pool-0".to_string(), "pool-1".to_string()];
    let out = step(&mut client, &mut input, false);
    assert!(client.calls.is_empty());
    assert_eq!(out.claim.as_deref(), Some("pool-0"));
    assert_eq!(out.status.claimed_member.as_deref(), Some("pool-0"));

    // Once adopted, the claim mirrors its member.
    let mut member = sandbox("pool-0")
        .with_status(|s| {
            s.phase = SandboxPhase::Running;
            s.pod_ip = Some("10.0.0.9".to_string());
        })
        .build();
    member.claimed_by = Some("claim".to_string());
    input.claimed_member = Some(member);
    let mirrored = step(&mut client, &mut input, false);
    assert!(client.calls.is_empty());
    assert_eq!(mirrored.claim, None);
    assert_eq!(mirrored.status.phase, SandboxPhase::Running);
    assert_eq!(mirrored.status.pod_ip.as_deref(), Some("10.0.0.9"));
}

#[test]
fn a_claim_that_lost_its_member_claims_another_and_else_starts_cold() {
    let mut client = client();
    let mut input = sandbox("claim").claiming_from("pool").input();
    let mut member = sandbox("pool-0")
        .with_status(|s| {
            s.phase = SandboxPhase::Running;
            s.pod_ip = Some("10.0.0.9".to_string());
            s.rootfs_pvc = Some("pool-0-rootfs-g1".to_string());
        })
        .build();
    member.claimed_by = Some("claim".to_string());
    input.sandbox.status.claimed_member = Some("pool-0".to_string());
    input.claimed_member = Some(member);
    let mirrored = step(&mut client, &mut input, false);
    assert_eq!(mirrored.status.phase, SandboxPhase::Running);

    // The member is gone (deleted, or held by another claim): another is offered.
    input.claimed_member = None;
    input.pool_candidates = vec!["pool-1".to_string()];
    let reclaimed = step(&mut client, &mut input, false);
    assert!(client.calls.is_empty());
    assert_eq!(reclaimed.claim.as_deref(), Some("pool-1"));
    assert_eq!(reclaimed.status.claimed_member.as_deref(), Some("pool-1"));
    assert_ne!(reclaimed.status.phase, SandboxPhase::Failed);
    let reasons: Vec<&str> = reclaimed.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["ClaimedMemberLost", "Claimed"]);

    // Lost again with no ready member left: it starts cold, under its own names.
    input.pool_candidates = Vec::new();
    let cold = step(&mut client, &mut input, false);
    assert_eq!(cold.claim, None);
    assert_eq!(cold.status.claimed_member, None);
    assert_ne!(cold.status.phase, SandboxPhase::Failed);
    assert_eq!(cold.status.rootfs_pvc.as_deref(), Some("claim-rootfs-g1"));
    assert!(
        client
            .take_summaries()
            .contains(&"ensure-pvc claim-rootfs-g1".to_string())
    );
}

#[test]
fn claim_with_no_ready_member_starts_cold() {
    let mut client = client();
    let mut input = sandbox("claim").claiming_from("pool").input();
    let out = step(&mut client, &mut input, false);
    assert_eq!(client.calls.len(), 5);
    assert_eq!(out.claim, None);
    assert_eq!(out.events[0].reason, "NoReadyMember");
}

#[test]
fn the_contract_version_is_the_wit_package_s() {
    let wit = include_str!("../../wit/controller.wit");
    let package = wit
        .lines()
        .find_map(|l| l.strip_prefix("package cubepod:controller@"))
        .expect("package line");
    assert_eq!(
        format!("{};", cubepod_policy_sdk::CONTRACT_VERSION),
        package
    );
}

/// `status.shutdownIn` shows the coarse time left and the reconcile comes back when it next
/// changes; a sandbox without a shutdown time has none, and keeps its own requeue.
#[test]
fn shutdown_in_is_coarse_and_requeued_at_its_next_change() {
    let mut input = sandbox("a")
        .with_spec(|s| s.shutdown_time = Some(NOW + 5 * 3600 + 1800))
        .input();
    let out = reconcile::reconcile(&mut client(), &input).unwrap();
    assert_eq!(out.status.shutdown_in.as_deref(), Some("5h"));
    assert_eq!(out.requeue_after_seconds, Some(1801));

    input.sandbox.spec.shutdown_time = None;
    input.sandbox.status.shutdown_in = Some("5h".to_string());
    let out = reconcile::reconcile(&mut client(), &input).unwrap();
    assert_eq!(out.status.shutdown_in, None);
    assert_eq!(out.requeue_after_seconds, None);

    // A sooner requeue of the reconcile's own (waiting for a fork source) is kept.
    let forked = sandbox("b")
        .forked_from("missing")
        .with_spec(|s| s.shutdown_time = Some(NOW + 30 * 86_400))
        .input();
    let out = reconcile::reconcile(&mut client(), &forked).unwrap();
    assert_eq!(out.status.shutdown_in.as_deref(), Some("28d"));
    assert_eq!(out.requeue_after_seconds, Some(10));
}
