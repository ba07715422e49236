//! `status` of our resources: conditions in the metav1.Condition shape, timestamps in RFC 3339.

use serde::{Deserialize, Serialize};

use super::time;
use crate::runtime::bindings::{Condition, ConditionStatus};

/// A condition in the metav1.Condition shape, as `status.conditions` holds it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionJson {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) reason: String,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) observed_generation: Option<i64>,
}

pub(crate) fn condition_from_json(c: &ConditionJson) -> Condition {
    Condition {
        kind: c.kind.clone(),
        status: match c.status.as_str() {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        },
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_transition_time: time::parse(&c.last_transition_time).unwrap_or(0),
    }
}

/// The contract's condition `c` as written, observed at `generation`.
pub fn condition_to_json(c: &Condition, generation: i64) -> ConditionJson {
    ConditionJson {
        kind: c.kind.clone(),
        status: match c.status {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
        .to_string(),
        // metav1.Condition requires a CamelCase reason.
        reason: if c.reason.is_empty() {
            "Unknown".to_string()
        } else {
            c.reason.clone()
        },
        message: c.message.clone(),
        last_transition_time: time::format(c.last_transition_time),
        observed_generation: Some(generation),
    }
}
