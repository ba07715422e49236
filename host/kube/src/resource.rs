//! The kinds of object cubepod-controller reads or writes.

use std::fmt;

/// The kinds of object cubepod-controller reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// cubepod.io/v1alpha1 Sandbox: what the controller reconciles.
    Sandbox,
    /// cubepod.io/v1alpha1 PodWarmPool: ready, unclaimed Sandboxes kept for claims.
    PodWarmPool,
    /// A sandbox's Pod, the Kata VM.
    Pod,
    /// A sandbox's block volumes: its rootfs and its workspace.
    PersistentVolumeClaim,
    /// A sandbox's access token.
    Secret,
    /// core/v1 Event: what the controller reports of a Sandbox.
    Event,
    /// coordination.k8s.io/v1 Lease: leader election.
    Lease,
    /// networking.k8s.io/v1 NetworkPolicy: a sandbox's default-deny network.
    NetworkPolicy,
    /// A sandbox's headless Service (`spec.service`).
    Service,
    /// cubepod.io/v1alpha1 PolicyRollout: a policy module rolled out, in the controller's
    /// namespace.
    PolicyRollout,
    /// core/v1 ConfigMap: a rollout's module and signature (`binaryData`).
    ConfigMap,
}

impl Resource {
    /// Every kind, in declaration order.
    pub const ALL: [Resource; 11] = [
        Resource::Sandbox,
        Resource::PodWarmPool,
        Resource::Pod,
        Resource::PersistentVolumeClaim,
        Resource::Secret,
        Resource::Event,
        Resource::Lease,
        Resource::NetworkPolicy,
        Resource::Service,
        Resource::PolicyRollout,
        Resource::ConfigMap,
    ];

    /// Every fact of this kind that the layers read, from one table: its row in this
    /// `match`, the one place a kind is described. What is behaviour rather than a fact (a
    /// containment rule, an API server default, a table's columns) is a `match` on the kind
    /// with no catch-all arm, so that a new kind is flagged by the compiler wherever one is
    /// needed.
    pub const fn descriptor(self) -> &'static Descriptor {
        match self {
            Resource::Sandbox => &SANDBOX,
            Resource::PodWarmPool => &POD_WARM_POOL,
            Resource::Pod => &POD,
            Resource::PersistentVolumeClaim => &PERSISTENT_VOLUME_CLAIM,
            Resource::Secret => &SECRET,
            Resource::Event => &EVENT,
            Resource::Lease => &LEASE,
            Resource::NetworkPolicy => &NETWORK_POLICY,
            Resource::Service => &SERVICE,
            Resource::PolicyRollout => &POLICY_ROLLOUT,
            Resource::ConfigMap => &CONFIG_MAP,
        }
    }

    /// The `kind` of objects of this resource: `PersistentVolumeClaim`.
    pub const fn kind(self) -> &'static str {
        self.descriptor().kind
    }

    /// The lower-case plural of the REST path, also the metric label.
    pub const fn plural(self) -> &'static str {
        self.descriptor().plural
    }

    /// `apiVersion` of objects of this kind.
    pub const fn api_version(self) -> &'static str {
        self.descriptor().api_version
    }

    /// Of a sandbox's child kind, what the layers know of it as one; `None` for every other
    /// kind.
    pub const fn child(self) -> Option<&'static Child> {
        self.descriptor().child.as_ref()
    }

    /// The sandbox's child kinds, in declaration order.
    pub fn children() -> impl Iterator<Item = Resource> {
        Resource::ALL.into_iter().filter(|r| r.is_child())
    }

    /// The REST path of the collection in `namespace`:
    /// `/api/v1/namespaces/ns/pods`, `/apis/cubepod.io/v1alpha1/namespaces/ns/sandboxes`.
    pub fn collection_path(self, namespace: &str) -> String {
        let d = self.descriptor();
        let root = if d.group.is_empty() { "api" } else { "apis" };
        format!(
            "/{root}/{}/namespaces/{namespace}/{}",
            d.api_version, d.plural
        )
    }

    /// The REST path of one object.
    pub fn object_path(self, namespace: &str, name: &str) -> String {
        format!("{}/{name}", self.collection_path(namespace))
    }

    /// The children a policy may write through `kube-client`.
    pub const fn is_child(self) -> bool {
        self.child().is_some()
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.plural())
    }
}

/// One kind as every layer sees it: the API's names for it, what the in-memory API server
/// serves of it, what the controller's RBAC grants on it (`deploy/rbac.yaml`, checked against
/// this table by a test), and for a sandbox's child kind, [`Child`].
#[derive(Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// `kind`: `PersistentVolumeClaim`.
    pub kind: &'static str,
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// `apiVersion`: `v1`, `networking.k8s.io/v1`.
    pub api_version: &'static str,
    /// The lower-case plural of the REST path, the RBAC resource and the metric label.
    pub plural: &'static str,
    /// A built-in kind's short names, as kube-apiserver serves them in discovery (`kubectl get
    /// svc`); a custom resource's are its CRD's (`deploy/crds/`).
    pub short_names: &'static [&'static str],
    /// A built-in kind's categories (`kubectl get all`); a custom resource's are its CRD's.
    pub categories: &'static [&'static str],
    /// How kube-apiserver's storage answers a delete: with the deleted object
    /// (`ReturnDeletedObject`: Pods, PVCs, Services), or with a Status.
    pub delete_returns_object: bool,
    /// Where a `status` is written, as the in-memory API server serves this kind.
    pub status: StatusWrites,
    /// The verbs the controller is granted on this kind in `deploy/rbac.yaml`, in any of its
    /// roles: what it does with the kind, and no more.
    pub rbac_verbs: &'static [&'static str],
    /// For a sandbox's child kind, what the layers know of it as a child.
    pub child: Option<Child>,
}

/// Where a kind's `status` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrites {
    /// Only through the `/status` subresource: a write of the object itself leaves its status
    /// as it was (the CRDs, whose `subresources.status` is set).
    Subresource,
    /// With the object, and through `/status` too (a Pod's, a PVC's: the kubelet's and the
    /// volume binder's).
    ObjectAndSubresource,
    /// With the object; no `/status` is served.
    Object,
}

/// A kind a sandbox owns: one object (or, for PVCs, several) per Sandbox, labelled with its
/// name and controlled by it, written by the policy through `kube-client` and held to a
/// containment rule of its own (`host/policy/src/containment/`, dispatched by kind in
/// `Containment::check_write`).
#[derive(Debug, PartialEq, Eq)]
pub struct Child {
    /// What of the object the controller reads: the REST client's projection of it
    /// (`rest::Projection`).
    pub read: ChildRead,
    /// Whether the policy applies it (`apply-*`: created, or patched in place to the manifest,
    /// its spec's digest in an annotation so that a change is seen) rather than ensures it
    /// (`ensure-*`: created once, recreated when it must change).
    pub applied: bool,
    /// Of an applied kind, the top-level spec fields a policy may write: an apply's merge
    /// patch sets those its manifest leaves out to null, so that the object holds exactly what
    /// the boundary admitted.
    pub spec_fields: &'static [&'static str],
    /// The `kube-client` function that writes it, as the contract names it (`ensure-pod`,
    /// `apply-service`): the name of the call in the call log.
    pub write_call: &'static str,
    /// The `kube-client` function that deletes it (`delete-pod`).
    pub delete_call: &'static str,
}

/// What of a child the controller reads, and so what the REST client keeps of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildRead {
    /// Its metadata and the few status fields the controller reads (a Pod's readiness and IP).
    MetadataAndStatus,
    /// Its metadata alone: lists and watches ask the server for `PartialObjectMetadata`, so
    /// that neither its spec nor a Secret's data is ever sent.
    Metadata,
}

/// What a sandbox's children are granted: watched, and created and deleted; never updated.
const CHILD_VERBS: &[&str] = &["get", "list", "watch", "create", "delete"];
/// An applied child is patched in place too.
const APPLIED_CHILD_VERBS: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];
/// What is only read: watched.
const READ_VERBS: &[&str] = &["get", "list", "watch"];
const CUBEPOD: &str = "cubepod.io";
const CUBEPOD_VERSION: &str = "cubepod.io/v1alpha1";

/// A kind that is not a child, served with its object's status.
const fn plain(
    kind: &'static str,
    group: &'static str,
    api_version: &'static str,
    plural: &'static str,
    rbac_verbs: &'static [&'static str],
) -> Descriptor {
    Descriptor {
        kind,
        group,
        api_version,
        plural,
        short_names: &[],
        categories: &[],
        delete_returns_object: false,
        status: StatusWrites::Object,
        rbac_verbs,
        child: None,
    }
}

/// A custom resource of ours: its status only through `/status`.
const fn custom(
    kind: &'static str,
    plural: &'static str,
    rbac_verbs: &'static [&'static str],
) -> Descriptor {
    Descriptor {
        status: StatusWrites::Subresource,
        ..plain(kind, CUBEPOD, CUBEPOD_VERSION, plural, rbac_verbs)
    }
}

const SANDBOX: Descriptor = custom(
    "Sandbox",
    "sandboxes",
    &["get", "list", "watch", "create", "patch", "delete"],
);
const POD_WARM_POOL: Descriptor = custom("PodWarmPool", "podwarmpools", READ_VERBS);
const POLICY_ROLLOUT: Descriptor = custom("PolicyRollout", "policyrollouts", READ_VERBS);
const POD: Descriptor = Descriptor {
    short_names: &["po"],
    categories: &["all"],
    delete_returns_object: true,
    status: StatusWrites::ObjectAndSubresource,
    child: Some(Child {
        read: ChildRead::MetadataAndStatus,
        applied: false,
        spec_fields: &[],
        write_call: "ensure-pod",
        delete_call: "delete-pod",
    }),
    ..plain("Pod", "", "v1", "pods", CHILD_VERBS)
};
const PERSISTENT_VOLUME_CLAIM: Descriptor = Descriptor {
    short_names: &["pvc"],
    delete_returns_object: true,
    status: StatusWrites::ObjectAndSubresource,
    child: Some(Child {
        read: ChildRead::Metadata,
        applied: false,
        spec_fields: &[],
        write_call: "ensure-pvc",
        delete_call: "delete-pvc",
    }),
    ..plain(
        "PersistentVolumeClaim",
        "",
        "v1",
        "persistentvolumeclaims",
        CHILD_VERBS,
    )
};
const SECRET: Descriptor = Descriptor {
    child: Some(Child {
        read: ChildRead::Metadata,
        applied: false,
        spec_fields: &[],
        write_call: "ensure-secret",
        delete_call: "delete-secret",
    }),
    ..plain("Secret", "", "v1", "secrets", CHILD_VERBS)
};
const NETWORK_POLICY: Descriptor = Descriptor {
    short_names: &["netpol"],
    child: Some(Child {
        read: ChildRead::Metadata,
        applied: true,
        spec_fields: &["podSelector", "policyTypes", "ingress", "egress"],
        write_call: "apply-network-policy",
        delete_call: "delete-network-policy",
    }),
    ..plain(
        "NetworkPolicy",
        "networking.k8s.io",
        "networking.k8s.io/v1",
        "networkpolicies",
        APPLIED_CHILD_VERBS,
    )
};
const SERVICE: Descriptor = Descriptor {
    short_names: &["svc"],
    categories: &["all"],
    delete_returns_object: true,
    child: Some(Child {
        read: ChildRead::Metadata,
        applied: true,
        spec_fields: &["selector", "ports", "publishNotReadyAddresses"],
        write_call: "apply-service",
        delete_call: "delete-service",
    }),
    ..plain("Service", "", "v1", "services", APPLIED_CHILD_VERBS)
};
const EVENT: Descriptor = Descriptor {
    short_names: &["ev"],
    ..plain("Event", "", "v1", "events", &["create", "patch"])
};
const LEASE: Descriptor = plain(
    "Lease",
    "coordination.k8s.io",
    "coordination.k8s.io/v1",
    "leases",
    &["get", "create", "patch"],
);
const CONFIG_MAP: Descriptor = Descriptor {
    short_names: &["cm"],
    ..plain("ConfigMap", "", "v1", "configmaps", READ_VERBS)
};

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize)]
    struct Manifest {
        kind: String,
        #[serde(default)]
        rules: Vec<Rule>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Rule {
        #[serde(default)]
        api_groups: Vec<String>,
        #[serde(default)]
        resources: Vec<String>,
        verbs: Vec<String>,
    }

    /// The verbs `deploy/rbac.yaml` grants on each (group, resource), over all its roles.
    fn granted() -> BTreeMap<(String, String), BTreeSet<String>> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/rbac.yaml");
        let text = std::fs::read_to_string(path).expect("deploy/rbac.yaml is readable");
        let mut granted: BTreeMap<_, BTreeSet<String>> = BTreeMap::new();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let manifest = Manifest::deserialize(document).expect("an object of deploy/rbac.yaml");
            if !manifest.kind.ends_with("Role") {
                continue;
            }
            for rule in manifest.rules {
                for group in &rule.api_groups {
                    for resource in &rule.resources {
                        granted
                            .entry((group.clone(), resource.clone()))
                            .or_default()
                            .extend(rule.verbs.iter().cloned());
                    }
                }
            }
        }
        granted
    }

    #[test]
    fn rbac_grants_each_kind_the_verbs_of_its_descriptor_and_no_more() {
        let granted = granted();
        for resource in Resource::ALL {
            let d = resource.descriptor();
            let expected: BTreeSet<String> = d.rbac_verbs.iter().map(|v| (*v).to_owned()).collect();
            let key = (d.group.to_owned(), d.plural.to_owned());
            assert_eq!(
                granted.get(&key),
                Some(&expected),
                "deploy/rbac.yaml grants on {} (group {:?}) other verbs than its descriptor's",
                d.plural,
                d.group,
            );
        }
    }

    #[test]
    fn each_descriptor_names_its_own_kind() {
        for resource in Resource::ALL {
            let d = resource.descriptor();
            let group = d.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            assert_eq!(group, d.group, "{}", d.kind);
            assert_eq!(d.plural, d.plural.to_lowercase(), "{}", d.kind);
            if let Some(child) = &d.child {
                assert_eq!(child.applied, !child.spec_fields.is_empty(), "{}", d.kind);
                let verb = if child.applied { "apply-" } else { "ensure-" };
                assert!(child.write_call.starts_with(verb), "{}", d.kind);
                assert!(child.delete_call.starts_with("delete-"), "{}", d.kind);
                assert_eq!(d.rbac_verbs.contains(&"patch"), child.applied, "{}", d.kind);
            }
        }
    }
}
