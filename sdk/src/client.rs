//! The policy's only way out: a small trait over the `kube-client` import, so that the same
//! logic runs against the host in the component and against a recorder in native tests.

use crate::prelude::*;

use crate::bindings::KubeError;

pub type KubeResult<T> = Result<T, KubeError>;

pub trait KubeClient {
    fn ensure_pvc(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()>;
    fn delete_pvc(&mut self, namespace: &str, name: &str) -> KubeResult<()>;
    fn ensure_pod(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<Option<String>>;
    fn delete_pod(&mut self, namespace: &str, name: &str) -> KubeResult<()>;
    fn ensure_secret(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()>;
    fn delete_secret(&mut self, namespace: &str, name: &str) -> KubeResult<()>;
    fn apply_network_policy(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<()>;
    fn delete_network_policy(&mut self, namespace: &str, name: &str) -> KubeResult<()>;
    fn apply_service(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()>;
    fn delete_service(&mut self, namespace: &str, name: &str) -> KubeResult<()>;
}

/// The host's implementation, reached through the component's imports.
pub struct HostKubeClient;

impl KubeClient for HostKubeClient {
    fn ensure_pvc(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::ensure_pvc(namespace, name, manifest)
    }
    fn delete_pvc(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::delete_pvc(namespace, name)
    }
    fn ensure_pod(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<Option<String>> {
        crate::bindings::cubepod::controller::kube_client::ensure_pod(namespace, name, manifest)
    }
    fn delete_pod(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::delete_pod(namespace, name)
    }
    fn ensure_secret(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::ensure_secret(namespace, name, manifest)
    }
    fn delete_secret(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::delete_secret(namespace, name)
    }
    fn apply_network_policy(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::apply_network_policy(
            namespace, name, manifest,
        )
    }
    fn delete_network_policy(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::delete_network_policy(namespace, name)
    }
    fn apply_service(&mut self, namespace: &str, name: &str, manifest: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::apply_service(namespace, name, manifest)
    }
    fn delete_service(&mut self, namespace: &str, name: &str) -> KubeResult<()> {
        crate::bindings::cubepod::controller::kube_client::delete_service(namespace, name)
    }
}
