//! `x-kubernetes-validations`: CEL rules, evaluated with the `cel` crate where the API server
//! evaluates them. A rule sees its node's value as `self`; a transition rule (one that names
//! `oldSelf`) runs only on an update, and only where the stored object has a value at the same
//! place (for a list's items, the stored item with the same keys). A false rule is a field error
//! at the node's path (plus the rule's `fieldPath`), with its `message` and `reason`; the value
//! shown is the node's type, as the API server (1.31) shows it.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map as CelMap};
use cel::{Context, ExecutionError};
use serde_json::Value;

use super::cel_rule::env;
use super::structural::{ListType, Node};
use crate::field::{BadValue, FieldError, Kind, Path};

/// Runs every rule of `node` and of the nodes under it on `value`, at `path`; `old` is the
/// stored value at the same place (an update), `root` whether `value` is the whole object.
pub(crate) fn validate(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &Path,
    root: bool,
    out: &mut Vec<FieldError>,
) {
    walk(node, value, None, old, path, root, out);
}

/// [`validate`], with `value` as CEL if a node above had it converted: a node's CEL value is
/// its parent's entry, not converted again.
fn walk(
    node: &Node,
    value: &Value,
    this: Option<cel::Value>,
    old: Option<&Value>,
    path: &Path,
    root: bool,
    out: &mut Vec<FieldError>,
) {
    if value.is_null() {
        return;
    }
    let this = if node.rules.is_empty() {
        this
    } else {
        let this = this.unwrap_or_else(|| cel_value(value, root));
        evaluate(node, &this, old, path, root, out);
        Some(this)
    };
    match value {
        Value::Object(fields) => {
            let entries = match &this {
                Some(cel::Value::Map(map)) => Some(map),
                _ => None,
            };
            for (key, child) in fields {
                let (schema, child_path) = match node.property(key) {
                    Some(schema) => (schema, path.child(key)),
                    None => match &node.additional_properties {
                        Some(schema) => (schema.as_ref(), path.key(key)),
                        None => continue,
                    },
                };
                let child_cel =
                    entries.and_then(|map| map.map.get(&Key::from(key.clone())).cloned());
                let old_child = old.and_then(|o| o.get(key));
                walk(schema, child, child_cel, old_child, &child_path, false, out);
            }
        }
        Value::Array(items) => {
            let Some(schema) = &node.items else {
                return;
            };
            let entries = match &this {
                Some(cel::Value::List(list)) => Some(list),
                _ => None,
            };
            let old_items = old.and_then(Value::as_array);
            for (index, item) in items.iter().enumerate() {
                let item_cel = entries.and_then(|list| list.get(index).cloned());
                let old_item = old_items.and_then(|olds| correlated(node, item, olds));
                walk(
                    schema,
                    item,
                    item_cel,
                    old_item,
                    &path.index(index),
                    false,
                    out,
                );
            }
        }
        _ => {}
    }
}

/// The stored item an item is the new version of: a map list's item with the same keys, a
/// set's equal item; an atomic list's items have none.
fn correlated<'a>(node: &Node, item: &Value, olds: &'a [Value]) -> Option<&'a Value> {
    match &node.list_type {
        Some(ListType::Map(keys)) => olds
            .iter()
            .find(|old| keys.iter().all(|key| old.get(key) == item.get(key))),
        Some(ListType::Set) => olds.iter().find(|old| *old == item),
        Some(ListType::Atomic) | None => None,
    }
}

fn evaluate(
    node: &Node,
    this: &cel::Value,
    old: Option<&Value>,
    path: &Path,
    root: bool,
    out: &mut Vec<FieldError>,
) {
    let shown_type = || BadValue::Str(node.ty.map_or("", |t| t.name()).to_owned());
    // The stored value is converted only for a transition rule, which alone reads it.
    let previous = old
        .filter(|_| node.rules.iter().any(|rule| rule.uses_old_self))
        .map(|old| cel_value(old, root));
    for rule in &node.rules {
        // Transition rules are evaluated only where there is a stored value to compare with.
        if rule.uses_old_self && previous.is_none() {
            continue;
        }
        let mut context = Context::with_env(Arc::clone(env()));
        context.add_variable_from_value("self", this.clone());
        if let Some(previous) = &previous {
            context.add_variable_from_value("oldSelf", previous.clone());
        }
        match rule.program.execute(&context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let at = match &rule.field_path {
                    Some(field_path) => path.child(field_path),
                    None => path.clone(),
                };
                let detail = rule.failure_detail();
                out.push(match rule.reason {
                    Kind::Forbidden => FieldError::forbidden(&at, detail),
                    Kind::Required => FieldError::required(&at, detail),
                    Kind::Duplicate => FieldError::new(Kind::Duplicate, &at, shown_type(), ""),
                    _ => FieldError::invalid(&at, shown_type(), detail),
                });
            }
            Ok(other) => out.push(FieldError::invalid(
                path,
                shown_type(),
                format!(
                    "rule did not evaluate to a bool ({other:?}) evaluating rule: {}",
                    rule.described()
                ),
            )),
            Err(error) => out.push(FieldError::invalid(
                path,
                shown_type(),
                format!(
                    "{} evaluating rule: {}",
                    error_text(&error),
                    rule.described()
                ),
            )),
        }
    }
}

/// An evaluation error as cel-go words the common ones (`no such key: x`).
fn error_text(error: &ExecutionError) -> String {
    match error {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        other => other.to_string(),
    }
}

/// A JSON value as CEL sees it; the object itself (`root`) shows only the name and
/// generateName of its metadata, as the API server's CEL type for an object does.
fn cel_value(value: &Value, root: bool) -> cel::Value {
    if root && let Value::Object(fields) = value {
        let mut map: HashMap<Key, cel::Value> = HashMap::with_capacity(fields.len());
        for (key, child) in fields {
            let converted = if key == "metadata" {
                let mut meta: HashMap<Key, cel::Value> = HashMap::new();
                for field in ["name", "generateName"] {
                    if let Some(v) = child.get(field) {
                        meta.insert(Key::from(field.to_owned()), to_cel(v));
                    }
                }
                cel::Value::Map(CelMap::from(meta))
            } else {
                to_cel(child)
            };
            map.insert(Key::from(key.clone()), converted);
        }
        return cel::Value::Map(CelMap::from(map));
    }
    to_cel(value)
}

fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<Key, cel::Value> = fields
                .iter()
                .map(|(k, v)| (Key::from(k.clone()), to_cel(v)))
                .collect();
            cel::Value::Map(CelMap::from(map))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Node {
        Node::parse(
            &json!({"type": "object", "x-kubernetes-validations": [
                {"rule": "self.metadata.name.size() <= 5", "message": "name too long"},
            ], "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "!has(oldSelf.fork) ? !has(self.fork) : (has(self.fork) && self.fork == oldSelf.fork)",
                     "message": "fork is immutable", "fieldPath": ".fork", "reason": "FieldValueForbidden"},
                    {"rule": "self.gen >= oldSelf.gen", "fieldPath": ".gen"},
                ],
                "properties": {"fork": {"type": "string"}, "gen": {"type": "integer"}},
            }}}),
            "",
        )
        .unwrap()
    }

    fn errors(value: Value, old: Option<Value>) -> Vec<String> {
        let mut out = Vec::new();
        validate(&node(), &value, old.as_ref(), &Path::root(), true, &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_run_with_self_and_transition_rules_only_on_update() {
        let a = json!({"metadata": {"name": "a"}, "spec": {"gen": 2}});
        assert!(errors(a.clone(), None).is_empty());
        assert!(errors(a.clone(), Some(a.clone())).is_empty());
        assert_eq!(
            errors(
                json!({"metadata": {"name": "toolong"}, "spec": {"gen": 1}}),
                None
            ),
            ["<nil>: Invalid value: \"object\": name too long"]
        );
        let forked = json!({"metadata": {"name": "a"}, "spec": {"gen": 2, "fork": "b"}});
        assert!(
            errors(forked.clone(), None).is_empty(),
            "a create may set it"
        );
        assert_eq!(
            errors(forked.clone(), Some(a.clone())),
            ["spec.fork: Forbidden: fork is immutable"]
        );
        let lower = json!({"metadata": {"name": "a"}, "spec": {"gen": 1}});
        assert_eq!(
            errors(lower, Some(a)),
            ["spec.gen: Invalid value: \"object\": failed rule: self.gen >= oldSelf.gen"]
        );
    }

    #[test]
    fn a_map_lists_items_meet_their_stored_selves_by_key() {
        let list = Node::parse(
            &json!({"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k"], "items": {"type": "object",
                "x-kubernetes-validations": [{"rule": "self.v >= oldSelf.v", "message": "v went down"}],
                "properties": {"k": {"type": "string"}, "v": {"type": "integer"}}}}),
            "",
        )
        .unwrap();
        let old = json!([{"k": "a", "v": 2}, {"k": "b", "v": 1}]);
        let new = json!([{"k": "b", "v": 1}, {"k": "a", "v": 1}, {"k": "c", "v": 0}]);
        let mut out = Vec::new();
        validate(
            &list,
            &new,
            Some(&old),
            &Path::root().child("l"),
            false,
            &mut out,
        );
        let shown: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["l[1]: Invalid value: \"object\": v went down"]);
    }

    #[test]
    fn an_evaluation_error_names_the_rule() {
        let no_gen = json!({"metadata": {"name": "a"}, "spec": {}});
        let old = json!({"metadata": {"name": "a"}, "spec": {"gen": 1}});
        assert_eq!(
            errors(no_gen, Some(old)),
            [
                "spec: Invalid value: \"object\": no such key: gen evaluating rule: self.gen >= oldSelf.gen"
            ]
        );
    }
}
