//! What the cache keeps of a sandbox's children: just what the policy is handed.

use serde_json::Value;

use super::meta::MetaView;
use crate::runtime::bindings::{ObservedChildren, ObservedObject, ObservedPod, ObservedPvc};

pub use super::names::{
    GENERATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL, SPEC_HASH_ANNOTATION,
};

/// The label selector that finds every child of every sandbox.
pub fn selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY},{SANDBOX_LABEL}")
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

pub fn pvc(object: &Value) -> ObservedPvc {
    let meta = MetaView::of(object);
    ObservedPvc {
        name: meta.name.to_string(),
        deleting: meta.deleting,
    }
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
