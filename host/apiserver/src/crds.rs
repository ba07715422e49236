//! The project's CRDs (`deploy/crds/`, compiled in) as the API server reads them: names
//! (short names and categories for discovery), printer columns (Table responses), and the
//! schema (OpenAPI, and field validation). One source: the same files `kubectl apply -k deploy/`
//! installs in a real cluster.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use cubepod_kube::Resource;

const FILES: [(&str, &str); 3] = [
    (
        "sandboxes.cubepod.io.yaml",
        include_str!("../../../deploy/crds/sandboxes.cubepod.io.yaml"),
    ),
    (
        "podwarmpools.cubepod.io.yaml",
        include_str!("../../../deploy/crds/podwarmpools.cubepod.io.yaml"),
    ),
    (
        "policyrollouts.cubepod.io.yaml",
        include_str!("../../../deploy/crds/policyrollouts.cubepod.io.yaml"),
    ),
];

/// One `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PrinterColumn {
    pub(crate) name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub(crate) kind: String,
    pub(crate) format: String,
    pub(crate) description: String,
    pub(crate) priority: i64,
    pub(crate) json_path: String,
}

#[derive(Clone, Debug)]
pub(crate) struct Crd {
    pub(crate) resource: Resource,
    pub(crate) singular: String,
    pub(crate) short_names: Vec<String>,
    pub(crate) categories: Vec<String>,
    pub(crate) columns: Vec<PrinterColumn>,
    /// The served version's `openAPIV3Schema`.
    pub(crate) schema: Value,
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: {why}")]
pub(crate) struct CrdError {
    file: &'static str,
    why: String,
}

/// The CRD of `resource`, if it is one of ours.
pub(crate) fn of(resource: Resource) -> Option<&'static Crd> {
    all().iter().find(|crd| crd.resource == resource)
}

fn all() -> &'static [Crd] {
    static CRDS: OnceLock<Vec<Crd>> = OnceLock::new();
    CRDS.get_or_init(|| {
        FILES
            .iter()
            .filter_map(|(file, text)| match parse(file, text) {
                Ok(crd) => Some(crd),
                // A unit test holds both files to parsing; should one not, the kind is still
                // served, without its columns and schema.
                Err(error) => {
                    tracing::error!(%error, "a compiled-in CRD does not parse");
                    None
                }
            })
            .collect()
    })
}

fn parse(file: &'static str, text: &str) -> Result<Crd, CrdError> {
    let fail = |why: String| CrdError { file, why };
    let crd: Value = serde_yaml_ng::from_str(text).map_err(|e| fail(e.to_string()))?;
    let spec = &crd["spec"];
    let names = &spec["names"];
    let kind = names["kind"].as_str().unwrap_or_default();
    let group = spec["group"].as_str().unwrap_or_default();
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (resource, version) = Resource::ALL
        .into_iter()
        .filter(|r| r.kind() == kind)
        .find_map(|r| {
            let (g, v) = r.api_version().split_once('/')?;
            (g == group).then_some((r, v))
        })
        .ok_or_else(|| fail(format!("kind {kind:?} of group {group:?} is not served")))?;
    let served = spec["versions"]
        .as_array()
        .and_then(|versions| versions.iter().find(|v| v["name"] == version))
        .ok_or_else(|| fail(format!("no version {version}")))?;
    let columns = served["additionalPrinterColumns"]
        .as_array()
        .map(|columns| {
            columns
                .iter()
                .map(|c| PrinterColumn {
                    name: c["name"].as_str().unwrap_or_default().to_owned(),
                    kind: c["type"].as_str().unwrap_or("string").to_owned(),
                    format: c["format"].as_str().unwrap_or_default().to_owned(),
                    description: c["description"].as_str().unwrap_or_default().to_owned(),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    json_path: c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Crd {
        resource,
        singular: names["singular"]
            .as_str()
            .map_or_else(|| kind.to_lowercase(), str::to_owned),
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        columns,
        schema: served["schema"]["openAPIV3Schema"].clone(),
    })
}

/// Removes the fields of `object` its schema does not know, as the API server prunes a custom
/// resource (and a merge patch of one), and returns them as dotted paths (`spec.foo`), in the
/// order found: what `fieldValidation` reports. `null`s stay (in a merge patch they remove a
/// field).
pub(crate) fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    prune_with(schema, &Map::new(), object, false)
}

/// [`prune`] against a schema whose parts refer to `definitions` by `$ref`
/// (`#/components/schemas/{name}`, alone or as an `allOf`'s one member), as the built-in kinds'
/// OpenAPI schemas do: the fields a built-in kind's decoding drops.
///
/// `directives`: the object is a strategic merge patch, whose `$patch`, `$retainKeys`,
/// `$setElementOrder/...` and `$deleteFromPrimitiveList/...` keys are instructions, not fields.
pub(crate) fn prune_with(
    schema: &Value,
    definitions: &Map<String, Value>,
    object: &mut Value,
    directives: bool,
) -> Vec<String> {
    let mut found = Vec::new();
    walk(schema, definitions, object, "", directives, &mut found);
    found
}

/// The definition a schema refers to, or the schema itself.
fn resolve<'a>(mut schema: &'a Value, definitions: &'a Map<String, Value>) -> &'a Value {
    // A bounded loop, in case a definition refers to itself.
    for _ in 0..8 {
        let reference = schema
            .get("$ref")
            .or_else(|| schema.pointer("/allOf/0/$ref"))
            .and_then(Value::as_str)
            .and_then(|r| r.rsplit('/').next())
            .and_then(|name| definitions.get(name));
        match reference {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

fn walk(
    schema: &Value,
    definitions: &Map<String, Value>,
    value: &mut Value,
    path: &str,
    directives: bool,
    found: &mut Vec<String>,
) {
    let schema = resolve(schema, definitions);
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    match value {
        Value::Object(fields) => {
            let properties = schema["properties"].as_object();
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            // `metadata` and other open objects: nothing to check against.
            if properties.is_none() && additional.is_none() {
                return;
            }
            let mut unknown = Vec::new();
            for (key, child) in fields.iter_mut() {
                if child.is_null() || (directives && key.starts_with('$')) {
                    continue;
                }
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match properties.and_then(|p| p.get(key)).or(additional) {
                    Some(child_schema) => {
                        walk(
                            child_schema,
                            definitions,
                            child,
                            &child_path,
                            directives,
                            found,
                        );
                    }
                    None => {
                        unknown.push(key.clone());
                        found.push(child_path);
                    }
                }
            }
            for key in unknown {
                fields.remove(&key);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let item_path = format!("{path}[{index}]");
                walk(
                    &schema["items"],
                    definitions,
                    item,
                    &item_path,
                    directives,
                    found,
                );
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
    fn every_crd_parses_with_its_columns_and_names() {
        for (file, text) in FILES {
            parse(file, text).unwrap();
        }
        let sandbox = of(Resource::Sandbox).unwrap();
        assert_eq!(sandbox.short_names, ["sbx"]);
        assert!(sandbox.columns.iter().any(|c| c.name == "Phase"));
        let pool = of(Resource::PodWarmPool).unwrap();
        assert!(pool.columns.iter().any(|c| c.json_path == ".spec.replicas"));
        assert!(of(Resource::Pod).is_none());
        let rollout = of(Resource::PolicyRollout).unwrap();
        let columns: Vec<_> = rollout
            .columns
            .iter()
            .filter(|c| c.priority == 0)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Phase", "Stable", "Candidate", "Weight", "Age"]);
    }

    #[test]
    fn unknown_fields_are_pruned_where_the_schema_is_closed() {
        let schema = &of(Resource::Sandbox).unwrap().schema;
        let mut object = json!({
            "apiVersion": "cubepod.io/v1alpha1",
            "kind": "Sandbox",
            "metadata": {"name": "a", "anything": 1},
            "spec": {"desiredState": "Running", "colour": "blue", "gone": null},
            "extra": true,
        });
        let mut unknown = prune(schema, &mut object);
        unknown.sort();
        assert_eq!(unknown, ["extra", "spec.colour"]);
        assert_eq!(
            object,
            json!({
                "apiVersion": "cubepod.io/v1alpha1",
                "kind": "Sandbox",
                "metadata": {"name": "a", "anything": 1},
                "spec": {"desiredState": "Running", "gone": null},
            })
        );
    }
}
