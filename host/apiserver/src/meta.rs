//! Reading and writing the `metadata` of Kubernetes JSON objects, and the values the API server
//! generates for it (uids, timestamps).

use serde_json::{Map, Value};

/// The fields only the API server sets: a client's value is ignored on every write.
pub(crate) const SYSTEM_FIELDS: [&str; 8] = [
    "uid",
    "name",
    "namespace",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
];

pub(crate) fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata")?.as_object()
}

fn str_field<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    metadata(object)?.get(field)?.as_str()
}

pub(crate) fn name(object: &Value) -> Option<&str> {
    str_field(object, "name")
}

pub(crate) fn namespace(object: &Value) -> Option<&str> {
    str_field(object, "namespace")
}

pub(crate) fn uid(object: &Value) -> Option<&str> {
    str_field(object, "uid")
}

pub(crate) fn resource_version(object: &Value) -> Option<&str> {
    str_field(object, "resourceVersion")
}

pub(crate) fn labels(object: &Value) -> Option<&Map<String, Value>> {
    metadata(object)?.get("labels")?.as_object()
}

pub(crate) fn finalizers(object: &Value) -> Vec<&str> {
    metadata(object)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(crate) fn is_deleting(object: &Value) -> bool {
    metadata(object)
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null())
}

/// The uids named by `metadata.ownerReferences`.
pub(crate) fn owner_uids(object: &Value) -> Vec<&str> {
    metadata(object)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| refs.iter().filter_map(|r| r.get("uid")?.as_str()).collect())
        .unwrap_or_default()
}

/// The object as a map, made one if it was not (callers hold validated objects).
pub(crate) fn object_mut(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("the value was just made an object"),
    }
}

pub(crate) fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    let entry = object_mut(object)
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    object_mut(entry)
}

pub(crate) fn set(object: &mut Value, field: &str, value: impl Into<Value>) {
    metadata_mut(object).insert(field.to_owned(), value.into());
}

/// A random RFC 4122 version 4 uid, as the API server makes.
pub(crate) fn new_uid() -> String {
    let bits: u128 = rand::random();
    let bits = (bits & !(0xf << 76)) | (0x4 << 76);
    let bits = (bits & !(0x3 << 62)) | (0x2 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        bits >> 96,
        (bits >> 80) & 0xffff,
        (bits >> 64) & 0xffff,
        (bits >> 48) & 0xffff,
        bits & 0xffff_ffff_ffff
    )
}

/// Now, in the API's timestamp format (RFC 3339, UTC, whole seconds).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uid_is_a_version_4_uuid() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert!(matches!(&uid[19..20], "8" | "9" | "a" | "b"), "{uid}");
        assert_ne!(new_uid(), uid);
    }

    #[test]
    fn now_parses_as_rfc3339() {
        let stamp = now();
        assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
        assert!(stamp.ends_with('Z'));
    }

    #[test]
    fn accessors_tolerate_missing_fields() {
        let bare = json!({});
        assert_eq!(name(&bare), None);
        assert!(finalizers(&bare).is_empty());
        assert!(!is_deleting(&bare));
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["a", "b"], "ownerReferences": [{"uid": "u1"}, {"name": "x"}]}});
        assert!(is_deleting(&deleting));
        assert_eq!(finalizers(&deleting), ["a", "b"]);
        assert_eq!(owner_uids(&deleting), ["u1"]);
    }

    #[test]
    fn set_creates_metadata() {
        let mut object = json!({"kind": "Pod"});
        set(&mut object, "name", "a");
        assert_eq!(name(&object), Some("a"));
    }
}
