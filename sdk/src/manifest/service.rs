//! A sandbox's headless Service `<s>` (`spec.service`): a stable DNS name,
//! `<s>.<ns>.svc.<cluster-domain>`, for the sandbox's own Pod and the listed ports only.

use crate::prelude::*;

use alloc::collections::BTreeMap;

use serde::Serialize;

use super::meta::Owner;
use super::network_policy::protocol;
use super::planned::{Planned, Rendered};
use crate::bindings::ServiceSpec;
use crate::names;

/// The Service's spec and digest, built once per reconcile.
pub fn plan_service<'a>(owner: Owner<'a>, service: &ServiceSpec) -> Planned<'a> {
    Planned::new(
        "Service",
        "v1",
        names::service(owner.name),
        owner,
        &service_spec(owner, service),
    )
}

pub fn service(namespace: &str, owner: Owner<'_>, service: &ServiceSpec) -> Rendered {
    plan_service(owner, service).render(namespace)
}

/// Fields in the order of their JSON keys (see `spec_hash`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    /// `None`: headless, the name resolves to the Pod's own IP, no virtual IP to route.
    #[serde(rename = "clusterIP")]
    cluster_ip: &'static str,
    ports: Vec<Port<'a>>,
    selector: BTreeMap<&'static str, &'a str>,
}

#[derive(Serialize)]
struct Port<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    port: u16,
    protocol: &'static str,
}

fn service_spec<'a>(owner: Owner<'a>, service: &'a ServiceSpec) -> Spec<'a> {
    Spec {
        cluster_ip: "None",
        ports: service
            .ports
            .iter()
            .map(|p| Port {
                name: &p.name,
                port: p.port,
                protocol: protocol(p.protocol),
            })
            .collect(),
        selector: BTreeMap::from([(names::SANDBOX_LABEL, owner.name)]),
    }
}

/// `<name>.<namespace>.svc.<cluster-domain>`.
pub fn fqdn(name: &str, namespace: &str, cluster_domain: &str) -> String {
    format!("{}.{namespace}.svc.{cluster_domain}", names::service(name))
}
