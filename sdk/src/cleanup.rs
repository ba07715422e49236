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
    let mut status = sandbox.status.clone();
    status.phase = SandboxPhase::Terminating;
    status.pod_ip = None;
    set_condition(
        &mut status.conditions,
        READY,
        ConditionStatus::False,
        "Deleting",
        "deleting the Pod, both volumes and the credentials",
        now,
    );
    // Done only once the cache shows nothing left: a delete call accepted is not yet a child gone.
    let done = observed.pod.is_none() && observed.pvcs.is_empty() && !observed.secret;
    Ok(CleanupOutput { done, status })
}
