//! What the cache keeps of a sandbox's children: just what the policy is handed.

use serde_json::Value;

use super::meta::Meta;
use crate::runtime::bindings::{ObservedChildren, ObservedObject, ObservedPod, ObservedPvc};

pub use super::names::{
    GENERATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL, SPEC_HASH_ANNOTATION,
};

/// The label selector that finds every child of every sandbox.
pub fn selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY},{SANDBOX_LABEL}")
}

/// The sandbox a child belongs to, from its label.
pub fn owner_of(object: &Value) -> Option<(String, String)> {
    let meta = Meta::read(object);
    let sandbox = meta.labels.get(SANDBOX_LABEL)?.clone();
    Some((meta.namespace, sandbox))
}

pub fn empty() -> ObservedChildren {
    ObservedChildren {
        pvcs: Vec::new(),
        pod: None,
        secret: false,
        network_policy: None,
        service: None,
    }
}

pub fn pod(object: &Value) -> ObservedPod {
    let meta = Meta::read(object);
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
        name: meta.name,
        deleting: meta.deletion_timestamp.is_some(),
        ip: status
            .and_then(|s| s.get("podIP"))
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(str::to_string),
        ready,
        rootfs_generation: meta
            .labels
            .get(GENERATION_LABEL)
            .and_then(|g| g.parse().ok()),
    }
}

pub fn pvc(object: &Value) -> ObservedPvc {
    let meta = Meta::read(object);
    ObservedPvc {
        name: meta.name,
        deleting: meta.deletion_timestamp.is_some(),
    }
}

/// A NetworkPolicy or Service: its name, and the spec digest its writer left on it.
pub fn object(object: &Value) -> ObservedObject {
    let mut meta = Meta::read(object);
    ObservedObject {
        spec_hash: meta.annotations.remove(SPEC_HASH_ANNOTATION),
        deleting: meta.deletion_timestamp.is_some(),
        name: meta.name,
    }
}
