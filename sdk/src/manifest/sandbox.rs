use crate::prelude::*;
use serde::Serialize;

use super::meta::{ObjectMeta, Owner};
use crate::bindings::{
    DesiredState, EgressMode, SandboxSpec, ServiceProtocol, ServiceSpec, ShutdownPolicy,
};
use crate::names;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Sandbox<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ObjectMeta<'a>,
    spec: Spec<'a>,
}

/// `Sandbox.spec` as the CRD in `deploy/crds/` lays it out.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    image: &'a str,
    desired_state: &'static str,
    rootfs_generation: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_timeout_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<Resources<'a>>,
    storage: Storage<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_class_name: Option<&'a str>,
    network: Network<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<Service<'a>>,
    shutdown_policy: &'static str,
}

#[derive(Serialize)]
struct Network<'a> {
    egress: &'static str,
    #[serde(rename = "allowCIDRs", skip_serializing_if = "<[String]>::is_empty")]
    allow_cidrs: &'a [String],
    #[serde(rename = "denyCIDRs", skip_serializing_if = "<[String]>::is_empty")]
    deny_cidrs: &'a [String],
}

#[derive(Serialize)]
struct Service<'a> {
    ports: Vec<ServicePort<'a>>,
}

#[derive(Serialize)]
struct ServicePort<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    port: u16,
    protocol: &'static str,
}

#[derive(Serialize)]
struct Resources<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Storage<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_class_name: Option<&'a str>,
    rootfs_size: &'a str,
    workspace_size: &'a str,
}

/// A member Sandbox of a warm pool, made from the pool's template and labelled with its
/// [`template_hash`]. A member is never a fork nor a claim itself, so those fields of the
/// template are not carried over; a template has no shutdown time (the pool refuses one).
pub fn pool_member(name: &str, namespace: &str, pool: Owner<'_>, template: &SandboxSpec) -> String {
    let spec = member_spec(template);
    let hash = super::digest(&super::to_json(&spec));
    let metadata = ObjectMeta::managed(name, namespace, pool)
        .label(names::POOL_LABEL, pool.name)
        .label(names::TEMPLATE_HASH_LABEL, &hash);
    super::to_json(&Sandbox {
        api_version: names::API_VERSION,
        kind: "Sandbox",
        metadata,
        spec,
    })
}

/// The `cubepod.io/template-hash` of the members made from `template`: the digest of the spec
/// they are created with, so that any field a member carries changes it, and nothing else does.
pub fn template_hash(template: &SandboxSpec) -> String {
    super::digest(&super::to_json(&member_spec(template)))
}

fn member_spec(template: &SandboxSpec) -> Spec<'_> {
    let resources = (template.cpu.is_some() || template.memory.is_some()).then_some(Resources {
        cpu: template.cpu.as_deref(),
        memory: template.memory.as_deref(),
    });
    Spec {
        image: &template.image,
        desired_state: match template.desired_state {
            DesiredState::Running => "Running",
            DesiredState::Paused => "Paused",
        },
        rootfs_generation: template.rootfs_generation,
        idle_timeout_seconds: template.idle_timeout_seconds,
        resources,
        storage: Storage {
            storage_class_name: template.storage_class.as_deref(),
            rootfs_size: &template.rootfs_size,
            workspace_size: &template.workspace_size,
        },
        runtime_class_name: template.runtime_class.as_deref(),
        network: Network {
            egress: match template.network.egress {
                EgressMode::Internet => "Internet",
                EgressMode::None => "None",
                EgressMode::Cluster => "Cluster",
            },
            allow_cidrs: &template.network.allow_cidrs,
            deny_cidrs: &template.network.deny_cidrs,
        },
        service: template.service.as_ref().map(service),
        shutdown_policy: match template.shutdown_policy {
            ShutdownPolicy::Delete => "Delete",
            ShutdownPolicy::Pause => "Pause",
        },
    }
}

fn service(spec: &ServiceSpec) -> Service<'_> {
    Service {
        ports: spec
            .ports
            .iter()
            .map(|p| ServicePort {
                name: &p.name,
                port: p.port,
                protocol: match p.protocol {
                    ServiceProtocol::Tcp => "TCP",
                    ServiceProtocol::Udp => "UDP",
                    ServiceProtocol::Sctp => "SCTP",
                },
            })
            .collect(),
    }
}
