//! Strategic merge patch, as the API server applies it to the built-in kinds (what
//! `kubectl apply` sends for a ConfigMap, `kubectl patch` by default): a JSON merge patch whose
//! lists merge by their patch merge key (containers by name, ownerReferences by uid, ...) or as
//! sets, with the directives `$patch` (`replace`, `delete`, `merge`), `$retainKeys`,
//! `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`. Custom resources have no
//! merge keys and refuse it, as kube-apiserver does.

use serde_json::{Map, Value};

use super::shape::{ListKind, Shape};

/// Why a strategic merge patch cannot be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PatchError(String);

const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies `patch` to `target`, a built-in kind's object.
pub(crate) fn patch(shape: Shape, target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    merge_map(shape, target, patch, &mut Vec::new())
}

fn merge_map(
    shape: Shape,
    target: &mut Value,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = Value::Object(without_directives(patch));
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError(format!(
                "Unknown patch type: {other} in map: {}",
                Value::Object(patch.clone())
            )));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else {
        return Ok(());
    };
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        if let Some(list) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(gone) = value else {
                return Err(PatchError(format!("{key} must be a list")));
            };
            if let Some(Value::Array(items)) = fields.get_mut(list) {
                items.retain(|item| !gone.contains(item));
            }
            continue;
        }
        path.push(key.clone());
        match value {
            Value::Null => {
                fields.remove(key);
            }
            Value::Object(child)
                if child.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                fields.remove(key);
            }
            Value::Object(child) => {
                let slot = fields.entry(key.as_str()).or_insert(Value::Null);
                merge_map(shape, slot, child, path)?;
            }
            Value::Array(items) => {
                let slot = fields.entry(key.as_str()).or_insert(Value::Null);
                merge_list(shape, slot, items, path)?;
            }
            other => {
                fields.insert(key.clone(), other.clone());
            }
        }
        path.pop();
    }
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix(SET_ELEMENT_ORDER) {
            path.push(list.to_owned());
            let merge_key = match shape.list(path) {
                ListKind::Map(keys) => keys.into_iter().next(),
                _ => None,
            };
            path.pop();
            if let (Some(Value::Array(items)), Value::Array(order)) = (fields.get_mut(list), value)
            {
                reorder(items, order, merge_key.as_deref());
            }
        }
    }
    if let Some(retained) = patch.get("$retainKeys") {
        let Value::Array(retained) = retained else {
            return Err(PatchError(
                "$retainKeys must be a list of field names".into(),
            ));
        };
        fields.retain(|key, _| retained.iter().any(|r| r.as_str() == Some(key)));
    }
    Ok(())
}

fn merge_list(
    shape: Shape,
    target: &mut Value,
    patch: &[Value],
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    let replace = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    let kind = shape.list(path);
    if replace || kind == ListKind::Atomic || !target.is_array() {
        let kept: Vec<Value> = patch
            .iter()
            .filter(|item| item.get("$patch").is_none())
            .cloned()
            .collect();
        *target = Value::Array(kept);
        return Ok(());
    }
    let Value::Array(items) = target else {
        return Ok(());
    };
    match kind {
        ListKind::Set => {
            for item in patch {
                if !items.contains(item) {
                    items.push(item.clone());
                }
            }
        }
        ListKind::Map(keys) => {
            let Some(merge_key) = keys.first() else {
                return Ok(());
            };
            for item in patch {
                let Value::Object(fields) = item else {
                    return Err(PatchError(format!(
                        "the items of {} must be objects with the merge key {merge_key:?}",
                        path.join(".")
                    )));
                };
                let Some(key) = fields.get(merge_key) else {
                    return Err(PatchError(format!(
                        "map: {item} does not contain declared merge key: {merge_key}"
                    )));
                };
                let position = items
                    .iter()
                    .position(|existing| existing.get(merge_key) == Some(key));
                let delete = fields.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(index), true) => {
                        items.remove(index);
                    }
                    (None, true) => {}
                    (Some(index), false) => merge_map(shape, &mut items[index], fields, path)?,
                    (None, false) => {
                        let mut fresh = Value::Object(Map::new());
                        merge_map(shape, &mut fresh, fields, path)?;
                        items.push(fresh);
                    }
                }
            }
        }
        ListKind::Atomic => {}
    }
    Ok(())
}

/// Orders `items` as `order` names them (values, or objects naming the merge key); items it
/// does not name keep their order after those it does.
fn reorder(items: &mut [Value], order: &[Value], merge_key: Option<&str>) {
    let rank = |item: &Value| {
        order.iter().position(|wanted| match merge_key {
            Some(key) => wanted.get(key).is_some() && wanted.get(key) == item.get(key),
            None => wanted == item,
        })
    };
    items.sort_by_key(|item| rank(item).unwrap_or(usize::MAX));
}

fn without_directives(patch: &Map<String, Value>) -> Map<String, Value> {
    patch
        .iter()
        .filter(|(key, _)| !key.starts_with('$'))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_kube::Resource;
    use serde_json::json;

    fn patched(resource: Resource, target: Value, patch_value: Value) -> Value {
        let mut target = target;
        patch(Shape::of(resource), &mut target, &patch_value).unwrap();
        target
    }

    #[test]
    fn maps_merge_and_null_removes() {
        let configmap = json!({"metadata": {"name": "m", "annotations": {"a": "1"}},
            "data": {"x": "1", "y": "2"}});
        let result = patched(
            Resource::ConfigMap,
            configmap,
            json!({"metadata": {"annotations": {"b": "2"}}, "data": {"x": null, "z": "3"}}),
        );
        assert_eq!(
            result,
            json!({"metadata": {"name": "m", "annotations": {"a": "1", "b": "2"}},
                "data": {"y": "2", "z": "3"}})
        );
    }

    #[test]
    fn keyed_lists_merge_by_their_merge_key() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
            {"name": "b", "image": "y"}]}});
        let result = patched(
            Resource::Pod,
            pod,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                "containers": [
                    {"name": "a", "env": [{"name": "B", "value": "2"}]},
                    {"name": "b", "$patch": "delete"},
                    {"name": "c", "image": "z"}]}}),
        );
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "c", "image": "z"},
                {"name": "a", "image": "x",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}])
        );
    }

    #[test]
    fn finalizers_are_a_set_and_atomic_lists_replace() {
        let object = json!({"metadata": {"finalizers": ["a", "b"]},
            "spec": {"tolerations": [{"key": "x"}]}});
        let result = patched(
            Resource::Pod,
            object,
            json!({"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
                "spec": {"tolerations": [{"key": "y"}]}}),
        );
        assert_eq!(result["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(result["spec"]["tolerations"], json!([{"key": "y"}]));
    }

    #[test]
    fn directives_replace_delete_and_retain() {
        let object = json!({"data": {"x": "1"}, "spec": {"a": 1, "b": 2}});
        let result = patched(
            Resource::Service,
            object,
            json!({"data": {"$patch": "replace", "y": "2"},
                "spec": {"$retainKeys": ["a", "c"], "c": 3}}),
        );
        assert_eq!(
            result,
            json!({"data": {"y": "2"}, "spec": {"a": 1, "c": 3}})
        );
        let deleted = patched(
            Resource::Service,
            json!({"data": {"x": "1"}}),
            json!({"data": {"$patch": "delete"}}),
        );
        assert_eq!(deleted, json!({}));
        let list = patched(
            Resource::Pod,
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "b"}]}}),
        );
        assert_eq!(list["spec"]["containers"], json!([{"name": "b"}]));
        let mut target = json!({});
        let unknown = patch(
            Shape::of(Resource::Pod),
            &mut target,
            &json!({"spec": {"$patch": "explode"}}),
        );
        assert!(unknown.is_err());
    }
}
