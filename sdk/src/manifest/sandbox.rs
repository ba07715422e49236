use serde::Serialize;

use super::meta::{ObjectMeta, Owner};
use crate::bindings::{DesiredState, SandboxSpec};
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

/// A member Sandbox of a warm pool, made from the pool's template. A member is never a fork
/// nor a claim itself, so those fields of the template are not carried over.
pub fn pool_member(
    name: &str,
    namespace: &str,
    pool: Owner<'_>,
    template: &SandboxSpec,
    template_hash: &str,
) -> String {
    let metadata = ObjectMeta::managed(name, namespace, pool)
        .label(names::POOL_LABEL, pool.name)
        .label(names::TEMPLATE_HASH_LABEL, template_hash);
    let resources = (template.cpu.is_some() || template.memory.is_some()).then_some(Resources {
        cpu: template.cpu.as_deref(),
        memory: template.memory.as_deref(),
    });
    super::to_json(&Sandbox {
        api_version: names::API_VERSION,
        kind: "Sandbox",
        metadata,
        spec: Spec {
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
        },
    })
}
