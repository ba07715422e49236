//! `PodWarmPool` objects as the contract's `warm-pool` record.

use serde::Deserialize;
use serde_json::{Value, json};

use super::meta::Meta;
use super::status::{ConditionJson, condition_from_json, condition_to_json};
use super::{ModelError, sandbox};
use crate::runtime::bindings::{WarmPool, WarmPoolSpec, WarmPoolStatus};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    #[serde(default)]
    ready: u32,
    #[serde(default)]
    members: u32,
    #[serde(default)]
    observed_generation: i64,
    #[serde(default)]
    conditions: Vec<ConditionJson>,
}

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
    let status: StatusJson = object
        .get("status")
        .and_then(|s| StatusJson::deserialize(s).ok())
        .unwrap_or_default();
    Ok(WarmPool {
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        generation: meta.generation,
        spec: WarmPoolSpec { replicas, template },
        status: status_from_json(&status),
    })
}

fn status_from_json(status: &StatusJson) -> WarmPoolStatus {
    WarmPoolStatus {
        ready: status.ready,
        members: status.members,
        observed_generation: status.observed_generation,
        conditions: status.conditions.iter().map(condition_from_json).collect(),
    }
}

pub fn status_patch(status: &WarmPoolStatus, generation: i64) -> Value {
    let conditions: Vec<ConditionJson> = status
        .conditions
        .iter()
        .map(|c| condition_to_json(c, generation))
        .collect();
    json!({
        "status": {
            "ready": status.ready,
            "members": status.members,
            "observedGeneration": status.observed_generation,
            "conditions": conditions,
        }
    })
}

/// `status` as it reads back once `status_patch` wrote it (see `sandbox::as_written`).
pub fn as_written(status: &WarmPoolStatus, generation: i64) -> WarmPoolStatus {
    read_back(&status_patch(status, generation), status)
}

/// What `patch` (the [`status_patch`] of `status`) reads back as once written.
pub fn read_back(patch: &Value, status: &WarmPoolStatus) -> WarmPoolStatus {
    match patch.get("status").map(StatusJson::deserialize) {
        Some(Ok(s)) => status_from_json(&s),
        _ => status.clone(),
    }
}
