//! Warm pools: fill to `replicas`, never over-create while creates are in flight, cap, refill.

use cubepod_policy_sdk::bindings::ConditionStatus;
use cubepod_policy_sdk::fixtures::{member, pool, pool_input};
use cubepod_policy_sdk::pool::reconcile_pool;
use cubepod_policy_sdk::status;

fn names(list: &[cubepod_policy_sdk::bindings::MemberCreate]) -> Vec<&str> {
    list.iter().map(|m| m.name.as_str()).collect()
}

#[test]
fn an_empty_pool_creates_its_members_from_the_template() {
    let out = reconcile_pool(&pool_input(pool("py", 3), vec![]));
    assert_eq!(names(&out.create), ["py-0", "py-1", "py-2"]);
    let manifest: serde_json::Value = serde_json::from_str(&out.create[0].manifest).unwrap();
    assert_eq!(manifest["kind"], "Sandbox");
    assert_eq!(manifest["metadata"]["labels"]["cubepod.io/pool"], "py");
    assert_eq!(
        manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "cubepod-controller"
    );
    assert_eq!(
        manifest["metadata"]["ownerReferences"][0]["kind"],
        "PodWarmPool"
    );
    assert_eq!(
        manifest["spec"]["image"],
        "ghcr.io/cubepod/sandbox-python:3.12"
    );
    assert_eq!(manifest["spec"]["storage"]["rootfsSize"], "10Gi");
    assert_eq!(out.status.ready_replicas, 0);
}

#[test]
fn members_still_starting_count_so_nothing_is_created_or_deleted_twice() {
    let members = vec![
        member("py-0", false),
        member("py-1", false),
        member("py-2", true),
    ];
    let out = reconcile_pool(&pool_input(pool("py", 3), members));
    assert!(out.create.is_empty());
    assert!(out.delete.is_empty());
    assert_eq!(out.status.ready_replicas, 1);
    assert_eq!(out.status.replicas, 3);
    let ready = status::condition(&out.status.conditions, "Ready").unwrap();
    assert_eq!(ready.status, ConditionStatus::False);
}

#[test]
fn creates_not_yet_seen_are_chosen_again_under_the_same_names() {
    // Two passes before the cache shows the first pass's creates: the same names, so the
    // second pass meets AlreadyExists instead of making extra members.
    let first = reconcile_pool(&pool_input(pool("py", 2), vec![]));
    let second = reconcile_pool(&pool_input(pool("py", 2), vec![]));
    assert_eq!(names(&first.create), names(&second.create));
}

#[test]
fn a_claimed_member_leaves_the_pool_and_is_replaced_under_a_new_name() {
    let mut claimed = member("py-0", true);
    claimed.claimed = true;
    let members = vec![claimed, member("py-1", true), member("py-2", true)];
    let out = reconcile_pool(&pool_input(pool("py", 3), members));
    assert_eq!(names(&out.create), ["py-3"]);
    assert_eq!(out.status.ready_replicas, 2);
}

#[test]
fn scale_down_deletes_unready_then_newest_members() {
    let members = vec![
        member("py-0", true),
        member("py-1", true),
        member("py-2", false),
        member("py-10", true),
    ];
    let out = reconcile_pool(&pool_input(pool("py", 2), members));
    assert_eq!(out.delete, ["py-2", "py-10"]);
    assert!(out.create.is_empty());
    // Ready counts the members kept, never more than asked for.
    let ready = status::condition(&out.status.conditions, "Ready").unwrap();
    assert_eq!(ready.status, ConditionStatus::True);
    assert_eq!(ready.message, "2 of 2 members ready; 1 more being deleted");
}

#[test]
fn replicas_above_the_cap_are_capped_and_reported_once() {
    let mut input = pool_input(pool("py", 500), vec![]);
    input.max_replicas = 4;
    let out = reconcile_pool(&input);
    assert_eq!(out.create.len(), 4);
    let capped = status::condition(&out.status.conditions, "ReplicasCapped").unwrap();
    assert_eq!(capped.status, ConditionStatus::True);
    assert!(capped.message.contains("--max-pool-replicas"));
    assert_eq!(
        out.events
            .iter()
            .filter(|e| e.reason == "ReplicasCapped")
            .count(),
        1
    );

    input.pool.status = out.status.clone();
    let again = reconcile_pool(&input);
    assert_eq!(
        again
            .events
            .iter()
            .filter(|e| e.reason == "ReplicasCapped")
            .count(),
        0
    );
}

#[test]
fn an_invalid_template_creates_nothing() {
    let mut bad = pool("py", 3);
    bad.spec.template.image = String::new();
    let out = reconcile_pool(&pool_input(bad, vec![]));
    assert!(out.create.is_empty());
    let valid = status::condition(&out.status.conditions, "SpecValid").unwrap();
    assert_eq!(valid.reason, "ImageMissing");
    assert!(valid.message.contains("spec.template.image"));
}

/// Members made from another template: replaced at once under Recreate (the fresh ones come
/// in the same pass), kept under OnReplenish.
#[test]
fn stale_members_follow_the_update_strategy() {
    use cubepod_policy_sdk::bindings::UpdateStrategy;
    use cubepod_policy_sdk::pool::template_hash;
    let mut changed = pool("py", 2);
    changed.spec.template.image = "ghcr.io/cubepod/sandbox-python:3.13".to_string();
    let members = vec![member("py-0", true), member("py-1", true)];

    let out = reconcile_pool(&pool_input(changed.clone(), members.clone()));
    assert_eq!(out.delete, ["py-0", "py-1"]);
    assert_eq!(names(&out.create), ["py-2", "py-3"]);
    let manifest: serde_json::Value = serde_json::from_str(&out.create[0].manifest).unwrap();
    assert_eq!(
        manifest["metadata"]["labels"]["cubepod.io/template-hash"],
        template_hash(&changed.spec.template).as_str()
    );
    assert_eq!(
        manifest["spec"]["image"],
        "ghcr.io/cubepod/sandbox-python:3.13"
    );

    changed.spec.update_strategy = UpdateStrategy::OnReplenish;
    let out = reconcile_pool(&pool_input(changed.clone(), members.clone()));
    assert!(out.delete.is_empty() && out.create.is_empty(), "{out:?}");
    // Once one is claimed, the refill is made from the new template.
    let mut claimed = members;
    claimed[0].claimed = true;
    let out = reconcile_pool(&pool_input(changed.clone(), claimed));
    assert_eq!(names(&out.create), ["py-2"]);
    assert!(out.create[0].manifest.contains("3.13"));
}

#[test]
fn the_template_hash_is_a_stable_label_value_that_tells_templates_apart() {
    use cubepod_policy_sdk::pool::template_hash;
    let template = pool("py", 1).spec.template;
    let hash = template_hash(&template);
    assert_eq!(hash, template_hash(&template.clone()));
    assert_eq!(hash.len(), 16);
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
    let mut other = template;
    other.rootfs_generation += 1;
    assert_ne!(template_hash(&other), hash);
}
