//! What a running sandbox does with a spec field that changes: the Pod-shaping fields (image,
//! resources, runtime class) wait for the next start, said by `SpecApplied`; a start applies
//! them.

use cubepod_policy_sdk::applied::{self, PENDING_RESTART, SPEC_APPLIED, STARTED};
use cubepod_policy_sdk::bindings::{
    Condition, ConditionStatus, DesiredState, EventType, ReconcileInput, ReconcileOutput,
};
use cubepod_policy_sdk::fixtures::{observe, sandbox};
use cubepod_policy_sdk::recording::{Call, RecordingClient};
use cubepod_policy_sdk::{reconcile, status};

fn client() -> RecordingClient {
    RecordingClient {
        pod_ip: Some("10.0.0.7".to_string()),
        ..Default::default()
    }
}

/// One reconcile, the input's status advanced to the output's as the host writes it back.
fn step(client: &mut RecordingClient, input: &mut ReconcileInput) -> ReconcileOutput {
    input.observed = observe(client, &input.sandbox.name, true);
    let out = reconcile::reconcile(client, input).expect("reconcile");
    input.sandbox.status = out.status.clone();
    out
}

fn spec_applied(out: &ReconcileOutput) -> Option<&Condition> {
    status::condition(&out.status.conditions, SPEC_APPLIED)
}

fn reasons(out: &ReconcileOutput) -> Vec<&str> {
    out.events.iter().map(|e| e.reason.as_str()).collect()
}

/// A running sandbox with 2 CPUs and 4Gi, converged.
fn running() -> (RecordingClient, ReconcileInput) {
    let mut client = client();
    let mut input = sandbox("a")
        .with_spec(|s| {
            s.cpu = Some("2".to_string());
            s.memory = Some("4Gi".to_string());
        })
        .input();
    step(&mut client, &mut input);
    step(&mut client, &mut input);
    client.calls.clear();
    (client, input)
}

fn pod_cpu(client: &RecordingClient) -> String {
    let pod = client
        .calls
        .iter()
        .find(|c| c.summary() == "ensure-pod a")
        .and_then(Call::manifest)
        .expect("a Pod created");
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_started_pod_records_what_it_was_started_with() {
    let (_, input) = running();
    let condition = status::condition(&input.sandbox.status.conditions, SPEC_APPLIED)
        .expect("SpecApplied once the Pod is started");
    assert_eq!(condition.status, ConditionStatus::True);
    assert_eq!(condition.reason, STARTED);
    assert_eq!(
        condition.message,
        "the Pod was started with spec.image \"ghcr.io/cubepod/sandbox-base:1.0\", \
         spec.resources.cpu \"2\", spec.resources.memory \"4Gi\", spec.runtimeClassName unset"
    );
}

#[test]
fn a_resource_edit_on_a_running_sandbox_waits_for_its_next_start() {
    let (mut client, mut input) = running();
    input.sandbox.spec.cpu = Some("4".to_string());
    input.sandbox.generation += 1;
    let out = step(&mut client, &mut input);
    assert!(
        client.summaries().is_empty(),
        "the running Pod is untouched"
    );
    let condition = spec_applied(&out).expect("SpecApplied");
    assert_eq!(condition.status, ConditionStatus::False);
    assert_eq!(condition.reason, PENDING_RESTART);
    assert!(
        condition
            .message
            .contains("changed since: spec.resources.cpu (now \"4\"), which the running Pod keeps"),
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains("pause and resume the sandbox"),
        "{}",
        condition.message
    );
    assert_eq!(reasons(&out), [PENDING_RESTART]);
    assert_eq!(out.events[0].kind, EventType::Normal);
    assert_eq!(out.status.pod_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(
        status::condition(&out.status.conditions, "Ready").map(|c| c.status),
        Some(ConditionStatus::True)
    );

    // Told once.
    let out = step(&mut client, &mut input);
    assert!(out.events.is_empty(), "{:?}", reasons(&out));
    assert_eq!(
        spec_applied(&out).map(|c| c.status),
        Some(ConditionStatus::False)
    );

    // A pause deletes the Pod: nothing runs, nothing waits.
    input.sandbox.spec.desired_state = DesiredState::Paused;
    let out = step(&mut client, &mut input);
    assert_eq!(client.take_summaries(), ["delete-pod a"]);
    assert!(spec_applied(&out).is_none());

    // The resume starts a Pod with the new values.
    input.sandbox.spec.desired_state = DesiredState::Running;
    let out = step(&mut client, &mut input);
    assert_eq!(client.summaries(), ["ensure-pod a"]);
    assert_eq!(pod_cpu(&client), "4");
    let condition = spec_applied(&out).expect("SpecApplied");
    assert_eq!(condition.status, ConditionStatus::True);
    assert!(
        condition.message.contains("spec.resources.cpu \"4\""),
        "{}",
        condition.message
    );
}

#[test]
fn a_reset_applies_an_image_edit() {
    let (mut client, mut input) = running();
    input.sandbox.spec.image = "ghcr.io/cubepod/sandbox-base:2.0".to_string();
    let out = step(&mut client, &mut input);
    let condition = spec_applied(&out).expect("SpecApplied");
    assert_eq!(condition.reason, PENDING_RESTART);
    assert!(
        condition
            .message
            .contains("spec.image (now \"ghcr.io/cubepod/sandbox-base:2.0\")"),
        "{}",
        condition.message
    );
    input.sandbox.spec.rootfs_generation = 2;
    step(&mut client, &mut input);
    let out = step(&mut client, &mut input);
    assert!(client.summaries().contains(&"ensure-pod a".to_string()));
    let condition = spec_applied(&out).expect("SpecApplied");
    assert_eq!(condition.status, ConditionStatus::True);
    assert!(
        condition
            .message
            .contains("spec.image \"ghcr.io/cubepod/sandbox-base:2.0\""),
        "{}",
        condition.message
    );
}

#[test]
fn an_edit_undone_is_applied_again() {
    let (mut client, mut input) = running();
    let started = spec_applied(&step(&mut client, &mut input)).cloned();
    input.sandbox.spec.memory = Some("8Gi".to_string());
    step(&mut client, &mut input);
    input.sandbox.spec.memory = Some("4Gi".to_string());
    let out = step(&mut client, &mut input);
    assert!(client.summaries().is_empty());
    let condition = spec_applied(&out).expect("SpecApplied");
    assert_eq!(condition.status, ConditionStatus::True);
    assert_eq!(condition.reason, STARTED);
    assert_eq!(
        Some(&condition.message),
        started.as_ref().map(|c| &c.message),
        "the record as it was started"
    );
}

#[test]
fn a_pod_with_no_record_gets_no_condition() {
    // A Pod started before its record was kept: nothing true could be said of it.
    let (mut client, mut input) = running();
    input
        .sandbox
        .status
        .conditions
        .retain(|c| c.kind != SPEC_APPLIED);
    input.sandbox.spec.cpu = Some("4".to_string());
    let out = step(&mut client, &mut input);
    assert!(spec_applied(&out).is_none());
    assert!(out.events.is_empty());
}

#[test]
fn a_record_reads_back_whatever_its_values_hold() {
    // Values with quotes, backslashes and the record's own separators in them.
    let tricky = r#"reg.example/i:1", spec.resources.cpu "9\"#;
    let (mut client, mut input) = running();
    input.sandbox.spec.image = tricky.to_string();
    input.sandbox.spec.runtime_class = Some("kata-clh".to_string());
    input.sandbox.spec.desired_state = DesiredState::Paused;
    step(&mut client, &mut input);
    input.sandbox.spec.desired_state = DesiredState::Running;
    let out = step(&mut client, &mut input);
    assert_eq!(
        spec_applied(&out).map(|c| c.message.clone()),
        Some(applied::record(&input.sandbox.spec))
    );
    // Unchanged, it stays applied; one field changed is the only one named.
    let out = step(&mut client, &mut input);
    assert_eq!(
        spec_applied(&out).map(|c| c.status),
        Some(ConditionStatus::True)
    );
    input.sandbox.spec.runtime_class = Some("kata-qemu".to_string());
    let out = step(&mut client, &mut input);
    let message = &spec_applied(&out).expect("SpecApplied").message;
    assert!(
        message.ends_with(
            "changed since: spec.runtimeClassName (now \"kata-qemu\"), which the running Pod \
             keeps until the next start: pause and resume the sandbox (spec.desiredState \
             Paused, then Running), or raise spec.rootfsGeneration by one to reset it"
        ),
        "{message}"
    );
}

#[test]
fn a_start_whose_status_was_held_back_is_recorded_from_an_unchanged_spec() {
    // The host holds a just-started sandbox's Pending status back: the next pass finds the Pod
    // running and no record of its start. A spec never changed since creation made it.
    let mut client = client();
    let mut input = sandbox("a").input();
    input.observed = observe(&client, "a", true);
    reconcile::reconcile(&mut client, &input).expect("reconcile");
    let out = step(&mut client, &mut input);
    let condition = spec_applied(&out).expect("SpecApplied");
    assert_eq!(condition.status, ConditionStatus::True);
    assert_eq!(condition.message, applied::record(&input.sandbox.spec));

    // Edited meanwhile: what the Pod was made from is not known, and nothing is said.
    let mut client = self::client();
    let mut input = sandbox("a").input();
    input.observed = observe(&client, "a", true);
    reconcile::reconcile(&mut client, &input).expect("reconcile");
    input.sandbox.generation = 2;
    input.sandbox.spec.cpu = Some("4".to_string());
    let out = step(&mut client, &mut input);
    assert!(spec_applied(&out).is_none());
}
