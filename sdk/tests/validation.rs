//! A spec the policy cannot act on gets a condition that says what to change, one Event, and no
//! child created or deleted; fixing it recovers.

use cubepod_policy_sdk::bindings::{ConditionStatus, SandboxPhase};
use cubepod_policy_sdk::fixtures::{observe, sandbox};
use cubepod_policy_sdk::recording::RecordingClient;
use cubepod_policy_sdk::{reconcile, status};

fn refused(input: &cubepod_policy_sdk::bindings::ReconcileInput, reason: &str, hint: &str) {
    let mut client = RecordingClient::default();
    let out = reconcile::reconcile(&mut client, input).unwrap();
    assert!(
        client.calls.is_empty(),
        "{reason}: {:?}",
        client.summaries()
    );
    let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
    assert_eq!(valid.status, ConditionStatus::False);
    assert_eq!(valid.reason, reason);
    assert!(valid.message.contains(hint), "{reason}: {}", valid.message);
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].reason, reason);

    // The same spec again: the condition holds, and no second Event.
    let mut again = input.clone();
    again.sandbox.status = out.status.clone();
    let out = reconcile::reconcile(&mut client, &again).unwrap();
    assert!(out.events.is_empty());
}

#[test]
fn each_bad_spec_is_refused_with_a_reason_and_a_hint() {
    refused(
        &sandbox("a").with_spec(|s| s.image = " ".into()).input(),
        "ImageMissing",
        "spec.image",
    );
    refused(
        &sandbox("a").generation(0).input(),
        "InvalidRootfsGeneration",
        "start at 1",
    );
    refused(
        &sandbox("a").forked_from("a").input(),
        "ForkFromSelf",
        "spec.forkFrom",
    );
    refused(
        &sandbox("a")
            .with_spec(|s| s.rootfs_size = "ten gigs".into())
            .input(),
        "InvalidQuantity",
        "spec.storage.rootfsSize",
    );
    refused(
        &sandbox("a")
            .with_spec(|s| s.memory = Some("2GB".into()))
            .input(),
        "InvalidQuantity",
        "spec.resources.memory",
    );
    refused(&sandbox(&"x".repeat(64)).input(), "NameTooLong", "63");
    refused(
        &sandbox("a").forked_from("b").claiming_from("p").input(),
        "ForkAndClaim",
        "remove one",
    );
}

#[test]
fn a_generation_that_goes_down_touches_nothing_and_fixing_it_recovers() {
    let mut client = RecordingClient::default();
    let mut input = sandbox("a").generation(3).input();
    let out = reconcile::reconcile(&mut client, &input).unwrap();
    input.sandbox.status = out.status;
    client.calls.clear();

    input.sandbox.spec.rootfs_generation = 2;
    input.observed = observe(&client, "a", true);
    let out = reconcile::reconcile(&mut client, &input).unwrap();
    assert!(client.calls.is_empty());
    let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
    assert_eq!(valid.reason, "RootfsGenerationDecreased");
    assert!(valid.message.contains("from 3 to 2"));
    // It was running: it keeps running as it is.
    assert_ne!(out.status.phase, SandboxPhase::Failed);

    input.sandbox.status = out.status;
    input.sandbox.spec.rootfs_generation = 3;
    let out = reconcile::reconcile(&mut client, &input).unwrap();
    assert!(client.calls.is_empty());
    let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
    assert_eq!(valid.status, ConditionStatus::True);
}

#[test]
fn a_new_sandbox_with_a_bad_spec_fails_visibly() {
    let mut client = RecordingClient::default();
    let input = sandbox("a").with_spec(|s| s.image.clear()).input();
    let out = reconcile::reconcile(&mut client, &input).unwrap();
    assert_eq!(out.status.phase, SandboxPhase::Failed);
    let ready = status::condition(&out.status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "ImageMissing");
}
