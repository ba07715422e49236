use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::Serialize;

use crate::names;

/// The object that owns a child: garbage collection and `kubectl get -o wide` follow it.
#[derive(Clone, Copy)]
pub struct Owner<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ObjectMeta<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub labels: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<&'static str, String>,
    pub owner_references: [OwnerReference<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OwnerReference<'a> {
    api_version: &'static str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
    controller: bool,
    block_owner_deletion: bool,
}

impl<'a> ObjectMeta<'a> {
    /// Metadata of an object managed by cubepod-controller, owned by `owner`.
    pub fn managed(name: &'a str, namespace: &'a str, owner: Owner<'a>) -> Self {
        let mut labels = BTreeMap::new();
        labels.insert(names::MANAGED_BY_LABEL, names::MANAGED_BY.to_string());
        Self {
            name,
            namespace,
            labels,
            annotations: BTreeMap::new(),
            owner_references: [OwnerReference {
                api_version: names::API_VERSION,
                kind: owner.kind,
                name: owner.name,
                uid: owner.uid,
                controller: true,
                block_owner_deletion: true,
            }],
        }
    }

    /// Metadata of a child of the Sandbox `owner`.
    pub fn child_of(name: &'a str, namespace: &'a str, owner: Owner<'a>) -> Self {
        let mut meta = Self::managed(name, namespace, owner);
        meta.labels
            .insert(names::SANDBOX_LABEL, owner.name.to_string());
        meta
    }

    pub fn annotation(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.annotations.insert(key, value.into());
        self
    }

    pub fn label(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.labels.insert(key, value.into());
        self
    }
}
