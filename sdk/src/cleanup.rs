//! A Sandbox being deleted: its children go first, then the host removes the finalizer.

use crate::bindings::{
    CleanupOutput, ConditionStatus, ObservedChildren, Sandbox, SandboxPhase, Timestamp,
};
use crate::client::{KubeClient, KubeResult};
use crate::names;
use crate::status::{READY, set_condition};

pub fn cleanup(
    client: &mut impl KubeClient,
    now: Timestamp,
    sandbox: &Sandbox,
    observed: &ObservedChildren,
) -> KubeResult<CleanupOutput> {
    let namespace = sandbox.namespace.as_str();
    if let Some(pod) = observed.pod.as_ref().filter(|p| !p.deleting) {
        client.delete_pod(namespace, &pod.name)?;
    }
    for pvc in observed.pvcs.iter().filter(|p| !p.deleting) {
        client.delete_pvc(namespace, &pvc.name)?;
    }
    if observed.secret {
        client.delete_secret(namespace, &names::secret(&sandbox.name))?;
    }
    if observed.service.as_ref().is_some_and(|s| !s.deleting) {
        client.delete_service(namespace, &names::service(&sandbox.name))?;
    }
    // Only once the Pod is gone: a terminating Pod still runs, and must not run unguarded.
    if observed.pod.is_none()
        && observed
            .network_policy
            .as_ref()
            .is_some_and(|p| !p.deleting)
    {
        client.delete_network_policy(namespace, &names::network_policy(&sandbox.name))?;
    }
    let mut status = sandbox.status.clone();
    status.phase = SandboxPhase::Terminating;
    status.pod_ip = None;
    status.service_fqdn = None;
    set_condition(
        &mut status.conditions,
        READY,
        ConditionStatus::False,
        "Deleting",
        "deleting the Pod, both volumes, the credentials, the Service and the NetworkPolicy",
        now,
    );
    // Done only once the cache shows nothing left: a delete call accepted is not yet a child gone.
    let done = observed.pod.is_none()
        && observed.pvcs.is_empty()
        && !observed.secret
        && observed.network_policy.is_none()
        && observed.service.is_none();
    Ok(CleanupOutput { done, status })
}
