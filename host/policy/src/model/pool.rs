//! `PodWarmPool` objects as the contract's `warm-pool` record.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::meta::Meta;
use super::status::{ConditionJson, condition_from_json, condition_to_json};
use super::{ModelError, sandbox};
use crate::runtime::bindings::{UpdateStrategy, WarmPool, WarmPoolSpec, WarmPoolStatus};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    #[serde(default)]
    replicas: u32,
    #[serde(default)]
    ready_replicas: u32,
    #[serde(default)]
    observed_generation: i64,
    #[serde(default)]
    conditions: Vec<ConditionJson>,
}

/// A `PodWarmPool` object as the contract's `warm-pool`, or what is wrong with it.
pub fn from_json(object: &Value) -> Result<WarmPool, ModelError> {
    let meta = Meta::read(object);
    let fail = |field: &str, problem: String| ModelError {
        kind: "PodWarmPool",
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        field: field.to_string(),
        problem,
    };
    let spec = object
        .get("spec")
        .ok_or_else(|| fail("spec", "missing".to_string()))?;
    let replicas = match spec.get("replicas") {
        None => 0,
        Some(r) => r
            .as_u64()
            .and_then(|r| u32::try_from(r).ok())
            .ok_or_else(|| fail("spec.replicas", format!("{r} is not a count")))?,
    };
    let template = sandbox::spec_from_json_value(spec.get("template"), &|field, problem| {
        let field = if field.is_empty() {
            "spec.template".to_string()
        } else {
            field.replacen("spec", "spec.template", 1)
        };
        fail(&field, problem)
    })?;
    let update_strategy = match spec.get("updateStrategy").map(|s| s.as_str()) {
        None | Some(Some("Recreate")) => UpdateStrategy::Recreate,
        Some(Some("OnReplenish")) => UpdateStrategy::OnReplenish,
        Some(other) => {
            return Err(fail(
                "spec.updateStrategy",
                format!(
                    "{} is neither \"Recreate\" nor \"OnReplenish\"",
                    other.unwrap_or("a non-string value")
                ),
            ));
        }
    };
    let status: StatusJson = object
        .get("status")
        .and_then(|s| StatusJson::deserialize(s).ok())
        .unwrap_or_default();
    Ok(WarmPool {
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        generation: meta.generation,
        spec: WarmPoolSpec {
            replicas,
            template,
            update_strategy,
        },
        status: status_from_json(&status),
    })
}

fn status_from_json(status: &StatusJson) -> WarmPoolStatus {
    WarmPoolStatus {
        replicas: status.replicas,
        ready_replicas: status.ready_replicas,
        observed_generation: status.observed_generation,
        conditions: status.conditions.iter().map(condition_from_json).collect(),
    }
}

/// The label selector of a pool's members: the scale subresource's `status.selector`.
pub(crate) fn selector(pool: &str) -> String {
    format!("{}={pool}", super::names::POOL_LABEL)
}

/// The whole `status` of pool `name` as a merge patch.
pub fn status_patch(name: &str, status: &WarmPoolStatus, generation: i64) -> Value {
    let conditions: Vec<ConditionJson> = status
        .conditions
        .iter()
        .map(|c| condition_to_json(c, generation))
        .collect();
    json!({
        "status": {
            "replicas": status.replicas,
            "readyReplicas": status.ready_replicas,
            "selector": selector(name),
            // The names of contract 0.1's status, kept for the readers of v1alpha1 objects
            // that predate the scale subresource (dashboards, scripts, printer columns).
            "members": status.replicas,
            "ready": status.ready_replicas,
            "observedGeneration": status.observed_generation,
            "conditions": conditions,
        }
    })
}

/// The pool's record of its members (`status.memberUIDs`): the Sandboxes the controller
/// created for it, by name, with their uid. A pool with no status yet has none (an empty
/// record); `None` when a status an earlier controller wrote has no record at all.
pub fn member_uids(object: &Value) -> Option<BTreeMap<String, String>> {
    let status = object.get("status").and_then(Value::as_object);
    let Some(record) = status.and_then(|s| s.get(MEMBER_UIDS)) else {
        let written = status.is_some_and(|s| s.contains_key("observedGeneration"));
        return (!written).then(BTreeMap::new);
    };
    Some(
        record
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(name, uid)| Some((name.clone(), uid.as_str()?.to_string())))
            .collect(),
    )
}

/// The field of a pool's status that records its members.
pub const MEMBER_UIDS: &str = "memberUIDs";

/// What `patch` (the [`status_patch`] of `status`) reads back as once written.
pub fn read_back(patch: &Value, status: &WarmPoolStatus) -> WarmPoolStatus {
    match patch.get("status").map(StatusJson::deserialize) {
        Some(Ok(s)) => status_from_json(&s),
        _ => status.clone(),
    }
}
