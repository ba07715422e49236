//! The in-memory cluster against the API server's semantics, through the `Cluster` seam.

use std::sync::Arc;
use std::time::Duration;

use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig, WriteVerb};
use cubepod_kube::{
    ApiErrorKind, ApiResult, Cluster, PageRequest, Resource, Scope, WatchEvent, WatchEventType,
};
use serde_json::{Value, json};
use tokio::sync::mpsc::Receiver;

const NS: &str = "cubepod-workloads";
/// Only a bound against hanging: nothing here is expected to take long.
const PATIENCE: Duration = Duration::from_secs(10);

fn instant() -> Arc<MemoryCluster> {
    MemoryCluster::new(MemoryClusterConfig::instant())
}

fn scope(resource: Resource, selector: Option<&str>) -> Scope {
    Scope {
        resource,
        namespace: NS.into(),
        label_selector: selector.map(str::to_owned),
    }
}

fn named(name: &str) -> Value {
    json!({"metadata": {"name": name}})
}

fn sandbox(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"image": "busybox", "desiredState": "Running"}})
}

fn meta<'a>(object: &'a Value, field: &str) -> &'a Value {
    &object["metadata"][field]
}

fn rv(object: &Value) -> u64 {
    meta(object, "resourceVersion")
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion")
}

fn owned_by(name: &str, owner: &Value) -> Value {
    json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": meta(owner, "name"), "uid": meta(owner, "uid"), "controller": true}]}})
}

async fn next(watch: &mut Receiver<ApiResult<WatchEvent>>) -> WatchEvent {
    tokio::time::timeout(PATIENCE, watch.recv())
        .await
        .expect("an event in time")
        .expect("an open stream")
        .expect("an event, not an error")
}

/// The next event of `kind`, skipping others.
async fn next_of(watch: &mut Receiver<ApiResult<WatchEvent>>, kind: WatchEventType) -> WatchEvent {
    loop {
        let event = next(watch).await;
        if event.kind == kind {
            return event;
        }
    }
}

async fn ended(watch: &mut Receiver<ApiResult<WatchEvent>>) -> bool {
    tokio::time::timeout(PATIENCE, watch.recv())
        .await
        .expect("the stream to end in time")
        .is_none()
}

fn kinds(events: &[WatchEvent]) -> Vec<WatchEventType> {
    events.iter().map(|e| e.kind).collect()
}

#[tokio::test]
async fn create_fills_metadata_and_refuses_duplicates() {
    let cluster = instant();
    let created = cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    assert_eq!(created["kind"], "Secret");
    assert_eq!(created["apiVersion"], "v1");
    assert_eq!(meta(&created, "namespace"), NS);
    assert_eq!(meta(&created, "generation"), 1);
    assert_eq!(meta(&created, "uid").as_str().unwrap().len(), 36);
    let stamp = meta(&created, "creationTimestamp").as_str().unwrap();
    assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
    assert_eq!(
        cluster.get(Resource::Secret, NS, "a").await.unwrap(),
        created
    );

    let again = cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap_err();
    assert_eq!(again.kind, ApiErrorKind::AlreadyExists);
    assert_eq!(again.message, "secrets \"a\" already exists");
    let sandbox_again = {
        cluster
            .create(Resource::Sandbox, NS, sandbox("s"))
            .await
            .unwrap();
        cluster
            .create(Resource::Sandbox, NS, sandbox("s"))
            .await
            .unwrap_err()
    };
    assert_eq!(
        sandbox_again.message,
        "sandboxes.cubepod.io \"s\" already exists"
    );
}

#[tokio::test]
async fn create_refuses_missing_name_and_foreign_namespace() {
    let cluster = instant();
    let no_name = cluster
        .create(Resource::Pod, NS, json!({"metadata": {}}))
        .await
        .unwrap_err();
    assert_eq!(no_name.kind, ApiErrorKind::Invalid);
    let foreign = json!({"metadata": {"name": "a", "namespace": "elsewhere"}});
    let mismatch = cluster
        .create(Resource::Pod, NS, foreign)
        .await
        .unwrap_err();
    assert_eq!(mismatch.kind, ApiErrorKind::Invalid);
    assert_eq!(cluster.count(Resource::Pod), 0);
}

#[tokio::test]
async fn get_patch_and_delete_of_a_missing_object_are_not_found() {
    let cluster = instant();
    let get = cluster.get(Resource::Pod, NS, "nope").await.unwrap_err();
    assert_eq!(get.kind, ApiErrorKind::NotFound);
    let delete = cluster.delete(Resource::Pod, NS, "nope").await.unwrap_err();
    assert_eq!(delete.kind, ApiErrorKind::NotFound);
    let patch = cluster
        .patch(
            Resource::Pod,
            NS,
            "nope",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(patch.kind, ApiErrorKind::NotFound);
}

#[tokio::test]
async fn delete_removes_an_object_without_finalizers() {
    let cluster = instant();
    cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    cluster.delete(Resource::Secret, NS, "a").await.unwrap();
    assert!(cluster.get(Resource::Secret, NS, "a").await.is_err());
    assert_eq!(cluster.count(Resource::Secret), 0);
}

#[tokio::test]
async fn resource_version_is_one_counter_across_kinds() {
    let cluster = instant();
    let a = cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    let b = cluster
        .create(Resource::Sandbox, NS, sandbox("b"))
        .await
        .unwrap();
    let a2 = cluster
        .patch(
            Resource::Secret,
            NS,
            "a",
            json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await
        .unwrap();
    assert!(rv(&a) < rv(&b) && rv(&b) < rv(&a2));
    let list = cluster.list(&scope(Resource::Secret, None)).await.unwrap();
    assert_eq!(list.resource_version, rv(&a2).to_string());
    assert_eq!(cluster.resource_version(), list.resource_version);
}

#[tokio::test]
async fn a_patch_with_a_stale_resource_version_conflicts() {
    let cluster = instant();
    let first = cluster
        .create(Resource::Sandbox, NS, sandbox("s"))
        .await
        .unwrap();
    let stale = meta(&first, "resourceVersion").clone();
    cluster
        .patch(Resource::Sandbox, NS, "s", json!({"spec": {"image": "v2"}}))
        .await
        .unwrap();

    let conflict = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"resourceVersion": stale}, "spec": {"image": "v3"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(conflict.kind, ApiErrorKind::Conflict);
    assert!(
        conflict.message.contains("the object has been modified"),
        "{conflict}"
    );

    let current = cluster.get(Resource::Sandbox, NS, "s").await.unwrap();
    let ok = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"resourceVersion": meta(&current, "resourceVersion")},
                "spec": {"image": "v3"}}),
        )
        .await
        .unwrap();
    assert_eq!(ok["spec"]["image"], "v3");
    assert!(rv(&ok) > rv(&current));
}

#[tokio::test]
async fn merge_patch_null_removes_keys() {
    let cluster = instant();
    cluster
        .create(
            Resource::Secret,
            NS,
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}}),
        )
        .await
        .unwrap();
    let patched = cluster
        .patch(
            Resource::Secret,
            NS,
            "a",
            json!({"metadata": {"labels": {"x": null}}}),
        )
        .await
        .unwrap();
    assert_eq!(meta(&patched, "labels"), &json!({"y": "2"}));
}

#[tokio::test]
async fn a_patch_that_changes_nothing_is_not_a_write() {
    let cluster = instant();
    let created = cluster
        .create(Resource::Sandbox, NS, sandbox("s"))
        .await
        .unwrap();
    let mut watch = cluster
        .watch(&scope(Resource::Sandbox, None), "")
        .await
        .unwrap();
    let same = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"spec": {"image": "busybox"}}),
        )
        .await
        .unwrap();
    assert_eq!(same, created);
    assert!(watch.try_recv().is_err());
}

#[tokio::test]
async fn generation_moves_only_with_spec() {
    let cluster = instant();
    cluster
        .create(Resource::Sandbox, NS, sandbox("s"))
        .await
        .unwrap();
    let generation = |object: &Value| meta(object, "generation").as_u64().unwrap();

    let labelled = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await
        .unwrap();
    assert_eq!(generation(&labelled), 1);
    let status = cluster
        .patch_status(
            Resource::Sandbox,
            NS,
            "s",
            json!({"status": {"phase": "Running"}}),
        )
        .await
        .unwrap();
    assert_eq!(generation(&status), 1);
    let respecced = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"spec": {"desiredState": "Paused"}}),
        )
        .await
        .unwrap();
    assert_eq!(generation(&respecced), 2);
    // The generation is the server's: a client cannot set it.
    let forged = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"generation": 40}}),
        )
        .await
        .unwrap();
    assert_eq!(generation(&forged), 2);
}

#[tokio::test]
async fn status_subresource_separates_spec_and_status() {
    let cluster = instant();
    let mut with_status = sandbox("s");
    with_status["status"] = json!({"phase": "Forged"});
    let created = cluster
        .create(Resource::Sandbox, NS, with_status)
        .await
        .unwrap();
    assert!(
        created.get("status").is_none(),
        "status is dropped on create"
    );

    let main = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"spec": {"image": "v2"}, "status": {"phase": "Running"}}),
        )
        .await
        .unwrap();
    assert_eq!(main["spec"]["image"], "v2");
    assert!(main.get("status").is_none(), "patch ignores status");

    let status = cluster
        .patch_status(
            Resource::Sandbox,
            NS,
            "s",
            json!({"spec": {"image": "v3"}, "metadata": {"labels": {"a": "b"}},
                "status": {"phase": "Running", "podIP": "10.244.0.1"}}),
        )
        .await
        .unwrap();
    assert_eq!(status["status"]["phase"], "Running");
    assert_eq!(status["spec"]["image"], "v2", "patch_status ignores spec");
    assert!(
        meta(&status, "labels").is_null(),
        "patch_status ignores metadata"
    );

    let unchanged = cluster
        .patch(Resource::Sandbox, NS, "s", json!({"status": null}))
        .await
        .unwrap();
    assert_eq!(unchanged["status"]["phase"], "Running");
}

#[tokio::test]
async fn core_kinds_patch_the_whole_object() {
    let cluster = instant();
    cluster.create(Resource::Pod, NS, named("p")).await.unwrap();
    let patched = cluster
        .patch(Resource::Pod, NS, "p", json!({"status": {"message": "hi"}}))
        .await
        .unwrap();
    assert_eq!(patched["status"]["message"], "hi");
    let no_status = cluster
        .patch_status(Resource::Secret, NS, "p", json!({"status": {}}))
        .await
        .unwrap_err();
    assert_eq!(no_status.kind, ApiErrorKind::NotFound);
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_removed() {
    let cluster = instant();
    let mut object = sandbox("s");
    object["metadata"]["finalizers"] = json!(["cubepod.io/cleanup"]);
    cluster.create(Resource::Sandbox, NS, object).await.unwrap();
    let mut watch = cluster
        .watch(&scope(Resource::Sandbox, None), "")
        .await
        .unwrap();

    cluster.delete(Resource::Sandbox, NS, "s").await.unwrap();
    let marked = next(&mut watch).await;
    assert_eq!(marked.kind, WatchEventType::Modified);
    assert!(meta(&marked.object, "deletionTimestamp").is_string());
    let held = cluster.get(Resource::Sandbox, NS, "s").await.unwrap();
    assert_eq!(
        meta(&held, "deletionTimestamp"),
        meta(&marked.object, "deletionTimestamp")
    );

    // Deleting again is a no-op; no new finalizer may join.
    cluster.delete(Resource::Sandbox, NS, "s").await.unwrap();
    let late = cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"finalizers": ["cubepod.io/cleanup", "other"]}}),
        )
        .await
        .unwrap_err();
    assert_eq!(late.kind, ApiErrorKind::Invalid);

    cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"finalizers": null}}),
        )
        .await
        .unwrap();
    let deleted = next(&mut watch).await;
    assert_eq!(deleted.kind, WatchEventType::Deleted);
    assert!(rv(&deleted.object) > rv(&marked.object));
    let gone = cluster.get(Resource::Sandbox, NS, "s").await.unwrap_err();
    assert_eq!(gone.kind, ApiErrorKind::NotFound);
}

#[tokio::test]
async fn removing_an_owner_deletes_its_dependents_recursively() {
    let cluster = instant();
    let owner = cluster
        .create(Resource::Sandbox, NS, sandbox("s"))
        .await
        .unwrap();
    let pod = cluster
        .create(Resource::Pod, NS, owned_by("s", &owner))
        .await
        .unwrap();
    for (resource, name) in [
        (Resource::PersistentVolumeClaim, "s-workspace"),
        (Resource::Secret, "s-credentials"),
    ] {
        cluster
            .create(resource, NS, owned_by(name, &owner))
            .await
            .unwrap();
    }
    // Owned by the pod: goes when the pod goes.
    cluster
        .create(Resource::Secret, NS, owned_by("grandchild", &pod))
        .await
        .unwrap();
    // A second, live owner keeps an object.
    let other = cluster
        .create(Resource::Sandbox, NS, sandbox("other"))
        .await
        .unwrap();
    let mut shared = owned_by("shared", &owner);
    shared["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kind": "Sandbox", "name": "other", "uid": meta(&other, "uid")}));
    cluster.create(Resource::Secret, NS, shared).await.unwrap();
    // A finalizer holds a dependent, marked for deletion.
    let mut held = owned_by("held", &owner);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    cluster.create(Resource::Secret, NS, held).await.unwrap();

    cluster.delete(Resource::Sandbox, NS, "s").await.unwrap();

    assert_eq!(cluster.count(Resource::Pod), 0);
    assert_eq!(cluster.count(Resource::PersistentVolumeClaim), 0);
    let secrets: Vec<String> = cluster
        .objects(Resource::Secret)
        .iter()
        .map(|s| meta(s, "name").as_str().unwrap().to_owned())
        .collect();
    assert_eq!(secrets, ["held", "shared"]);
    let held = cluster.get(Resource::Secret, NS, "held").await.unwrap();
    assert!(meta(&held, "deletionTimestamp").is_string());
}

#[tokio::test]
async fn an_owner_held_by_finalizers_keeps_its_dependents_until_removed() {
    let cluster = instant();
    let mut object = sandbox("s");
    object["metadata"]["finalizers"] = json!(["cubepod.io/cleanup"]);
    let owner = cluster.create(Resource::Sandbox, NS, object).await.unwrap();
    cluster
        .create(Resource::Secret, NS, owned_by("s-credentials", &owner))
        .await
        .unwrap();
    cluster.delete(Resource::Sandbox, NS, "s").await.unwrap();
    assert_eq!(cluster.count(Resource::Secret), 1);
    cluster
        .patch(
            Resource::Sandbox,
            NS,
            "s",
            json!({"metadata": {"finalizers": []}}),
        )
        .await
        .unwrap();
    assert_eq!(cluster.count(Resource::Sandbox), 0);
    assert_eq!(cluster.count(Resource::Secret), 0);
}

#[tokio::test]
async fn list_applies_namespace_and_label_selector() {
    let cluster = instant();
    let labelled =
        |name: &str, labels: Value| json!({"metadata": {"name": name, "labels": labels}});
    cluster
        .create(
            Resource::Secret,
            NS,
            labelled("a", json!({"app": "x", "tier": "1"})),
        )
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, NS, labelled("b", json!({"app": "y"})))
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, NS, labelled("c", json!({})))
        .await
        .unwrap();
    cluster
        .create(
            Resource::Secret,
            "elsewhere",
            labelled("d", json!({"app": "x"})),
        )
        .await
        .unwrap();

    let names = |selector: Option<&'static str>| {
        let cluster = Arc::clone(&cluster);
        async move {
            cluster
                .list(&scope(Resource::Secret, selector))
                .await
                .unwrap()
                .items
                .iter()
                .map(|o| meta(o, "name").as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names(None).await, ["a", "b", "c"]);
    assert_eq!(names(Some("app=x")).await, ["a"]);
    assert_eq!(names(Some("app")).await, ["a", "b"]);
    assert_eq!(names(Some("app!=x")).await, ["b", "c"]);
    assert_eq!(names(Some("app=x,tier=1")).await, ["a"]);
    assert_eq!(names(Some("app=x,tier=2")).await, Vec::<String>::new());

    let all = Scope {
        namespace: String::new(),
        ..scope(Resource::Secret, Some("app=x"))
    };
    assert_eq!(cluster.list(&all).await.unwrap().items.len(), 2);
    let bad = cluster
        .list(&scope(Resource::Secret, Some("a b c")))
        .await
        .unwrap_err();
    assert_eq!(bad.kind, ApiErrorKind::Invalid);
}

#[tokio::test]
async fn watch_from_now_sees_only_later_changes() {
    let cluster = instant();
    cluster
        .create(Resource::Secret, NS, named("before"))
        .await
        .unwrap();
    let mut watch = cluster
        .watch(&scope(Resource::Secret, None), "")
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, NS, named("after"))
        .await
        .unwrap();
    cluster
        .create(Resource::Pod, NS, named("other-kind"))
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, "elsewhere", named("other-namespace"))
        .await
        .unwrap();
    cluster.delete(Resource::Secret, NS, "after").await.unwrap();

    let added = next(&mut watch).await;
    assert_eq!(added.kind, WatchEventType::Added);
    assert_eq!(meta(&added.object, "name"), "after");
    let deleted = next(&mut watch).await;
    assert_eq!(deleted.kind, WatchEventType::Deleted);
    assert_eq!(meta(&deleted.object, "name"), "after");
    assert!(watch.try_recv().is_err());
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version() {
    let cluster = instant();
    cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    let from = cluster
        .list(&scope(Resource::Secret, None))
        .await
        .unwrap()
        .resource_version;
    cluster
        .patch(Resource::Secret, NS, "a", json!({"data": {"k": "dg=="}}))
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, NS, named("b"))
        .await
        .unwrap();

    let mut watch = cluster
        .watch(&scope(Resource::Secret, None), &from)
        .await
        .unwrap();
    let first = next(&mut watch).await;
    let second = next(&mut watch).await;
    assert_eq!(
        kinds(&[first.clone(), second.clone()]),
        [WatchEventType::Modified, WatchEventType::Added]
    );
    assert_eq!(meta(&second.object, "name"), "b");
    // And it goes on live after the replay.
    cluster.delete(Resource::Secret, NS, "a").await.unwrap();
    assert_eq!(next(&mut watch).await.kind, WatchEventType::Deleted);
}

#[tokio::test]
async fn watch_from_a_compacted_version_is_gone() {
    let cluster = instant();
    let created = cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, NS, named("b"))
        .await
        .unwrap();
    cluster.compact();

    let stale = meta(&created, "resourceVersion").as_str().unwrap();
    let mut watch = cluster
        .watch(&scope(Resource::Secret, None), stale)
        .await
        .unwrap();
    let first = tokio::time::timeout(PATIENCE, watch.recv()).await.unwrap();
    let error = first.expect("one item").unwrap_err();
    assert_eq!(error.kind, ApiErrorKind::Gone);
    assert!(ended(&mut watch).await);

    // Listing again gives a version that can be watched from.
    let fresh = cluster
        .list(&scope(Resource::Secret, None))
        .await
        .unwrap()
        .resource_version;
    let mut watch = cluster
        .watch(&scope(Resource::Secret, None), &fresh)
        .await
        .unwrap();
    cluster.delete(Resource::Secret, NS, "b").await.unwrap();
    assert_eq!(next(&mut watch).await.kind, WatchEventType::Deleted);
}

#[tokio::test]
async fn history_is_bounded() {
    let cluster = MemoryCluster::new(MemoryClusterConfig {
        watch_history: 3,
        ..MemoryClusterConfig::instant()
    });
    for name in ["a", "b", "c", "d", "e"] {
        cluster
            .create(Resource::Secret, NS, named(name))
            .await
            .unwrap();
    }
    let mut too_old = cluster
        .watch(&scope(Resource::Secret, None), "1")
        .await
        .unwrap();
    let item = tokio::time::timeout(PATIENCE, too_old.recv())
        .await
        .unwrap();
    assert!(item.unwrap().is_err_and(|e| e.is(ApiErrorKind::Gone)));
    // a to e are versions 2 to 6 (an empty store is at 1); the history holds 4 to 6.
    let mut recent = cluster
        .watch(&scope(Resource::Secret, None), "3")
        .await
        .unwrap();
    assert_eq!(meta(&next(&mut recent).await.object, "name"), "c");
}

#[tokio::test]
async fn end_watches_ends_every_stream() {
    let cluster = instant();
    let mut one = cluster
        .watch(&scope(Resource::Secret, None), "")
        .await
        .unwrap();
    let mut two = cluster
        .watch(&scope(Resource::Pod, Some("a=b")), "")
        .await
        .unwrap();
    assert_eq!(cluster.open_watches(), 2);
    cluster.end_watches();
    assert!(ended(&mut one).await);
    assert!(ended(&mut two).await);
    assert_eq!(cluster.open_watches(), 0);
}

#[tokio::test]
async fn a_dropped_receiver_closes_its_watch() {
    let cluster = instant();
    let watch = cluster
        .watch(&scope(Resource::Secret, None), "")
        .await
        .unwrap();
    assert_eq!(cluster.open_watches(), 1);
    drop(watch);
    cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    assert_eq!(cluster.open_watches(), 0);
}

#[tokio::test]
async fn a_receiver_that_falls_behind_is_closed_not_waited_for() {
    let cluster = MemoryCluster::new(MemoryClusterConfig {
        watch_buffer: 2,
        ..MemoryClusterConfig::instant()
    });
    let mut slow = cluster
        .watch(&scope(Resource::Secret, None), "")
        .await
        .unwrap();
    for name in ["a", "b", "c", "d"] {
        cluster
            .create(Resource::Secret, NS, named(name))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while let Some(item) = slow.recv().await {
        seen.push(item.unwrap());
    }
    assert_eq!(seen.len(), 2);
    // Resuming from the last version seen catches up with the rest.
    let last = meta(&seen[1].object, "resourceVersion").as_str().unwrap();
    let mut resumed = cluster
        .watch(&scope(Resource::Secret, None), last)
        .await
        .unwrap();
    assert_eq!(meta(&next(&mut resumed).await.object, "name"), "c");
    assert_eq!(meta(&next(&mut resumed).await.object, "name"), "d");
}

#[tokio::test]
async fn watch_selector_turns_label_changes_into_added_and_deleted() {
    let cluster = instant();
    cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    let selector = Some("cubepod.io/sandbox=s");
    let mut watch = cluster
        .watch(&scope(Resource::Secret, selector), "")
        .await
        .unwrap();
    let label = |value: Value| json!({"metadata": {"labels": {"cubepod.io/sandbox": value}}});

    cluster
        .patch(Resource::Secret, NS, "a", label(json!("s")))
        .await
        .unwrap();
    cluster
        .patch(Resource::Secret, NS, "a", json!({"data": {"k": "dg=="}}))
        .await
        .unwrap();
    cluster
        .patch(Resource::Secret, NS, "a", label(json!("t")))
        .await
        .unwrap();
    cluster
        .patch(Resource::Secret, NS, "a", json!({"data": {"k": null}}))
        .await
        .unwrap();
    cluster
        .create(Resource::Secret, NS, named("unlabelled"))
        .await
        .unwrap();
    cluster
        .patch(Resource::Secret, NS, "a", label(json!("s")))
        .await
        .unwrap();

    let mut events = Vec::new();
    for _ in 0..4 {
        events.push(next(&mut watch).await);
    }
    use WatchEventType::*;
    assert_eq!(kinds(&events), [Added, Modified, Deleted, Added]);
    assert!(watch.try_recv().is_err());
}

#[tokio::test]
async fn watch_refuses_a_malformed_version() {
    let cluster = instant();
    let error = cluster
        .watch(&scope(Resource::Secret, None), "yesterday")
        .await
        .unwrap_err();
    assert_eq!(error.kind, ApiErrorKind::Invalid);
}

#[tokio::test]
async fn kubelet_starts_a_pod_after_its_delay() {
    let cluster = MemoryCluster::new(MemoryClusterConfig {
        pod_start_delay: Duration::from_millis(20),
        pod_stop_delay: Duration::from_millis(20),
        ..MemoryClusterConfig::default()
    });
    let mut watch = cluster
        .watch(&scope(Resource::Pod, None), "")
        .await
        .unwrap();
    let pod = json!({"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "prepare-rootfs", "image": "busybox"}],
        "containers": [{"name": "sandbox", "image": "busybox"}]}});
    let created = cluster.create(Resource::Pod, NS, pod).await.unwrap();
    assert_eq!(created["status"]["phase"], "Pending");
    assert_eq!(next(&mut watch).await.kind, WatchEventType::Added);

    let started = next_of(&mut watch, WatchEventType::Modified).await;
    let status = &started.object["status"];
    assert_eq!(status["phase"], "Running");
    let ip: std::net::Ipv4Addr = status["podIP"].as_str().unwrap().parse().unwrap();
    assert_eq!(ip.octets()[..2], [10, 244]);
    let condition = |kind: &str| {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    };
    assert!(condition("Ready") && condition("ContainersReady"));
    assert_eq!(status["containerStatuses"][0]["ready"], true);

    // A pod stops: deletionTimestamp first, gone after the stop delay.
    cluster.delete(Resource::Pod, NS, "p").await.unwrap();
    let stopping = next(&mut watch).await;
    assert_eq!(stopping.kind, WatchEventType::Modified);
    assert!(meta(&stopping.object, "deletionTimestamp").is_string());
    assert!(cluster.get(Resource::Pod, NS, "p").await.is_ok());
    let deleted = next(&mut watch).await;
    assert_eq!(deleted.kind, WatchEventType::Deleted);
    assert_eq!(cluster.count(Resource::Pod), 0);
}

#[tokio::test]
async fn instant_kubelet_runs_pods_within_the_create_call() {
    let cluster = instant();
    cluster.create(Resource::Pod, NS, named("a")).await.unwrap();
    cluster.create(Resource::Pod, NS, named("b")).await.unwrap();
    let a = cluster.get(Resource::Pod, NS, "a").await.unwrap();
    let b = cluster.get(Resource::Pod, NS, "b").await.unwrap();
    assert_eq!(a["status"]["phase"], "Running");
    assert_ne!(a["status"]["podIP"], b["status"]["podIP"]);
    cluster.delete(Resource::Pod, NS, "a").await.unwrap();
    assert_eq!(cluster.count(Resource::Pod), 1);
}

#[tokio::test]
async fn a_recreated_pod_is_a_new_pod_to_the_kubelet() {
    let cluster = MemoryCluster::new(MemoryClusterConfig {
        pod_start_delay: Duration::from_millis(30),
        pod_stop_delay: Duration::ZERO,
        ..MemoryClusterConfig::default()
    });
    let mut watch = cluster
        .watch(&scope(Resource::Pod, None), "")
        .await
        .unwrap();
    let old = cluster.create(Resource::Pod, NS, named("p")).await.unwrap();
    cluster.delete(Resource::Pod, NS, "p").await.unwrap();
    let new = cluster.create(Resource::Pod, NS, named("p")).await.unwrap();
    assert_ne!(meta(&old, "uid"), meta(&new, "uid"));
    let started = next_of(&mut watch, WatchEventType::Modified).await;
    assert_eq!(meta(&started.object, "uid"), meta(&new, "uid"));
    assert_eq!(started.object["status"]["phase"], "Running");
}

#[tokio::test]
async fn pending_kubelet_work_outlives_no_dropped_cluster() {
    let cluster = MemoryCluster::new(MemoryClusterConfig {
        pod_start_delay: Duration::from_millis(10),
        ..MemoryClusterConfig::default()
    });
    cluster.create(Resource::Pod, NS, named("p")).await.unwrap();
    drop(cluster);
    // The timer fires on a dropped cluster: nothing to do, nothing to panic about.
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn claims_are_bound_at_once() {
    let cluster = instant();
    let claim = json!({"metadata": {"name": "s-workspace"}, "spec": {
        "volumeMode": "Block", "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Gi"}}}});
    let created = cluster
        .create(Resource::PersistentVolumeClaim, NS, claim)
        .await
        .unwrap();
    assert_eq!(created["status"]["phase"], "Bound");
    assert_eq!(created["status"]["capacity"]["storage"], "10Gi");
}

#[tokio::test]
async fn secret_string_data_is_stored_base64_in_data() {
    let cluster = instant();
    let secret = json!({"metadata": {"name": "s-credentials"},
        "stringData": {"token": "s3cret"}});
    let created = cluster.create(Resource::Secret, NS, secret).await.unwrap();
    assert_eq!(created["data"]["token"], "czNjcmV0");
    assert!(created.get("stringData").is_none());
    let patched = cluster
        .patch(
            Resource::Secret,
            NS,
            "s-credentials",
            json!({"stringData": {"other": "x"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        patched["data"],
        json!({"token": "czNjcmV0", "other": "eA=="})
    );
}

#[tokio::test]
async fn writes_are_logged_per_request() {
    let cluster = instant();
    cluster
        .insert(Resource::Sandbox, sandbox_in_ns("seeded"))
        .unwrap();
    assert!(cluster.writes().is_empty(), "seeding is not a client write");

    cluster
        .create(Resource::Secret, NS, named("a"))
        .await
        .unwrap();
    let _ = cluster.create(Resource::Secret, NS, named("a")).await;
    cluster
        .patch(
            Resource::Secret,
            NS,
            "a",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await
        .unwrap();
    cluster
        .patch_status(
            Resource::Sandbox,
            NS,
            "seeded",
            json!({"status": {"phase": "Running"}}),
        )
        .await
        .unwrap();
    cluster.delete(Resource::Secret, NS, "a").await.unwrap();
    cluster.get(Resource::Sandbox, NS, "seeded").await.unwrap();

    let writes = cluster.writes();
    let verbs: Vec<&str> = writes.iter().map(|w| w.verb.as_str()).collect();
    assert_eq!(
        verbs,
        ["create", "create", "patch", "patch_status", "delete"]
    );
    assert!(writes[0].verb == "create" && writes[0].error.is_none());
    assert_eq!(writes[1].error, Some(ApiErrorKind::AlreadyExists));
    assert_eq!(writes[3].verb, WriteVerb::PatchStatus);
    assert_eq!(
        (
            writes[3].resource,
            writes[3].namespace.as_str(),
            writes[3].name.as_str()
        ),
        (Resource::Sandbox, NS, "seeded")
    );
    cluster.clear_writes();
    assert!(cluster.writes().is_empty());
}

fn sandbox_in_ns(name: &str) -> Value {
    let mut object = sandbox(name);
    object["metadata"]["namespace"] = json!(NS);
    object
}

#[tokio::test]
async fn insert_behaves_like_create() {
    let cluster = instant();
    let stored = cluster
        .insert(Resource::Sandbox, sandbox_in_ns("s"))
        .unwrap();
    assert_eq!(meta(&stored, "generation"), 1);
    assert!(meta(&stored, "uid").is_string());
    let again = cluster
        .insert(Resource::Sandbox, sandbox_in_ns("s"))
        .unwrap_err();
    assert_eq!(again.kind, ApiErrorKind::AlreadyExists);
    let defaulted = cluster.insert(Resource::Secret, named("d")).unwrap();
    assert_eq!(meta(&defaulted, "namespace"), "default");
    assert_eq!(cluster.objects(Resource::Sandbox).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_get_one_ordered_history() {
    let cluster = instant();
    let mut watch = cluster
        .watch(&scope(Resource::Secret, None), "")
        .await
        .unwrap();
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let cluster = Arc::clone(&cluster);
            tokio::spawn(async move {
                let name = format!("w{writer}");
                cluster
                    .create(Resource::Secret, NS, named(&name))
                    .await
                    .unwrap();
                for step in 0..25 {
                    let patch = json!({"metadata": {"labels": {"step": step.to_string()}}});
                    cluster
                        .patch(Resource::Secret, NS, &name, patch)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut versions = Vec::new();
    for _ in 0..4 * 26 {
        versions.push(rv(&next(&mut watch).await.object));
    }
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    assert_eq!(
        versions.last().unwrap().to_string(),
        cluster.resource_version()
    );
}

#[tokio::test]
async fn a_paginated_list_shows_every_object_once_at_the_first_pages_version() {
    let cluster = instant();
    for name in ["a", "b", "c", "d", "e"] {
        cluster
            .create(Resource::Secret, NS, named(name))
            .await
            .unwrap();
    }
    let scope = scope(Resource::Secret, None);
    let mut page = PageRequest {
        limit: 2,
        continue_token: None,
    };
    let mut names = Vec::new();
    let mut versions = Vec::new();
    loop {
        let list = cluster.list_page(&scope, &page).await.unwrap();
        assert!(list.items.len() <= 2);
        names.extend(list.items.iter().map(|o| meta(o, "name").clone()));
        versions.push(list.resource_version.clone());
        if names.len() == 2 {
            // Written between two pages: listed by the next page (it sorts last), and a
            // watch from the snapshot's version shows it too.
            cluster
                .create(Resource::Secret, NS, named("f"))
                .await
                .unwrap();
        }
        match list.continue_token {
            Some(token) => page.continue_token = Some(token),
            None => break,
        }
    }
    assert_eq!(names, ["a", "b", "c", "d", "e", "f"]);
    assert!(versions.iter().all(|v| *v == versions[0]), "{versions:?}");
    let mut watch = cluster.watch(&scope, &versions[0]).await.unwrap();
    let added = next(&mut watch).await;
    assert_eq!(meta(&added.object, "name"), "f");

    let bad = PageRequest {
        limit: 2,
        continue_token: Some("not-a-token".into()),
    };
    let error = cluster.list_page(&scope, &bad).await.unwrap_err();
    assert_eq!(error.kind, ApiErrorKind::Invalid);
}
