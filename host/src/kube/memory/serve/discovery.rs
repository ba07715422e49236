//! The discovery documents a client reads to find the API, and the CRDs in it (their short
//! names and categories from `deploy/crds/`).

use crate::kube::Resource;
use serde_json::{Value, json};

use super::{crds, routes};

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "31",
        "gitVersion": "v1.31.0-cubepod-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-08-13T00:00:00Z",
        "goVersion": "go1.22.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }],
    })
}

/// `GET /apis`: the named groups, each with its one version.
pub fn groups(crds_installed: bool) -> Value {
    let groups: Vec<Value> = routes::group_versions(crds_installed)
        .into_iter()
        .filter_map(|gv| {
            gv.split_once('/')
                .map(|(group, version)| (gv, group, version))
        })
        .map(|(gv, group, version)| {
            let version = json!({ "groupVersion": gv, "version": version });
            json!({ "name": group, "versions": [version], "preferredVersion": version })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /api/v1`, `GET /apis/{group}/{version}`: the resources, and their status subresources.
pub fn resources(group_version: &str) -> Value {
    let verbs = json!(["create", "delete", "get", "list", "patch", "watch"]);
    let mut resources = Vec::new();
    for resource in Resource::ALL
        .into_iter()
        .filter(|r| r.api_version() == group_version)
    {
        let mut entry = json!({
            "name": resource.plural(),
            "singularName": resource.kind().to_lowercase(),
            "namespaced": true,
            "kind": resource.kind(),
            "verbs": verbs,
        });
        // `kubectl get pvc`, `kubectl get all`: as the API server names the built-in kinds.
        let (short, categories): (&[&str], &[&str]) = match resource {
            Resource::Pod => (&["po"], &["all"]),
            Resource::PersistentVolumeClaim => (&["pvc"], &[]),
            Resource::Event => (&["ev"], &[]),
            _ => (&[], &[]),
        };
        if !short.is_empty() {
            entry["shortNames"] = json!(short);
        }
        if !categories.is_empty() {
            entry["categories"] = json!(categories);
        }
        // `kubectl get sbx`, `kubectl get cubepod`: the CRD's names.
        if let Some(crd) = crds::of(resource) {
            entry["singularName"] = json!(crd.singular);
            entry["shortNames"] = json!(crd.short_names);
            entry["categories"] = json!(crd.categories);
        }
        resources.push(entry);
        if routes::has_status(resource) {
            resources.push(json!({
                "name": format!("{}/status", resource.plural()),
                "singularName": "",
                "namespaced": true,
                "kind": resource.kind(),
                "verbs": ["get", "patch"],
            }));
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}
