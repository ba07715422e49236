//! What the cache keeps of a sandbox's children: just what the policy is handed.

use serde_json::Value;

use super::meta::Meta;
use crate::runtime::bindings::{ObservedChildren, ObservedPod, ObservedPvc};

pub use super::names::{GENERATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SANDBOX_LABEL};

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
