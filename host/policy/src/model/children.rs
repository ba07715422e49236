//! What the cache keeps of a sandbox's children: what the policy is handed, and of a PVC the
//! Sandbox that owns it.

use serde_json::Value;

use super::meta::MetaView;
use crate::runtime::bindings::{ObservedChildren, ObservedObject, ObservedPod};

pub use super::names::{
    GENERATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL, SPEC_HASH_ANNOTATION,
};

/// The label selector that finds every child of every sandbox.
pub fn selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY},{SANDBOX_LABEL}")
}

/// No children observed.
pub fn empty() -> ObservedChildren {
    ObservedChildren {
        pvcs: Vec::new(),
        pod: None,
        secret: false,
        network_policy: None,
        service: None,
    }
}

/// A Pod as the contract's `observed-pod`.
pub fn pod(object: &Value) -> ObservedPod {
    let meta = MetaView::of(object);
    let status = object.get("status");
    let ready = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
    ObservedPod {
        name: meta.name.to_string(),
        deleting: meta.deleting,
        ip: status
            .and_then(|s| s.get("podIP"))
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(str::to_string),
        ready,
        rootfs_generation: meta.label(GENERATION_LABEL).and_then(|g| g.parse().ok()),
    }
}

/// The uid of the Sandbox whose managed child `object` is: its labels say managed-by and
/// which Sandbox, and its controller reference names that Sandbox. What a fork may clone is
/// decided by it (a label alone anyone who can create a PVC may write; a uid only the API
/// server hands out).
pub fn controller_uid(object: &Value) -> Option<&str> {
    let meta = MetaView::of(object);
    if meta.label(MANAGED_BY_LABEL) != Some(MANAGED_BY) {
        return None;
    }
    let sandbox = meta.label(SANDBOX_LABEL)?;
    let owner = object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|owner| owner.get("controller").and_then(Value::as_bool) == Some(true))?;
    let is = |key: &str, expected: &str| owner.get(key).and_then(Value::as_str) == Some(expected);
    if !(is("apiVersion", super::names::API_VERSION)
        && is("kind", "Sandbox")
        && is("name", sandbox))
    {
        return None;
    }
    owner
        .get("uid")
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty())
}

/// A NetworkPolicy or Service: its name, and the spec digest its writer left on it.
pub fn object(object: &Value) -> ObservedObject {
    let meta = MetaView::of(object);
    ObservedObject {
        spec_hash: meta.annotation(SPEC_HASH_ANNOTATION).map(str::to_string),
        deleting: meta.deleting,
        name: meta.name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use cubepod_kube::rest::Projection;

    /// The REST client keeps of a child only its metadata and status: what the cache makes of
    /// that is what it makes of the whole Pod (or NetworkPolicy).
    #[test]
    fn a_child_read_as_metadata_and_status_is_observed_as_the_whole() {
        let bytes = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"dev-alice","namespace":"work",
            "uid":"0b5c","deletionTimestamp":"2026-12-01T00:10:00Z","resourceVersion":"7",
            "labels":{"cubepod.io/sandbox":"dev-alice","cubepod.io/rootfs-generation":"2"},
            "annotations":{"cubepod.io/spec-hash":"h1"},"managedFields":[{"manager":"kubectl"}],
            "ownerReferences":[{"apiVersion":"cubepod.io/v1alpha1","kind":"Sandbox","name":"dev-alice","uid":"u","controller":true}]},
            "spec":{"containers":[{"name":"sandbox","image":"base:1"}]},
            "status":{"phase":"Running","podIP":"10.0.0.7","conditions":[{"type":"Ready","status":"True"}]}}"#;
        let whole: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        let kept = Projection::MetadataAndStatus.from_slice(bytes).unwrap();
        assert_ne!(kept, whole, "the projection drops the spec");
        assert_eq!(super::pod(&kept), super::pod(&whole));
        assert_eq!(super::object(&kept), super::object(&whole));
    }
}
