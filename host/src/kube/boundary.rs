//! The boundary every `kube-client` call of a policy passes before it reaches the cluster
//! (DESIGN.md, "Rules of the boundary"): the configured namespaces only, Pods, PVCs and Secrets
//! only, and only objects that cubepod-controller manages. A refusal says what and why; it
//! goes back to the guest as `kube-error::refused` and is logged and counted by the caller.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Resource;

/// The label every child carries, and its value.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "cubepod-controller";
/// The label naming the child's Sandbox.
pub const SANDBOX_LABEL: &str = "cubepod.io/sandbox";

/// What a policy may write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Boundary {
    /// The namespaces the controller serves.
    pub namespaces: BTreeSet<String>,
}

impl Boundary {
    pub fn new<I, S>(namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            namespaces: namespaces.into_iter().map(Into::into).collect(),
        }
    }

    /// Admits or refuses one call. For a write (`manifest` given) returns the parsed manifest
    /// to send. A delete carries no manifest, so only its namespace, kind and name are checked
    /// here: the object it deletes is named by the policy's own child names in a namespace the
    /// controller owns; checking the live object's labels would cost a read per delete, and is
    /// the caller's to do if it wants to.
    pub fn check(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: Option<&str>,
    ) -> Result<Option<Value>, String> {
        let what = format!("{} {namespace}/{name}", resource.kind());
        if !resource.is_child() {
            return Err(format!(
                "{what}: a policy may write only Pods, PersistentVolumeClaims and Secrets"
            ));
        }
        if !self.namespaces.contains(namespace) {
            return Err(format!(
                "{what}: namespace {namespace:?} is outside the controller's namespaces ({})",
                self.list()
            ));
        }
        if let Err(why) = dns1123_subdomain(name) {
            return Err(format!("{what}: name {name:?} {why}"));
        }
        let Some(manifest) = manifest else {
            return Ok(None);
        };
        let object: Value = serde_json::from_str(manifest)
            .map_err(|e| format!("{what}: the manifest is not valid JSON: {e}"))?;
        let Some(fields) = object.as_object() else {
            return Err(format!("{what}: the manifest is not a JSON object"));
        };
        let text = |key: &str| fields.get(key).and_then(Value::as_str);
        if text("kind") != Some(resource.kind())
            || text("apiVersion") != Some(resource.api_version())
        {
            return Err(format!(
                "{what}: the manifest is a {} {}, not the {} {} this call writes",
                text("apiVersion").unwrap_or("<no apiVersion>"),
                text("kind").unwrap_or("<no kind>"),
                resource.api_version(),
                resource.kind(),
            ));
        }
        let metadata = object.get("metadata");
        let meta = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Value::as_str);
        if meta("name") != Some(name) {
            return Err(format!(
                "{what}: the manifest's metadata.name is {:?}, not the call's {name:?}",
                meta("name").unwrap_or_default()
            ));
        }
        if meta("namespace") != Some(namespace) {
            return Err(format!(
                "{what}: the manifest's metadata.namespace is {:?}, not the call's {namespace:?}",
                meta("namespace").unwrap_or_default()
            ));
        }
        let label = |key: &str| {
            metadata
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
        };
        if label(MANAGED_BY_LABEL) != Some(MANAGED_BY) {
            return Err(format!(
                "{what}: the manifest lacks the label {MANAGED_BY_LABEL}: {MANAGED_BY}, so \
                 cubepod-controller would not manage the object"
            ));
        }
        if label(SANDBOX_LABEL).is_none_or(str::is_empty) {
            return Err(format!(
                "{what}: the manifest lacks the label {SANDBOX_LABEL} naming its Sandbox"
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

/// Kubernetes' rule for object names (RFC 1123 subdomain): at most 253 characters, dot-separated
/// labels of lower-case alphanumerics and '-', each starting and ending alphanumeric.
fn dns1123_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > 253 {
        return Err("is longer than 253 characters");
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = name.split('.').all(|label| {
        label.starts_with(alnum)
            && label.ends_with(alnum)
            && label.chars().all(|c| alnum(c) || c == '-')
    });
    if ok {
        Ok(())
    } else {
        Err("is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn check_secret(manifest: &Value) -> Result<Option<Value>, String> {
        boundary().check(
            Resource::Secret,
            NS,
            "dev-alice-credentials",
            Some(&manifest.to_string()),
        )
    }

    fn refusal(result: Result<Option<Value>, String>) -> String {
        match result {
            Err(reason) => reason,
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
    fn refuses_an_unmanaged_manifest() {
        let mut manifest = secret("dev-alice-credentials", NS);
        manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("helm");
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains(MANAGED_BY_LABEL), "{reason}");
        manifest["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(MANAGED_BY_LABEL);
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains(MANAGED_BY_LABEL), "{reason}");
    }

    #[test]
    fn refuses_a_manifest_without_its_sandbox() {
        let mut manifest = secret("dev-alice-credentials", NS);
        manifest["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(SANDBOX_LABEL);
        let reason = refusal(check_secret(&manifest));
        assert!(reason.contains(SANDBOX_LABEL), "{reason}");
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
