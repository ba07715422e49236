use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::Serialize;

use super::meta::{ObjectMeta, Owner};
use super::secret::TOKEN_KEY;
use crate::bindings::SandboxSpec;
use crate::names;

const ROOTFS_DEVICE: &str = "/dev/cubepod/rootfs";
const WORKSPACE_DEVICE: &str = "/dev/cubepod/workspace";

/// Formats a blank rootfs device from the image's `/cubepod/rootfs` tree; a device that already
/// holds a filesystem is left alone, so a restarted Pod keeps its root filesystem. `mkfs -d`
/// needs no mount, hence no privilege.
const PREPARE_ROOTFS: &str = r#"set -eu
if blkid "$CUBEPOD_ROOTFS_DEVICE" >/dev/null 2>&1; then
  echo "rootfs generation $CUBEPOD_ROOTFS_GENERATION already prepared"
  exit 0
fi
mkfs.ext4 -q -L "cubepod-g$CUBEPOD_ROOTFS_GENERATION" -d /cubepod/rootfs "$CUBEPOD_ROOTFS_DEVICE"
echo "rootfs generation $CUBEPOD_ROOTFS_GENERATION prepared""#;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Pod<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ObjectMeta<'a>,
    spec: PodSpec<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec<'a> {
    runtime_class_name: &'a str,
    restart_policy: &'static str,
    // The sandbox runs user code: it gets no Kubernetes API credentials.
    automount_service_account_token: bool,
    enable_service_links: bool,
    init_containers: [Container<'a>; 1],
    containers: [Container<'a>; 1],
    volumes: [Volume<'a>; 2],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Container<'a> {
    name: &'static str,
    image: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<[&'static str; 3]>,
    env: Vec<EnvVar<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<ResourceRequirements<'a>>,
    volume_devices: Vec<VolumeDevice>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvVar<'a> {
    name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_from: Option<EnvVarSource<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvVarSource<'a> {
    secret_key_ref: SecretKeySelector<'a>,
}

#[derive(Serialize)]
struct SecretKeySelector<'a> {
    name: &'a str,
    key: &'static str,
}

#[derive(Serialize)]
struct ResourceRequirements<'a> {
    requests: BTreeMap<&'static str, &'a str>,
    limits: BTreeMap<&'static str, &'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct VolumeDevice {
    name: &'static str,
    device_path: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Volume<'a> {
    name: &'static str,
    persistent_volume_claim: ClaimSource<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimSource<'a> {
    claim_name: &'a str,
}

fn env(name: &'static str, value: impl Into<String>) -> EnvVar<'static> {
    EnvVar {
        name,
        value: Some(value.into()),
        value_from: None,
    }
}

fn rootfs_device() -> VolumeDevice {
    VolumeDevice {
        name: "rootfs",
        device_path: ROOTFS_DEVICE,
    }
}

/// Requests equal limits: Kata sizes the VM from the limits, and equal values give the Pod the
/// Guaranteed QoS class.
fn resources(spec: &SandboxSpec) -> Option<ResourceRequirements<'_>> {
    let mut amounts = BTreeMap::new();
    if let Some(cpu) = &spec.cpu {
        amounts.insert("cpu", cpu.as_str());
    }
    if let Some(memory) = &spec.memory {
        amounts.insert("memory", memory.as_str());
    }
    (!amounts.is_empty()).then(|| ResourceRequirements {
        requests: amounts.clone(),
        limits: amounts,
    })
}

/// The sandbox's Kata Pod, attaching both block volumes as raw devices.
pub fn pod(
    namespace: &str,
    owner: Owner<'_>,
    spec: &SandboxSpec,
    rootfs_pvc: &str,
    workspace_pvc: &str,
    secret: &str,
) -> String {
    let name = owner.name;
    let generation = spec.rootfs_generation.to_string();
    let metadata = ObjectMeta::child_of(name, namespace, owner)
        .label(names::GENERATION_LABEL, generation.clone());
    let prepare = Container {
        name: "prepare-rootfs",
        image: &spec.image,
        command: Some(["/bin/sh", "-c", PREPARE_ROOTFS]),
        env: vec![
            env("CUBEPOD_ROOTFS_DEVICE", ROOTFS_DEVICE),
            env("CUBEPOD_ROOTFS_GENERATION", generation),
        ],
        resources: None,
        volume_devices: vec![rootfs_device()],
    };
    let sandbox = Container {
        name: "sandbox",
        image: &spec.image,
        command: None,
        env: vec![
            env("CUBEPOD_SANDBOX", name),
            env("CUBEPOD_ROOTFS_DEVICE", ROOTFS_DEVICE),
            env("CUBEPOD_WORKSPACE_DEVICE", WORKSPACE_DEVICE),
            EnvVar {
                name: "CUBEPOD_TOKEN",
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: SecretKeySelector {
                        name: secret,
                        key: TOKEN_KEY,
                    },
                }),
            },
        ],
        resources: resources(spec),
        volume_devices: vec![
            rootfs_device(),
            VolumeDevice {
                name: "workspace",
                device_path: WORKSPACE_DEVICE,
            },
        ],
    };
    super::to_json(&Pod {
        api_version: "v1",
        kind: "Pod",
        metadata,
        spec: PodSpec {
            runtime_class_name: spec
                .runtime_class
                .as_deref()
                .unwrap_or(names::DEFAULT_RUNTIME_CLASS),
            restart_policy: "Always",
            automount_service_account_token: false,
            enable_service_links: false,
            init_containers: [prepare],
            containers: [sandbox],
            volumes: [
                Volume {
                    name: "rootfs",
                    persistent_volume_claim: ClaimSource {
                        claim_name: rootfs_pvc,
                    },
                },
                Volume {
                    name: "workspace",
                    persistent_volume_claim: ClaimSource {
                        claim_name: workspace_pvc,
                    },
                },
            ],
        },
    })
}
