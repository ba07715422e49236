//! Objects written in the order the API server writes them. A built-in kind is a Go struct
//! there, so its JSON starts with `kind`, `apiVersion` and `metadata`, and its metadata with
//! `name`, `namespace`, `uid` and `resourceVersion` (ObjectMeta's field order); a custom
//! resource is a map, written with its keys sorted. A client may rely on neither, but one that
//! reads only an object's identity (the controller's echo peek) stops early against a real API
//! server, and should here too: served with every key sorted, a Pod's labels, annotations and
//! owner references came before its `resourceVersion`.
//!
//! Only the first keys are placed: the rest of an object, and its metadata's remaining keys,
//! stay sorted, which is what the cluster stores.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

/// The groups of Kubernetes' own kinds (`""` is the core group): every other group is a
/// custom resource's.
const BUILT_IN_GROUPS: [&str; 22] = [
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "meta.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

/// TypeMeta, then ObjectMeta (or ListMeta), as a built-in kind's struct declares them.
const TYPED_FIRST: [&str; 3] = ["kind", "apiVersion", "metadata"];

/// ObjectMeta's fields in its declaration order; ListMeta's `resourceVersion` is among them.
const META_FIRST: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// A response document or watch event's object, serialized in the API server's order; a list's
/// `items` each in their own kind's order.
pub(crate) struct InApiOrder<'a>(pub(crate) &'a Value);

impl Serialize for InApiOrder<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(serializer);
        };
        let typed = fields
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(built_in);
        let first: &[&str] = if typed { &TYPED_FIRST } else { &[] };
        write_object(serializer, fields, first, |key, value| match key {
            "metadata" if typed => Nested::Meta(value),
            "items" => Nested::Items(value),
            _ => Nested::Plain(value),
        })
    }
}

/// Whether `api_version` (`v1`, `group/version`) names one of Kubernetes' own groups.
fn built_in(api_version: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    BUILT_IN_GROUPS.contains(&group)
}

/// How a member's value is written.
enum Nested<'a> {
    Plain(&'a Value),
    Meta(&'a Value),
    Items(&'a Value),
}

impl Serialize for Nested<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            Nested::Plain(value) => value.serialize(serializer),
            Nested::Meta(Value::Object(fields)) => {
                write_object(serializer, fields, &META_FIRST, |_, value| {
                    Nested::Plain(value)
                })
            }
            Nested::Items(Value::Array(items)) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&InApiOrder(item))?;
                }
                seq.end()
            }
            Nested::Meta(value) | Nested::Items(value) => value.serialize(serializer),
        }
    }
}

/// `fields` with the keys of `first` that it has, in that order, then the rest as stored.
fn write_object<'v, S: Serializer>(
    serializer: S,
    fields: &'v Map<String, Value>,
    first: &[&str],
    nested: impl Fn(&str, &'v Value) -> Nested<'v>,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(fields.len()))?;
    for key in first {
        if let Some(value) = fields.get(*key) {
            map.serialize_entry(key, &nested(key, value))?;
        }
    }
    for (key, value) in fields {
        if !first.contains(&key.as_str()) {
            map.serialize_entry(key, &nested(key, value))?;
        }
    }
    map.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(value: &Value) -> String {
        serde_json::to_string(&InApiOrder(value)).unwrap()
    }

    #[test]
    fn a_built_in_kind_leads_with_its_type_and_identity() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"annotations": {"a": "1"}, "labels": {"l": "2"}, "name": "p",
                "namespace": "ns", "ownerReferences": [], "resourceVersion": "7", "uid": "u",
                "zzz": true},
            "spec": {"b": 1, "a": 2}, "status": {"phase": "Running"},
        });
        assert_eq!(
            written(&pod),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7","labels":{"l":"2"},"annotations":{"a":"1"},"ownerReferences":[],"zzz":true},"spec":{"a":2,"b":1},"status":{"phase":"Running"}}"#
        );
        let read: Value = serde_json::from_str(&written(&pod)).unwrap();
        assert_eq!(read, pod);
    }

    #[test]
    fn a_custom_resource_keeps_its_keys_sorted_and_a_list_orders_each_item() {
        let sandbox = json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"uid": "u", "name": "s"}, "spec": {}});
        assert_eq!(written(&sandbox), serde_json::to_string(&sandbox).unwrap());
        let list = json!({"apiVersion": "v1", "kind": "List",
            "metadata": {"resourceVersion": "9", "continue": ""},
            "items": [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"resourceVersion": "3", "name": "n"}}, sandbox]});
        assert_eq!(
            written(&list),
            concat!(
                r#"{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":""},"#,
                r#""items":[{"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1","metadata":{"name":"n","resourceVersion":"3"}},"#,
                r#"{"apiVersion":"cubepod.io/v1alpha1","kind":"Sandbox","metadata":{"name":"s","uid":"u"},"spec":{}}]}"#
            )
        );
        for other in [
            json!([1, {"b": 1, "a": 2}]),
            json!("text"),
            json!({"b": 1, "a": 2}),
        ] {
            assert_eq!(written(&other), serde_json::to_string(&other).unwrap());
        }
    }
}
