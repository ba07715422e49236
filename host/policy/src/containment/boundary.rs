//! The first layer every `kube-client` call passes (rules `kind`, `namespace`, `name`,
//! `manifest`): a sandbox's child kinds only, the configured namespaces only, a valid name, and
//! a manifest that is the object the call names.

use std::collections::BTreeSet;

use super::json::Json;
use super::{KEPT_PREFIX, Refusal, Rule, clip, describe, dns1123_subdomain};
use crate::runtime::bindings::ClusterNetwork;
use cubepod_kube::Resource;

/// What a policy may write: the namespaces the controller serves, Pods, PVCs, Secrets,
/// NetworkPolicies and Services; and the cluster network a NetworkPolicy is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The namespaces the controller serves.
    pub(crate) namespaces: BTreeSet<String>,
    /// The cluster network of the flags (`--cluster-cidr`, `--dns-*`, `--ingress-from`).
    pub network: ClusterNetwork,
}

impl Default for Boundary {
    fn default() -> Self {
        Self {
            namespaces: BTreeSet::new(),
            network: crate::model::network::default_cluster_network(),
        }
    }
}

impl Boundary {
    /// The boundary of a controller that manages these namespaces: a policy writes in no other.
    pub fn new<I, S>(namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            namespaces: namespaces.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// The same boundary over another cluster network.
    pub fn with_network(mut self, network: ClusterNetwork) -> Self {
        self.network = network;
        self
    }

    /// The first layer: namespace, kind, name, and for a write (`manifest` given) a manifest
    /// that is the object the call names; returns the parsed manifest. What a call for one
    /// Sandbox may write is [`Containment`](super::Containment)'s to say.
    pub fn check<'m>(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: Option<&'m str>,
    ) -> Result<Option<Json<'m>>, Refusal> {
        let what = describe(resource, namespace, name);
        if !resource.is_child() {
            return Err(Refusal::new(
                Rule::Kind,
                what,
                "kind",
                "a policy may write only Pods, PersistentVolumeClaims, Secrets, NetworkPolicies \
                 and Services",
            ));
        }
        if !self.namespaces.contains(namespace) {
            return Err(Refusal::new(
                Rule::Namespace,
                what,
                "namespace",
                format!(
                    "namespace {:?} is outside the controller's namespaces ({})",
                    clip(namespace, KEPT_PREFIX),
                    self.list()
                ),
            ));
        }
        if let Err(why) = dns1123_subdomain(name) {
            return Err(Refusal::new(
                Rule::Name,
                what,
                "name",
                format!("name {:?} {why}", clip(name, KEPT_PREFIX)),
            ));
        }
        let Some(manifest) = manifest else {
            return Ok(None);
        };
        let refuse =
            |field: &str, reason: String| Refusal::new(Rule::Manifest, what, field, reason);
        let object = Json::parse(manifest)
            .map_err(|e| refuse("manifest", format!("the manifest is not valid JSON: {e}")))?;
        let Some(fields) = object.as_object() else {
            return Err(refuse(
                "manifest",
                "the manifest is not a JSON object".into(),
            ));
        };
        let text = |key: &str| fields.get(key).and_then(Json::as_str);
        if text("kind") != Some(resource.kind())
            || text("apiVersion") != Some(resource.api_version())
        {
            return Err(refuse(
                "kind",
                format!(
                    "the manifest is a {} {}, not the {} {} this call writes",
                    clip(text("apiVersion").unwrap_or("<no apiVersion>"), 64),
                    clip(text("kind").unwrap_or("<no kind>"), 64),
                    resource.api_version(),
                    resource.kind(),
                ),
            ));
        }
        let metadata = object.get("metadata");
        let meta = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Json::as_str);
        if meta("name") != Some(name) {
            return Err(refuse(
                "metadata.name",
                format!(
                    "the manifest's metadata.name is {:?}, not the call's {:?}",
                    clip(meta("name").unwrap_or_default(), KEPT_PREFIX),
                    clip(name, KEPT_PREFIX)
                ),
            ));
        }
        if meta("namespace") != Some(namespace) {
            return Err(refuse(
                "metadata.namespace",
                format!(
                    "the manifest's metadata.namespace is {:?}, not the call's {namespace:?}",
                    clip(meta("namespace").unwrap_or_default(), KEPT_PREFIX)
                ),
            ));
        }
        Ok(Some(object))
    }

    fn list(&self) -> String {
        if self.namespaces.is_empty() {
            return "none".to_string();
        }
        self.namespaces
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;
    use serde_json::{Value, json};

    const NS: &str = "cubepod-workloads";

    fn boundary() -> Boundary {
        Boundary::new([NS])
    }

    fn secret(name: &str, namespace: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "cubepod-controller",
                    "cubepod.io/sandbox": "dev-alice",
                },
            },
            "stringData": {"token": "t"},
        })
    }

    /// The admitted manifest read back as a value.
    fn check_secret(manifest: &Value) -> Result<Option<Value>, Refusal> {
        let text = manifest.to_string();
        boundary()
            .check(Resource::Secret, NS, "dev-alice-credentials", Some(&text))
            .map(|tree| tree.map(|t| serde_json::to_value(&t).expect("written back")))
    }

    fn refusal<T: fmt::Debug>(result: Result<T, Refusal>) -> String {
        match result {
            Err(reason) => reason.to_string(),
            Ok(v) => panic!("admitted: {v:?}"),
        }
    }

    #[test]
    fn admits_a_managed_child_and_returns_it() {
        let manifest = secret("dev-alice-credentials", NS);
        assert_eq!(check_secret(&manifest), Ok(Some(manifest)));
    }

    #[test]
    fn admits_a_delete_in_the_namespaces() {
        assert_eq!(
            boundary().check(Resource::Pod, NS, "dev-alice", None),
            Ok(None)
        );
    }

    #[test]
    fn refuses_a_namespace_outside_the_allowlist() {
        let reason = refusal(boundary().check(
            Resource::Secret,
            "kube-system",
            "dev-alice-credentials",
            Some(&secret("dev-alice-credentials", "kube-system").to_string()),
        ));
        assert!(reason.contains("\"kube-system\""), "{reason}");
        assert!(reason.contains("outside"), "{reason}");
        let reason = refusal(boundary().check(Resource::Pod, "default", "x", None));
        assert!(reason.contains("\"default\""), "{reason}");
    }

    #[test]
    fn refuses_resources_other_than_children() {
        for resource in [Resource::Sandbox, Resource::PodWarmPool, Resource::Event] {
            let reason = refusal(boundary().check(resource, NS, "x", None));
            assert!(reason.contains("only Pods"), "{reason}");
        }
    }

    #[test]
    fn refuses_a_manifest_of_another_kind() {
        let reason = refusal(boundary().check(
            Resource::Pod,
            NS,
            "dev-alice-credentials",
            Some(&secret("dev-alice-credentials", NS).to_string()),
        ));
        assert!(reason.contains("v1 Secret, not the v1 Pod"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_of_another_api_version() {
        let mut manifest = secret("dev-alice-credentials", NS);
        manifest["apiVersion"] = json!("v2");
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains("v2 Secret"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_that_is_not_json() {
        let reason = refusal(boundary().check(
            Resource::Secret,
            NS,
            "dev-alice-credentials",
            Some("{not json"),
        ));
        assert!(reason.contains("not valid JSON"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_that_is_not_an_object() {
        let reason = refusal(boundary().check(
            Resource::Secret,
            NS,
            "dev-alice-credentials",
            Some("[1, 2]"),
        ));
        assert!(reason.contains("not a JSON object"), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_named_otherwise() {
        let reason = refusal(check_secret(&secret("someone-else", NS)));
        assert!(
            reason.contains("metadata.name is \"someone-else\""),
            "{reason}"
        );
    }

    #[test]
    fn refuses_a_manifest_in_another_namespace() {
        let reason = refusal(check_secret(&secret(
            "dev-alice-credentials",
            "kube-system",
        )));
        assert!(
            reason.contains("metadata.namespace is \"kube-system\""),
            "{reason}"
        );
        let mut manifest = secret("dev-alice-credentials", NS);
        manifest["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains("metadata.namespace is \"\""), "{reason}");
    }

    #[test]
    fn refuses_names_that_are_not_dns_subdomains() {
        for name in ["", "Dev-Alice", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            let reason = refusal(boundary().check(Resource::Pod, NS, name, None));
            assert!(reason.contains("name"), "{name}: {reason}");
        }
        for name in ["a", "dev-alice", "a.b-c.d0", &"a".repeat(253)] {
            assert!(
                boundary().check(Resource::Pod, NS, name, None).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn an_empty_boundary_refuses_everything() {
        let reason = refusal(Boundary::default().check(Resource::Pod, NS, "a", None));
        assert!(reason.contains("(none)"), "{reason}");
    }
}
