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

    /// The `kind` of objects of this resource: `PersistentVolumeClaim`.
    pub const fn kind(self) -> &'static str {
        match self {
            Resource::Sandbox => "Sandbox",
            Resource::PodWarmPool => "PodWarmPool",
            Resource::Pod => "Pod",
            Resource::PersistentVolumeClaim => "PersistentVolumeClaim",
            Resource::Secret => "Secret",
            Resource::Event => "Event",
            Resource::Lease => "Lease",
            Resource::NetworkPolicy => "NetworkPolicy",
            Resource::Service => "Service",
            Resource::PolicyRollout => "PolicyRollout",
            Resource::ConfigMap => "ConfigMap",
        }
    }

    /// The lower-case plural of the REST path, also the metric label.
    pub const fn plural(self) -> &'static str {
        match self {
            Resource::Sandbox => "sandboxes",
            Resource::PodWarmPool => "podwarmpools",
            Resource::Pod => "pods",
            Resource::PersistentVolumeClaim => "persistentvolumeclaims",
            Resource::Secret => "secrets",
            Resource::Event => "events",
            Resource::Lease => "leases",
            Resource::NetworkPolicy => "networkpolicies",
            Resource::Service => "services",
            Resource::PolicyRollout => "policyrollouts",
            Resource::ConfigMap => "configmaps",
        }
    }

    /// `apiVersion` of objects of this kind.
    pub const fn api_version(self) -> &'static str {
        match self {
            Resource::Sandbox | Resource::PodWarmPool | Resource::PolicyRollout => {
                "cubepod.io/v1alpha1"
            }
            Resource::Lease => "coordination.k8s.io/v1",
            Resource::NetworkPolicy => "networking.k8s.io/v1",
            _ => "v1",
        }
    }

    /// The REST path of the collection in `namespace`:
    /// `/api/v1/namespaces/ns/pods`, `/apis/cubepod.io/v1alpha1/namespaces/ns/sandboxes`.
    pub fn collection_path(self, namespace: &str) -> String {
        let version = self.api_version();
        let root = if version.contains('/') { "apis" } else { "api" };
        format!("/{root}/{version}/namespaces/{namespace}/{}", self.plural())
    }

    /// The REST path of one object.
    pub fn object_path(self, namespace: &str, name: &str) -> String {
        format!("{}/{name}", self.collection_path(namespace))
    }

    /// The children a policy may write through `kube-client`.
    pub const fn is_child(self) -> bool {
        matches!(
            self,
            Resource::Pod
                | Resource::PersistentVolumeClaim
                | Resource::Secret
                | Resource::NetworkPolicy
                | Resource::Service
        )
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.plural())
    }
}
