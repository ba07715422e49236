//! Defaulting as the API server does it when it decodes a custom resource (on a create, and on
//! the object a patch makes): a `null` of a field that is neither nullable nor defaulted is
//! dropped, then every absent (or `null`) field with a `default` gets it, and the defaults of
//! what it holds in turn.

use serde_json::Value;

use super::structural::Node;

pub(crate) fn apply(node: &Node, value: &mut Value) {
    prune_nulls(node, value);
    fill(node, value);
}

/// apiextensions' `PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(node: &Node, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|key, child| {
                !(child.is_null()
                    && node
                        .property(key)
                        .is_some_and(|schema| schema.default.is_none() && !schema.nullable))
            });
            for (key, child) in fields.iter_mut() {
                if let Some(schema) = node.field(key) {
                    prune_nulls(schema, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = &node.items {
                for item in items {
                    prune_nulls(schema, item);
                }
            }
        }
        _ => {}
    }
}

/// apiextensions' structural `Default`.
fn fill(node: &Node, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, schema) in &node.properties {
                let Some(default) = &schema.default else {
                    continue;
                };
                let missing = fields
                    .get(key)
                    .is_none_or(|v| v.is_null() && !schema.nullable);
                if missing {
                    fields.insert(key.clone(), default.clone());
                }
            }
            for (key, child) in fields.iter_mut() {
                if let Some(schema) = node.field(key) {
                    fill(schema, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = &node.items {
                for item in items {
                    if item.is_null()
                        && !schema.nullable
                        && let Some(default) = &schema.default
                    {
                        *item = default.clone();
                    }
                    fill(schema, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_absent_and_null_fields_all_the_way_down() {
        let node = Node::parse(
            &json!({"type": "object", "properties": {
                "state": {"type": "string", "default": "Running"},
                "storage": {"type": "object", "default": {}, "properties": {
                    "size": {"type": "string", "default": "10Gi"},
                }},
                "fork": {"type": "string"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"},
                }}},
            }}),
            "",
        )
        .unwrap();
        let mut value =
            json!({"state": null, "fork": null, "ports": [{"port": 80}, {"protocol": "UDP"}]});
        apply(&node, &mut value);
        assert_eq!(
            value,
            json!({
                "state": "Running",
                "storage": {"size": "10Gi"},
                "ports": [{"port": 80, "protocol": "TCP"}, {"protocol": "UDP"}],
            })
        );
        let mut kept = json!({"state": "Paused", "storage": {"size": "1Gi"}});
        apply(&node, &mut kept);
        assert_eq!(kept, json!({"state": "Paused", "storage": {"size": "1Gi"}}));
    }
}
