//! `events.k8s.io/v1` Events: the same objects as core/v1 Events, stored once and converted
//! on the way in and out as the API server converts them (`note` is `message`, `regarding` is
//! `involvedObject`, `reportingController` is `reportingComponent`, the `deprecated*` fields
//! are the core ones without the prefix).

use serde_json::{Map, Value};

/// The group version served beside core/v1 for Events.
pub(crate) const GROUP_VERSION: &str = "events.k8s.io/v1";

/// (events.k8s.io/v1 name, core/v1 name) of each field that differs.
const RENAMED: [(&str, &str); 7] = [
    ("note", "message"),
    ("regarding", "involvedObject"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether a request path addresses the events.k8s.io/v1 API.
pub(crate) fn is_path(path: &str) -> bool {
    path.strip_prefix("/apis/")
        .is_some_and(|rest| rest == GROUP_VERSION || rest.starts_with("events.k8s.io/v1/"))
}

/// A core/v1 Event as events.k8s.io/v1 reads it.
pub(crate) fn from_core(event: &Value) -> Value {
    let Some(fields) = event.as_object() else {
        return event.clone();
    };
    let mut out = Map::new();
    for (key, value) in fields {
        let name = RENAMED
            .iter()
            .find(|(_, core)| core == key)
            .map_or(key.as_str(), |(v1, _)| v1);
        out.insert(name.to_owned(), value.clone());
    }
    out.insert("apiVersion".into(), GROUP_VERSION.into());
    Value::Object(out)
}

/// An events.k8s.io/v1 Event, or a merge patch of one, as core/v1 stores it: in place.
pub(crate) fn to_core(event: &mut Value) {
    let Some(fields) = event.as_object_mut() else {
        return;
    };
    for (v1, core) in RENAMED {
        if let Some(value) = fields.remove(v1) {
            fields.insert(core.to_owned(), value);
        }
    }
    if fields.contains_key("apiVersion") {
        fields.insert("apiVersion".into(), "v1".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_renamed_both_ways() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "message": "m", "involvedObject": {"kind": "Pod", "name": "p"},
            "reportingComponent": "c", "count": 2, "reason": "R",
            "eventTime": "2026-01-01T00:00:00.000000Z"});
        let v1 = from_core(&core);
        assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v1["note"], "m");
        assert_eq!(v1["regarding"]["name"], "p");
        assert_eq!(v1["reportingController"], "c");
        assert_eq!(v1["deprecatedCount"], 2);
        assert_eq!(v1["reason"], "R");
        assert!(v1.get("message").is_none());
        let mut back = v1;
        to_core(&mut back);
        assert_eq!(back, core);
        assert!(is_path("/apis/events.k8s.io/v1/namespaces/a/events"));
        assert!(is_path("/apis/events.k8s.io/v1"));
        assert!(!is_path("/api/v1/namespaces/a/events"));
    }
}
