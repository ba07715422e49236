//! The `metadata` fields the controller reads.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// An object's `metadata`, owned: what the controller keeps of it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// `metadata.name`.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub(crate) namespace: String,
    /// `metadata.uid`.
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub(crate) generation: i64,
    /// `metadata.resourceVersion`.
    #[serde(default)]
    pub resource_version: String,
    /// `metadata.deletionTimestamp`: set once the object is being deleted.
    pub deletion_timestamp: Option<String>,
    pub(crate) creation_timestamp: Option<String>,
    /// `metadata.finalizers`.
    #[serde(default)]
    pub finalizers: Vec<String>,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) owner_references: Vec<OwnerReference>,
}

/// One of `metadata.ownerReferences`: what the controller reads of it.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct OwnerReference {
    #[serde(default)]
    pub(crate) uid: String,
    #[serde(default)]
    pub(crate) controller: bool,
}

impl Meta {
    /// The `metadata` of an object (empty where it has none or it does not parse).
    pub fn read(object: &serde_json::Value) -> Meta {
        object
            .get("metadata")
            .and_then(|m| Meta::deserialize(m).ok())
            .unwrap_or_default()
    }

    /// The uid of the controller reference, if there is one.
    pub(crate) fn controller_uid(&self) -> Option<&str> {
        self.owner_references
            .iter()
            .find(|o| o.controller)
            .map(|o| o.uid.as_str())
    }
}

/// The `metadata` fields read in place, borrowed from the object: nothing copied. Every
/// watch event and write answer is read through one of these on its way into the cache (a
/// [`Meta`] copies every label and annotation); [`Meta`] is for what keeps its fields.
/// Each field is read on its own: one of the wrong type reads as absent.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaView<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// `metadata.resourceVersion`.
    pub resource_version: &'a str,
    /// `deletionTimestamp` is set.
    pub deleting: bool,
    labels: Option<&'a Map<String, Value>>,
    annotations: Option<&'a Map<String, Value>>,
}

impl<'a> MetaView<'a> {
    /// The `metadata` of an object, borrowed (empty where it has none).
    pub fn of(object: &'a Value) -> Self {
        let Some(meta) = object.get("metadata").and_then(Value::as_object) else {
            return Self::default();
        };
        // One walk over the keys rather than a tree search per field: every event and answer
        // comes through here (23 views per new sandbox).
        let mut view = Self::default();
        for (key, value) in meta {
            match key.as_str() {
                "name" => view.name = value.as_str().unwrap_or(""),
                "namespace" => view.namespace = value.as_str().unwrap_or(""),
                "resourceVersion" => view.resource_version = value.as_str().unwrap_or(""),
                "deletionTimestamp" => view.deleting = !value.is_null(),
                "labels" => view.labels = value.as_object(),
                "annotations" => view.annotations = value.as_object(),
                _ => {}
            }
        }
        view
    }

    /// The value of label `key`, if the object carries it.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels?.get(key)?.as_str()
    }

    pub(crate) fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations?.get(key)?.as_str()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_view_reads_what_meta_reads_without_copying() {
        let object = json!({"metadata": {
            "name": "a", "namespace": "ns", "resourceVersion": "7",
            "deletionTimestamp": "2026-12-01T00:00:00Z",
            "labels": {"cubepod.io/sandbox": "s"},
            "annotations": {"cubepod.io/spec-hash": "h"},
        }});
        let view = MetaView::of(&object);
        let meta = Meta::read(&object);
        assert_eq!(
            (view.name, view.namespace, view.resource_version),
            (
                meta.name.as_str(),
                meta.namespace.as_str(),
                meta.resource_version.as_str()
            )
        );
        assert_eq!(view.deleting, meta.deletion_timestamp.is_some());
        assert_eq!(view.label("cubepod.io/sandbox"), Some("s"));
        assert_eq!(view.annotation("cubepod.io/spec-hash"), Some("h"));
        assert_eq!(view.label("other"), None);
    }

    #[test]
    fn a_field_of_the_wrong_type_reads_as_absent_and_only_it() {
        let object = json!({"metadata": {
            "name": "a", "resourceVersion": 7, "deletionTimestamp": null,
            "labels": {"cubepod.io/sandbox": 3, "team": "x"},
        }});
        let view = MetaView::of(&object);
        assert_eq!(view.name, "a");
        assert_eq!(view.resource_version, "");
        assert!(!view.deleting);
        assert_eq!(view.label("cubepod.io/sandbox"), None);
        assert_eq!(view.label("team"), Some("x"));
        assert_eq!(MetaView::of(&json!("not an object")).name, "");
    }
}
