use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::Serialize;

use super::meta::{ObjectMeta, Owner};
use crate::names;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeRole {
    Rootfs,
    Workspace,
}

impl VolumeRole {
    fn label(self) -> &'static str {
        match self {
            VolumeRole::Rootfs => "rootfs",
            VolumeRole::Workspace => "workspace",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Pvc<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ObjectMeta<'a>,
    spec: PvcSpec<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PvcSpec<'a> {
    access_modes: [&'static str; 1],
    volume_mode: &'static str,
    resources: Resources<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_class_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_source: Option<DataSource<'a>>,
}

#[derive(Serialize)]
struct Resources<'a> {
    requests: BTreeMap<&'static str, &'a str>,
}

#[derive(Serialize)]
struct DataSource<'a> {
    kind: &'static str,
    name: &'a str,
}

/// A `volumeMode: Block` PVC. With `clone_of`, it is a CSI clone of that PVC.
#[allow(clippy::too_many_arguments)]
pub fn pvc(
    name: &str,
    namespace: &str,
    owner: Owner<'_>,
    role: VolumeRole,
    generation: Option<u32>,
    size: &str,
    storage_class: Option<&str>,
    clone_of: Option<&str>,
) -> String {
    let mut metadata =
        ObjectMeta::child_of(name, namespace, owner).label(names::VOLUME_LABEL, role.label());
    if let Some(generation) = generation {
        metadata = metadata.label(names::GENERATION_LABEL, generation.to_string());
    }
    let mut requests = BTreeMap::new();
    requests.insert("storage", size);
    super::to_json(&Pvc {
        api_version: "v1",
        kind: "PersistentVolumeClaim",
        metadata,
        spec: PvcSpec {
            access_modes: ["ReadWriteOnce"],
            volume_mode: "Block",
            resources: Resources { requests },
            storage_class_name: storage_class,
            data_source: clone_of.map(|name| DataSource {
                kind: "PersistentVolumeClaim",
                name,
            }),
        },
    })
}
