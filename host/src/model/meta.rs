//! The `metadata` fields the controller reads.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub generation: i64,
    #[serde(default)]
    pub resource_version: String,
    pub deletion_timestamp: Option<String>,
    pub creation_timestamp: Option<String>,
    #[serde(default)]
    pub finalizers: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Meta {
    pub fn read(object: &serde_json::Value) -> Meta {
        object
            .get("metadata")
            .and_then(|m| Meta::deserialize(m).ok())
            .unwrap_or_default()
    }
}
