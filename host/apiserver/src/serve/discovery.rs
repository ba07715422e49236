//! The discovery documents a client reads to find the API, and the CRDs in it (their short
//! names and categories from `deploy/crds/`).

use cubepod_kube::Resource;
use serde_json::{Value, json};

use super::routes;
use crate::crds;

/// `GET /version`: the Kubernetes API level whose semantics the server keeps (1.31), with this
/// build as semver build metadata, so that `kubectl version` says what it talks to.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "31",
        "gitVersion": concat!("v1.31.0+cubepod-controller.", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// `GET /api`.
pub(crate) fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }],
    })
}

/// `GET /apis`: the named groups, each with its one version.
pub(crate) fn groups(crds_installed: bool) -> Value {
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

const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// What is served of Namespaces (`kubectl get ns`, and kubectl's look-up of a namespace after a
/// NotFound): reads only.
const NAMESPACE_VERBS: [&str; 2] = ["get", "list"];

/// What a kind is called besides its plural.
struct Names {
    singular: String,
    short: Vec<String>,
    categories: Vec<String>,
}

impl Names {
    fn of(resource: Resource, group_version: &str) -> Names {
        // `kubectl get sbx`, `kubectl get cubepod`: the CRD's names.
        if let Some(crd) = crds::of(resource) {
            return Names {
                singular: crd.singular.clone(),
                short: crd.short_names.clone(),
                categories: crd.categories.clone(),
            };
        }
        // `kubectl get pvc`, `kubectl get all`: as the API server names the built-in kinds.
        // events.k8s.io/v1 Events have no short name: `kubectl get ev` reads core/v1's.
        let descriptor = resource.descriptor();
        let (short, categories) = if group_version == super::events_v1::GROUP_VERSION {
            (&[][..], &[][..])
        } else {
            (descriptor.short_names, descriptor.categories)
        };
        let owned = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect();
        Names {
            singular: resource.kind().to_lowercase(),
            short: owned(short),
            categories: owned(categories),
        }
    }
}

/// The media type of aggregated discovery, which kubectl asks for first.
pub(crate) const AGGREGATED: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery (`apidiscovery.k8s.io/v2`).
pub(crate) fn aggregated_wanted(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let params: Vec<&str> = range.split(';').skip(1).map(str::trim).collect();
        params.contains(&"as=APIGroupDiscoveryList")
            && params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
    })
}

/// `GET /api` (`core`) or `GET /apis` as aggregated discovery: every group, version and
/// resource in one answer, instead of one request per group version.
pub(crate) fn aggregated(core: bool, crds_installed: bool) -> Value {
    let mut items = Vec::new();
    for group_version in routes::group_versions(crds_installed) {
        let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
        if group.is_empty() != core {
            continue;
        }
        let mut resources: Vec<Value> = Resource::ALL
            .into_iter()
            .filter(|r| routes::served_in(*r, group_version))
            .map(|resource| {
                let kind = json!({ "group": group, "version": version, "kind": resource.kind() });
                let names = Names::of(resource, group_version);
                let mut entry = json!({
                    "resource": resource.plural(),
                    "responseKind": kind,
                    "scope": "Namespaced",
                    "singularResource": names.singular,
                    "verbs": VERBS,
                });
                if !names.short.is_empty() {
                    entry["shortNames"] = json!(names.short);
                }
                if !names.categories.is_empty() {
                    entry["categories"] = json!(names.categories);
                }
                let mut subresources = Vec::new();
                if routes::has_status(resource) {
                    subresources.push(json!({
                        "subresource": "status",
                        "responseKind": kind,
                        "verbs": ["get", "patch", "update"],
                    }));
                }
                if routes::has_scale(resource) {
                    subresources.push(scale_subresource());
                }
                if !subresources.is_empty() {
                    entry["subresources"] = json!(subresources);
                }
                entry
            })
            .collect();
        if group.is_empty() {
            resources.push(json!({
                "resource": "namespaces",
                "responseKind": { "group": "", "version": "v1", "kind": "Namespace" },
                "scope": "Cluster",
                "singularResource": "namespace",
                "verbs": NAMESPACE_VERBS,
                "shortNames": ["ns"],
            }));
        }
        let mut item = json!({
            "metadata": {},
            "versions": [{ "version": version, "resources": resources, "freshness": "Current" }],
        });
        if !group.is_empty() {
            item["metadata"]["name"] = json!(group);
        }
        items.push(item);
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

const SCALE_VERBS: &[&str] = &["get", "patch", "update"];

/// The aggregated discovery entry of a `/scale` subresource.
fn scale_subresource() -> Value {
    json!({
        "subresource": "scale",
        "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "verbs": SCALE_VERBS,
    })
}

/// `GET /api/v1`, `GET /apis/{group}/{version}`: the resources, and their status and scale
/// subresources.
pub(crate) fn resources(group_version: &str) -> Value {
    let verbs = json!(VERBS);
    let mut resources = Vec::new();
    for resource in Resource::ALL
        .into_iter()
        .filter(|r| routes::served_in(*r, group_version))
    {
        let mut entry = json!({
            "name": resource.plural(),
            "singularName": resource.kind().to_lowercase(),
            "namespaced": true,
            "kind": resource.kind(),
            "verbs": verbs,
        });
        let names = Names::of(resource, group_version);
        entry["singularName"] = json!(names.singular);
        if !names.short.is_empty() {
            entry["shortNames"] = json!(names.short);
        }
        if !names.categories.is_empty() {
            entry["categories"] = json!(names.categories);
        }
        resources.push(entry);
        if routes::has_status(resource) {
            resources.push(json!({
                "name": format!("{}/status", resource.plural()),
                "singularName": "",
                "namespaced": true,
                "kind": resource.kind(),
                "verbs": ["get", "patch", "update"],
            }));
        }
        // The scale client finds the Scale's own group and version here (autoscaling/v1).
        if routes::has_scale(resource) {
            resources.push(json!({
                "name": format!("{}/scale", resource.plural()),
                "singularName": "",
                "namespaced": true,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": SCALE_VERBS,
            }));
        }
    }
    if group_version == "v1" {
        resources.push(json!({
            "name": "namespaces",
            "singularName": "namespace",
            "namespaced": false,
            "kind": "Namespace",
            "verbs": NAMESPACE_VERBS,
            "shortNames": ["ns"],
        }));
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_discovery_has_every_resource_with_its_names() {
        assert!(aggregated_wanted(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!aggregated_wanted("application/json, */*"));
        let core = aggregated(true, true);
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        let pods = &core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .cloned()
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["subresources"][0]["subresource"], "status");
        let namespaces = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "namespaces")
            .cloned()
            .unwrap();
        assert_eq!(namespaces["scope"], "Cluster");
        assert_eq!(namespaces["shortNames"], json!(["ns"]));
        assert!(
            resources("v1")["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "namespaces" && r["namespaced"] == false)
        );
        let groups = aggregated(false, true);
        let names: Vec<&str> = groups["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "coordination.k8s.io",
                "cubepod.io",
                "events.k8s.io",
                "networking.k8s.io"
            ]
        );
        let events = &groups["items"][2]["versions"][0]["resources"][0];
        assert_eq!(events["resource"], "events");
        assert_eq!(events["responseKind"]["group"], "events.k8s.io");
        assert!(events.get("shortNames").is_none());
        let networking = &groups["items"][3]["versions"][0]["resources"][0];
        assert_eq!(networking["resource"], "networkpolicies");
        assert_eq!(networking["shortNames"], json!(["netpol"]));
        let hidden = aggregated(false, false);
        assert!(
            hidden["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["metadata"]["name"] != "cubepod.io")
        );
    }
}
