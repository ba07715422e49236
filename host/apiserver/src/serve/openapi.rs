//! `/openapi/v3`: the OpenAPI documents of every group version served. The built-in kinds'
//! schemas are the Kubernetes API's own (`builtin-openapi.json`, written by
//! `.ci/vendor-k8s-openapi`); the CRDs' are built from their schemas. kubectl reads them before
//! `apply` and `create`: whether a PATCH takes `fieldValidation` (then it leaves validation to
//! the server, which refuses an unknown field with `fieldValidation=Strict`) and which patch
//! types it accepts (strategic merge, merge and server-side apply for a built-in kind; no
//! strategic merge for a custom resource, so a client-side apply of one sends a JSON merge
//! patch), and `kubectl explain` shows them. The server checks unknown fields of a
//! built-in kind against the same schemas ([`kind_schema`]).

use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::handlers::{APPLY_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH};
use super::routes;
use crate::crds;
use cubepod_kube::Resource;

/// The built-in kinds' schemas by group version: `{"kinds": {kind: schema name}, "schemas":
/// {name: schema}}` each.
fn builtin() -> &'static Map<String, Value> {
    static BUILTIN: OnceLock<Map<String, Value>> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        let text = include_str!("builtin-openapi.json");
        // A file of this repository, compiled in; a unit test holds it to parsing. Should it
        // not, the built-in kinds are served without documents.
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(mut document)) => match document.remove("groupVersions") {
                Some(Value::Object(group_versions)) => group_versions,
                _ => Map::new(),
            },
            _ => {
                tracing::error!("the compiled-in builtin-openapi.json does not parse");
                Map::new()
            }
        }
    })
}

/// The schema of `kind` in `group_version` and the definitions its `$ref`s name, for a
/// built-in kind.
pub(crate) fn kind_schema(
    group_version: &str,
    kind: &str,
) -> Option<(&'static Value, &'static Map<String, Value>)> {
    let entry = builtin().get(group_version)?;
    let schemas = entry["schemas"].as_object()?;
    let name = entry["kinds"][kind].as_str()?;
    Some((schemas.get(name)?, schemas))
}

/// Whether `group_version` has a document: a built-in one, or one with our CRDs.
fn documented(group_version: &str, crds_installed: bool) -> bool {
    builtin().contains_key(group_version)
        || (crds_installed
            && Resource::ALL
                .into_iter()
                .any(|r| r.api_version() == group_version && crds::of(r).is_some()))
}

/// The group versions with a document, among those served.
fn group_versions(crds_installed: bool) -> Vec<&'static str> {
    routes::group_versions(crds_installed)
        .into_iter()
        .filter(|v| documented(v, crds_installed))
        .collect()
}

/// `api/v1` or `apis/{group}/{version}`: where a group version's paths and document are.
fn root(group_version: &str) -> String {
    if group_version.contains('/') {
        format!("apis/{group_version}")
    } else {
        format!("api/{group_version}")
    }
}

/// `GET /openapi/v3`: where each group version's document is, with its hash.
pub(crate) fn index(crds_installed: bool) -> Value {
    let mut paths = Map::new();
    for group_version in group_versions(crds_installed) {
        let hash = hex::encode(Sha256::digest(document(group_version).to_string()));
        let root = root(group_version);
        paths.insert(
            root.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{root}?hash={hash}") }),
        );
    }
    json!({ "paths": paths })
}

/// Whether `/openapi/v3/api/v1` or `/openapi/v3/apis/{group_version}` is served.
pub(crate) fn has(group_version: &str, crds_installed: bool) -> bool {
    group_versions(crds_installed).contains(&group_version)
}

fn query(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": { "type": "string", "uniqueItems": true },
    })
}

/// One kind of a group version's document.
struct Kind {
    resource: Resource,
    kind: &'static str,
    /// Its schema's name under `#/components/schemas/`.
    schema_name: String,
}

/// The document of one group version: every kind's schema, and its paths with the operations
/// and parameters the server honours.
pub(crate) fn document(group_version: &str) -> Value {
    let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let mut kinds = Vec::new();
    let builtin = builtin().get(group_version);
    for resource in Resource::ALL
        .into_iter()
        .filter(|r| routes::served_in(*r, group_version))
    {
        let kind = resource.kind();
        if let Some(name) = builtin.and_then(|b| b["kinds"][kind].as_str()) {
            kinds.push(Kind {
                resource,
                kind,
                schema_name: name.to_owned(),
            });
            continue;
        }
        let Some(crd) = crds::of(resource) else {
            continue;
        };
        let gvk = json!({ "group": group, "version": version, "kind": kind });
        let reversed: Vec<&str> = group.split('.').rev().collect();
        let schema_name = format!("{}.{version}.{kind}", reversed.join("."));
        let reference = json!({ "$ref": format!("#/components/schemas/{schema_name}") });
        let mut schema = crd.schema.clone();
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name.clone(), schema);
        schemas.insert(
            format!("{schema_name}List"),
            json!({
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": { "type": "string" },
                    "kind": { "type": "string" },
                    "metadata": { "type": "object" },
                    "items": { "type": "array", "items": reference },
                },
                "x-kubernetes-group-version-kind": [
                    { "group": group, "version": version, "kind": format!("{kind}List") }
                ],
            }),
        );
        kinds.push(Kind {
            resource,
            kind,
            schema_name,
        });
    }
    if let Some(builtin) = builtin.and_then(|b| b["schemas"].as_object()) {
        schemas.extend(builtin.clone());
    }
    for Kind {
        resource,
        kind,
        schema_name,
    } in kinds
    {
        let gvk = json!({ "group": group, "version": version, "kind": kind });
        let reference = json!({ "$ref": format!("#/components/schemas/{schema_name}") });
        let body = |types: &[&str]| {
            let content: Map<String, Value> = types
                .iter()
                .map(|t| ((*t).to_owned(), json!({ "schema": reference })))
                .collect();
            json!({ "content": content, "required": true })
        };
        let answer = json!({ "200": { "description": "OK", "content": {
            "application/json": { "schema": reference } } } });
        let writes = [
            query("dryRun", "not supported: a request with it is refused"),
            query(
                "fieldManager",
                "who makes the write, recorded in metadata.managedFields; required by apply",
            ),
            query(
                "fieldValidation",
                "Ignore, Warn (the default) or Strict: unknown fields against the schema",
            ),
        ];
        let operation = |action: &str, extra: Value| {
            let mut operation = json!({
                "operationId": format!("{action}{kind}"),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "responses": answer,
            });
            if let (Some(target), Some(extra)) = (operation.as_object_mut(), extra.as_object()) {
                target.extend(extra.clone());
            }
            operation
        };
        let path_parameters = |names: &[&str]| -> Vec<Value> {
            names
                .iter()
                .map(|n| json!({ "name": n, "in": "path", "required": true, "schema": { "type": "string" } }))
                .collect()
        };
        // A custom resource has no patch merge keys, so the API server takes no strategic
        // merge patch for it (and kubectl's client-side apply then sends a JSON merge patch).
        let patch_types: &[&str] = if crds::of(resource).is_some() {
            &[MERGE_PATCH, APPLY_PATCH]
        } else {
            &[STRATEGIC_MERGE_PATCH, MERGE_PATCH, APPLY_PATCH]
        };
        let plural = resource.plural();
        let prefix = format!("/{}/namespaces/{{namespace}}/{plural}", root(group_version));
        paths.insert(
            prefix.clone(),
            json!({
                "parameters": path_parameters(&["namespace"]),
                "get": operation("list", json!({ "parameters": [
                    query("labelSelector", ""), query("fieldSelector", ""),
                    query("resourceVersion", ""), query("limit", ""), query("continue", ""),
                    query("watch", ""), query("allowWatchBookmarks", ""), query("timeoutSeconds", ""),
                ] })),
                "post": operation("post", json!({
                    "parameters": writes,
                    "requestBody": body(&["application/json"]),
                })),
            }),
        );
        paths.insert(
            format!("{prefix}/{{name}}"),
            json!({
                "parameters": path_parameters(&["namespace", "name"]),
                "get": operation("get", json!({})),
                "put": operation("put", json!({
                    "parameters": writes,
                    "requestBody": body(&["application/json"]),
                })),
                "patch": operation("patch", json!({
                    "parameters": writes,
                    "requestBody": body(patch_types),
                })),
                "delete": operation("delete", json!({ "parameters": [query("dryRun", "")] })),
            }),
        );
        if routes::has_status(resource) {
            paths.insert(
                format!("{prefix}/{{name}}/status"),
                json!({
                    "parameters": path_parameters(&["namespace", "name"]),
                    "get": operation("get", json!({})),
                    "put": operation("put", json!({
                        "parameters": writes,
                        "requestBody": body(&["application/json"]),
                    })),
                    "patch": operation("patch", json!({
                        "parameters": writes,
                        "requestBody": body(patch_types),
                    })),
                }),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": { "title": "cubepod embedded cluster", "version": "v1" },
        "paths": paths,
        "components": { "schemas": schemas },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_group_has_its_schemas_and_a_patch_with_field_validation() {
        let served = index(true);
        let url = served["paths"]["apis/cubepod.io/v1alpha1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/apis/cubepod.io/v1alpha1?hash="));
        let without_crds = index(false);
        assert!(
            without_crds["paths"]
                .get("apis/cubepod.io/v1alpha1")
                .is_none()
        );
        for root in [
            "api/v1",
            "apis/events.k8s.io/v1",
            "apis/networking.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
        ] {
            assert!(without_crds["paths"].get(root).is_some(), "{root}");
        }
        let doc = document("cubepod.io/v1alpha1");
        let schema = &doc["components"]["schemas"]["io.cubepod.v1alpha1.Sandbox"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            "Sandbox"
        );
        let patch = &doc["paths"]["/apis/cubepod.io/v1alpha1/namespaces/{namespace}/sandboxes/{name}"]
            ["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Sandbox");
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"fieldValidation"));
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_none()
        );
    }

    #[test]
    fn built_in_kinds_have_the_kubernetes_schemas_with_their_group_version_kind() {
        let core = document("v1");
        for (kind, plural) in [
            ("ConfigMap", "configmaps"),
            ("Pod", "pods"),
            ("Secret", "secrets"),
            ("PersistentVolumeClaim", "persistentvolumeclaims"),
            ("Service", "services"),
            ("Event", "events"),
        ] {
            let schema = &core["components"]["schemas"][format!("io.k8s.api.core.v1.{kind}")];
            assert_eq!(
                schema["x-kubernetes-group-version-kind"][0],
                json!({"group": "", "version": "v1", "kind": kind}),
                "{kind}"
            );
            let patch = &core["paths"]
                [format!("/api/v1/namespaces/{{namespace}}/{plural}/{{name}}")]["patch"];
            assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], kind);
        }
        let status = &core["components"]["schemas"]["io.k8s.api.core.v1.ContainerStatus"];
        assert_eq!(status["properties"]["imageID"]["type"], "string");
        let events = document("events.k8s.io/v1");
        assert!(
            events["paths"]
                .get("/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}")
                .is_some()
        );
        let (schema, definitions) = kind_schema("events.k8s.io/v1", "Event").unwrap();
        assert!(schema["properties"].get("note").is_some());
        assert!(definitions.contains_key("io.k8s.api.core.v1.ObjectReference"));
        assert!(kind_schema("cubepod.io/v1alpha1", "Sandbox").is_none());
    }
}
