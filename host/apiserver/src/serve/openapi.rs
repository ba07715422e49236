//! `/openapi/v3`: the OpenAPI documents of the CRDs' group, built from their schemas. kubectl
//! reads them before `apply` and `create`: whether a PATCH takes `fieldValidation` (then it
//! leaves validation to the server) and which patch types it accepts (merge patch and
//! server-side apply; no strategic merge patch, so a client-side apply sends a JSON merge
//! patch), and `kubectl explain` shows them.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::crds;
use cubepod_kube::Resource;

/// The group versions with a document: those of our CRDs.
fn group_versions(crds_installed: bool) -> Vec<&'static str> {
    let mut versions = Vec::new();
    for resource in Resource::ALL {
        if crds_installed && crds::of(resource).is_some() {
            let version = resource.api_version();
            if !versions.contains(&version) {
                versions.push(version);
            }
        }
    }
    versions
}

/// `GET /openapi/v3`: where each group version's document is, with its hash.
pub(crate) fn index(crds_installed: bool) -> Value {
    let mut paths = Map::new();
    for group_version in group_versions(crds_installed) {
        let hash = hex::encode(Sha256::digest(document(group_version).to_string()));
        paths.insert(
            format!("apis/{group_version}"),
            json!({ "serverRelativeURL": format!("/openapi/v3/apis/{group_version}?hash={hash}") }),
        );
    }
    json!({ "paths": paths })
}

/// Whether `/openapi/v3/apis/{group_version}` is served.
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

/// The document of one group version: every CRD's schema, and its paths with the operations
/// and parameters the server honours.
pub(crate) fn document(group_version: &str) -> Value {
    let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for resource in Resource::ALL
        .into_iter()
        .filter(|r| r.api_version() == group_version)
    {
        let Some(crd) = crds::of(resource) else {
            continue;
        };
        let kind = resource.kind();
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
            query("fieldManager", "accepted, not recorded"),
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
        let plural = resource.plural();
        let prefix = format!("/apis/{group_version}/namespaces/{{namespace}}/{plural}");
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
                "patch": operation("patch", json!({
                    "parameters": writes,
                    "requestBody": body(&["application/merge-patch+json", "application/apply-patch+yaml"]),
                })),
                "delete": operation("delete", json!({ "parameters": [query("dryRun", "")] })),
            }),
        );
        paths.insert(
            format!("{prefix}/{{name}}/status"),
            json!({
                "parameters": path_parameters(&["namespace", "name"]),
                "get": operation("get", json!({})),
                "patch": operation("patch", json!({
                    "parameters": writes,
                    "requestBody": body(&["application/merge-patch+json", "application/apply-patch+yaml"]),
                })),
            }),
        );
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
        assert!(index(false)["paths"].as_object().unwrap().is_empty());
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
}
