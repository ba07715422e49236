//! A sandbox's headless Service `<s>` (`spec.service`): a stable DNS name,
//! `<s>.<ns>.svc.<cluster-domain>`, for the sandbox's own Pod and the listed ports only.

use serde_json::{Map, Value, json};

use super::meta::{ObjectMeta, Owner};
use super::network_policy::{Rendered, protocol, render, spec_hash};
use crate::bindings::ServiceSpec;
use crate::names;

pub fn service(namespace: &str, owner: Owner<'_>, service: &ServiceSpec) -> Rendered {
    let name = names::service(owner.name);
    render(
        "Service",
        "v1",
        ObjectMeta::child_of(&name, namespace, owner),
        service_spec(owner, service),
    )
}

/// The `cubepod.io/spec-hash` of [`service`]'s manifest, without rendering the rest of it.
pub fn service_hash(owner: Owner<'_>, service: &ServiceSpec) -> String {
    spec_hash(&service_spec(owner, service))
}

fn service_spec(owner: Owner<'_>, service: &ServiceSpec) -> Value {
    let ports: Vec<Value> = service
        .ports
        .iter()
        .map(|p| {
            let mut port = Map::new();
            if !p.name.is_empty() {
                port.insert("name".into(), Value::String(p.name.clone()));
            }
            port.insert("port".into(), json!(p.port));
            port.insert("protocol".into(), json!(protocol(p.protocol)));
            Value::Object(port)
        })
        .collect();
    json!({
        // Headless: the name resolves to the Pod's own IP, no virtual IP to route.
        "clusterIP": "None",
        "selector": {names::SANDBOX_LABEL: owner.name},
        "ports": ports,
    })
}

/// `<name>.<namespace>.svc.<cluster-domain>`.
pub fn fqdn(name: &str, namespace: &str, cluster_domain: &str) -> String {
    format!("{}.{namespace}.svc.{cluster_domain}", names::service(name))
}
