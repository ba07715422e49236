//! The objects a scenario file declares, checked as the API server checks a create with strict
//! field validation: an unknown field, a value of the wrong type, a missing required field or a
//! value outside an enum is an error naming the field's path (`spec.resources.cpu`), not an
//! object that silently means something else than its author thought.
//! Every scenario file is read through it (`format`), and so are the embedded cluster's seeds
//! (`run --seed`).
//!
//! Sandbox and PodWarmPool are held to the `openAPIV3Schema` of their CRDs (`deploy/crds/`,
//! embedded), with the structural-schema rules: a field a schema does not name is unknown
//! unless `x-kubernetes-preserve-unknown-fields` says otherwise; their `metadata` is an
//! ObjectMeta. The built-in kinds (Pod, PersistentVolumeClaim, Secret, Service; NetworkPolicy)
//! are held to the schemas in `schema/core_v1.json` and `schema/networking_v1.json`, written by
//! `.ci/vendor-k8s-schemas` from the Kubernetes
//! OpenAPI (through the kubernetes-validate package). Values' formats, patterns and ranges
//! (`minLength`, `pattern`, `minimum`) and CEL rules are not checked here but where the objects
//! are created: the scratch cluster's API server (`kube::memory::schema`) holds a custom
//! resource to all of them; `.ci/validate-k8s` checks manifests fully.

use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use cubepod_kube::Resource;

/// The built-in kinds' schemas, one file per API group (`.ci/vendor-k8s-schemas`).
const BUILT_IN: [&str; 2] = [
    include_str!("schema/core_v1.json"),
    include_str!("schema/networking_v1.json"),
];
const CRDS: [&str; 2] = [
    include_str!("../../../deploy/crds/sandboxes.cubepod.io.yaml"),
    include_str!("../../../deploy/crds/podwarmpools.cubepod.io.yaml"),
];
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// One thing the API server would refuse, at a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// `spec.resources.cpu`, `spec.containers[0].image`; empty for the object itself.
    pub(crate) field: String,
    pub(crate) problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    Unknown,
    Type { expected: String, got: &'static str },
    Required,
    NotInEnum { allowed: Vec<String> },
    ApiVersion { served: Vec<String> },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = &self.field;
        match &self.problem {
            Problem::Unknown => write!(f, "unknown field \"{field}\""),
            Problem::Type { expected, got } => {
                write!(f, "{field}: must be {expected}, not {got}")
            }
            Problem::Required => write!(f, "{field}: required"),
            Problem::NotInEnum { allowed } => {
                write!(f, "{field}: must be one of {}", allowed.join(", "))
            }
            Problem::ApiVersion { served } => {
                write!(f, "{field}: must be {}", served.join(" or "))
            }
        }
    }
}

/// Checks `object`, a `resource` as a scenario declares it: every violation, fields in name order.
pub(crate) fn check(resource: Resource, object: &Value) -> Vec<Violation> {
    let schemas = schemas();
    let mut out = Vec::new();
    let core = Walker {
        definitions: &schemas.definitions,
        crd: false,
    };
    if let Some(kind) = schemas.core_kinds.get(resource.kind()) {
        if object.get("apiVersion").is_none() {
            out.push(violation("apiVersion", Problem::Required));
        }
        core.walk(&reference(kind), object, "", &mut out);
        return out;
    }
    let Some(versions) = schemas.crds.get(resource.kind()) else {
        // Only kinds that the scenario format reads reach here; each has a schema above.
        return out;
    };
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    let Some((_, schema)) = versions
        .iter()
        .find(|(v, _)| Some(v.as_str()) == api_version)
    else {
        let served = versions.iter().map(|(v, _)| v.clone()).collect();
        out.push(violation("apiVersion", Problem::ApiVersion { served }));
        return out;
    };
    let crd = Walker {
        definitions: &schemas.definitions,
        crd: true,
    };
    // The API server reads a custom resource's metadata as any object's, whatever the CRD says.
    let mut rest = object.clone();
    let metadata = rest.as_object_mut().and_then(|o| o.remove("metadata"));
    crd.walk(schema, &rest, "", &mut out);
    match metadata {
        Some(metadata) => core.walk(&reference(OBJECT_META), &metadata, "metadata", &mut out),
        None => out.push(violation("metadata", Problem::Required)),
    }
    out
}

fn violation(field: &str, problem: Problem) -> Violation {
    Violation {
        field: field.to_string(),
        problem,
    }
}

struct Schemas {
    /// core/v1 definitions by name.
    definitions: Map<String, Value>,
    /// Kind to its definition's name.
    core_kinds: HashMap<String, String>,
    /// Kind to (`group/version`, `openAPIV3Schema`) of each served version.
    crds: HashMap<String, Vec<(String, Value)>>,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        // Both are files of this repository, compiled in; the unit tests read them.
        let mut definitions = Map::new();
        let mut core_kinds = HashMap::new();
        for text in BUILT_IN {
            let file: Value = serde_json::from_str(text).expect("a schema/ file is JSON");
            // The files share definitions (ObjectMeta...); both hold the same text of each.
            definitions.extend(
                file["definitions"]
                    .as_object()
                    .cloned()
                    .expect("a schema/ file has definitions"),
            );
            core_kinds.extend(
                file["kinds"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))),
            );
        }
        let mut crds = HashMap::new();
        for text in CRDS {
            let crd: Value = serde_yaml_ng::from_str(text).expect("a CRD of deploy/crds is YAML");
            let group = crd["spec"]["group"].as_str().unwrap_or_default();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
            let versions = crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["served"].as_bool() == Some(true))
                .filter_map(|v| {
                    let name = v["name"].as_str()?;
                    let schema = v.pointer("/schema/openAPIV3Schema")?.clone();
                    Some((format!("{group}/{name}"), schema))
                })
                .collect();
            crds.insert(kind.to_string(), versions);
        }
        Schemas {
            definitions,
            core_kinds,
            crds,
        }
    })
}

/// `{"$ref": name}`: a schema that is the definition `name`.
fn reference(name: &str) -> Value {
    serde_json::json!({ "$ref": name })
}

/// Walks a value along its schema. `crd`: the structural-schema rules of a CRD (an object's
/// fields are only those it names); otherwise the core OpenAPI ones (`additionalProperties:
/// false` where fields are closed, an object without properties holds anything).
struct Walker<'a> {
    definitions: &'a Map<String, Value>,
    crd: bool,
}

impl Walker<'_> {
    fn resolve<'s>(&'s self, mut schema: &'s Value) -> &'s Value {
        // Definitions refer to each other by name; a bounded loop, in case one refers to itself.
        for _ in 0..8 {
            match schema.get("$ref").and_then(Value::as_str) {
                Some(name) => match self.definitions.get(name) {
                    Some(target) => schema = target,
                    None => break,
                },
                None => break,
            }
        }
        schema
    }

    fn walk(&self, schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
        let schema = self.resolve(schema);
        let types = self.types(schema);
        if !types.is_empty() && !types.iter().any(|t| matches_type(t, value)) {
            let expected: Vec<&str> = types.iter().filter(|t| **t != "null").copied().collect();
            out.push(violation(
                path,
                Problem::Type {
                    expected: expected.join(" or "),
                    got: type_of(value),
                },
            ));
            return;
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !value.is_null()
            && !allowed.contains(value)
        {
            let allowed = allowed
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect();
            out.push(violation(path, Problem::NotInEnum { allowed }));
        }
        match value {
            Value::Object(fields) => self.walk_object(schema, fields, path, out),
            Value::Array(items) => {
                if let Some(item) = schema.get("items") {
                    for (index, value) in items.iter().enumerate() {
                        self.walk(item, value, &format!("{path}[{index}]"), out);
                    }
                }
            }
            _ => {}
        }
    }

    fn walk_object(
        &self,
        schema: &Value,
        fields: &Map<String, Value>,
        path: &str,
        out: &mut Vec<Violation>,
    ) {
        let join = |name: &str| {
            if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            }
        };
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !fields.contains_key(name) {
                out.push(violation(&join(name), Problem::Required));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        let preserve = schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true);
        for (name, value) in fields {
            if let Some(field) = properties.and_then(|p| p.get(name)) {
                self.walk(field, value, &join(name), out);
                continue;
            }
            match schema.get("additionalProperties") {
                Some(Value::Bool(true)) => {}
                Some(Value::Bool(false)) => out.push(violation(&join(name), Problem::Unknown)),
                Some(each) => self.walk(each, value, &join(name), out),
                None if preserve => {}
                // A core object without properties (FieldsV1) holds anything.
                None if !self.crd && properties.is_none() => {}
                None => out.push(violation(&join(name), Problem::Unknown)),
            }
        }
    }

    /// The JSON types a schema allows (empty: any). `oneOf` of plain types (IntOrString,
    /// Quantity) is their union; a CRD's `nullable` and `x-kubernetes-int-or-string` too.
    fn types<'s>(&self, schema: &'s Value) -> Vec<&'s str> {
        let mut types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for alternative in schema
            .get("oneOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match alternative.get("type") {
                Some(Value::String(t)) => types.push(t),
                Some(Value::Array(ts)) => types.extend(ts.iter().filter_map(Value::as_str)),
                _ => {}
            }
        }
        if schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            types.extend(["integer", "string"]);
        }
        if !types.is_empty() && schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            types.push("null");
        }
        types
    }
}

fn matches_type(expected: &str, value: &Value) -> bool {
    match (expected, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("number", Value::Number(_))
        | ("null", Value::Null) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(resource: Resource, object: Value) -> Vec<String> {
        check(resource, &object)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn sandbox(spec: Value) -> Value {
        json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox", "metadata": {"name": "a"},
               "spec": spec})
    }

    #[test]
    fn an_unknown_field_of_a_sandbox_is_named_by_its_path() {
        assert_eq!(
            problems(
                Resource::Sandbox,
                sandbox(json!({"image": "i", "cpu": "500m"}))
            ),
            ["unknown field \"spec.cpu\""]
        );
        assert!(
            problems(
                Resource::Sandbox,
                sandbox(json!({"image": "i", "resources": {"cpu": "500m"}}))
            )
            .is_empty()
        );
    }

    #[test]
    fn wrong_types_missing_fields_and_enums_are_refused() {
        assert_eq!(
            problems(
                Resource::Sandbox,
                sandbox(json!({"image": "i", "rootfsGeneration": "2", "desiredState": "Stopped"}))
            ),
            [
                "spec.desiredState: must be one of Running, Paused",
                "spec.rootfsGeneration: must be integer, not a string"
            ]
        );
        assert_eq!(
            problems(Resource::Sandbox, sandbox(json!({}))),
            ["spec.image: required"]
        );
        let mut wrong_version = sandbox(json!({"image": "i"}));
        wrong_version["apiVersion"] = json!("cubepod.io/v1");
        assert_eq!(
            problems(Resource::Sandbox, wrong_version),
            ["apiVersion: must be cubepod.io/v1alpha1"]
        );
    }

    #[test]
    fn metadata_is_an_object_meta_for_custom_resources_too() {
        let mut object = sandbox(json!({"image": "i"}));
        object["metadata"]["lables"] = json!({"a": "b"});
        object["metadata"]["finalizers"] = json!(["cubepod.io/cleanup"]);
        assert_eq!(
            problems(Resource::Sandbox, object),
            ["unknown field \"metadata.lables\""]
        );
    }

    #[test]
    fn built_in_kinds_are_held_to_the_core_schemas() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePolicy": "x",
                                     "ports": [{"containerPort": "80"}]}],
                     "nodeSelector": {"a": "b"}},
            "status": {"phase": "Running"}});
        assert_eq!(
            problems(Resource::Pod, pod),
            [
                "unknown field \"spec.containers[0].imagePolicy\"",
                "spec.containers[0].ports[0].containerPort: must be integer, not a string"
            ]
        );
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "a"},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block",
                     "resources": {"requests": {"storage": "10Gi"}}, "size": 1}});
        assert_eq!(
            problems(Resource::PersistentVolumeClaim, pvc),
            ["unknown field \"spec.size\""]
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"},
            "type": "Opaque", "stringData": {"token": "t"}, "data": {"n": 1}});
        assert_eq!(
            problems(Resource::Secret, secret),
            ["data.n: must be string, not an integer"]
        );
        let no_version = json!({"kind": "Secret", "metadata": {"name": "a"}});
        assert_eq!(
            problems(Resource::Secret, no_version),
            ["apiVersion: required"]
        );
    }

    /// What the embedded cluster writes itself (a started Pod's status from the simulated
    /// kubelet, every object's metadata) is what the Kubernetes API's schema allows: the
    /// official clients refuse anything else (a `null` imageID, an unknown field).
    #[tokio::test]
    async fn what_the_embedded_cluster_writes_passes_the_api_schema() {
        use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
        use cubepod_kube::Cluster;

        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}},
            "spec": {"initContainers": [{"name": "prep", "image": "busybox:1.36"}],
                     "containers": [{"name": "main", "image": "registry:5000/app:1.0"}]}});
        cluster.create(Resource::Pod, "default", pod).await.unwrap();
        let running = cluster.get(Resource::Pod, "default", "p").await.unwrap();
        assert_eq!(running["status"]["phase"], "Running", "{running}");
        assert_eq!(problems(Resource::Pod, running), Vec::<String>::new());
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}});
        cluster
            .create(Resource::PersistentVolumeClaim, "default", claim)
            .await
            .unwrap();
        let claim = cluster
            .get(Resource::PersistentVolumeClaim, "default", "c")
            .await
            .unwrap();
        assert_eq!(
            problems(Resource::PersistentVolumeClaim, claim),
            Vec::<String>::new()
        );
    }
}
