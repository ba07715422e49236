//! `x-kubernetes-list-type`: the items of a `set` are unique, and so are the keys
//! (`x-kubernetes-list-map-keys`) of a `map`'s items, as apiextensions' `listtype` checks them:
//! each repeat is a Duplicate naming the keys it repeats.

use serde_json::{Map, Value};

use super::structural::{ListType, Node};
use super::values::go_syntax;
use crate::field::{BadValue, FieldError, Kind, Path};

/// The repeats in every list of `value` (at `path`) that `node` types as a set or a map.
pub(crate) fn validate(node: &Node, value: &Value, path: &Path, out: &mut Vec<FieldError>) {
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                let (schema, child_path) = match node.property(key) {
                    Some(schema) => (Some(schema), path.child(key)),
                    None => (node.additional_properties.as_deref(), path.key(key)),
                };
                if let Some(schema) = schema {
                    validate(schema, child, &child_path, out);
                }
            }
        }
        Value::Array(items) => {
            match &node.list_type {
                Some(ListType::Set) => {
                    for index in first_repeats(items.iter()) {
                        out.push(duplicate(path.index(index), go_syntax(&items[index])));
                    }
                }
                Some(ListType::Map(keys)) => map_keys(keys, items, path, out),
                Some(ListType::Atomic) | None => {}
            }
            if let Some(schema) = &node.items {
                for (index, item) in items.iter().enumerate() {
                    validate(schema, item, &path.index(index), out);
                }
            }
        }
        _ => {}
    }
}

fn map_keys(keys: &[String], items: &[Value], path: &Path, out: &mut Vec<FieldError>) {
    if let Some((index, item)) = items
        .iter()
        .enumerate()
        .find(|(_, item)| !item.is_object() && !item.is_null())
    {
        out.push(FieldError::invalid(
            path.index(index),
            super::values::bad_value(item),
            "must be an object for an array of list-type map",
        ));
        return;
    }
    // Each item's keys, those it has; an item without any has the empty key.
    let item_keys: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut picked = Map::new();
            for key in keys {
                if let Some(value) = item.get(key) {
                    picked.insert(key.clone(), value.clone());
                }
            }
            Value::Object(picked)
        })
        .collect();
    for index in first_repeats(item_keys.iter()) {
        out.push(duplicate(path.index(index), go_syntax(&item_keys[index])));
    }
}

/// The index of the second appearance of each value that appears more than once.
fn first_repeats<'a>(values: impl Iterator<Item = &'a Value>) -> Vec<usize> {
    let mut seen: Vec<(&Value, usize)> = Vec::new();
    let mut repeats = Vec::new();
    for (index, value) in values.enumerate() {
        match seen.iter_mut().find(|(v, _)| *v == value) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    repeats.push(index);
                }
            }
            None => seen.push((value, 1)),
        }
    }
    repeats
}

fn duplicate(path: Path, shown: String) -> FieldError {
    FieldError::new(Kind::Duplicate, path, BadValue::Raw(shown), "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_map_keys_and_set_items_are_duplicates() {
        let node = Node::parse(
            &json!({"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {"type": "object"}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            }}),
            "",
        )
        .unwrap();
        let value = json!({
            "ports": [
                {"port": 80, "protocol": "TCP", "name": "a"},
                {"port": 80, "protocol": "UDP"},
                {"port": 80, "protocol": "TCP", "name": "b"},
                {"port": 80, "protocol": "TCP", "name": "c"},
            ],
            "tags": ["x", "y", "x"],
        });
        let mut out = Vec::new();
        validate(&node, &value, &Path::root(), &mut out);
        let shown: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "ports[2]: Duplicate value: map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}",
                "tags[2]: Duplicate value: \"x\"",
            ]
        );
        assert_eq!(out[0].kind.reason(), "FieldValueDuplicate");
    }
}
