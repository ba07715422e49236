"""A Sandbox being deleted: its children go first, then the host removes the finalizer."""

from __future__ import annotations

import copy

from . import names
from .client import KubeClient
from .status import READY, set_condition
from .types import CleanupOutput, ConditionStatus, ObservedChildren, Sandbox, SandboxPhase, Timestamp


def cleanup(client: KubeClient, now: Timestamp, sandbox: Sandbox,
            observed: ObservedChildren) -> CleanupOutput:
    namespace = sandbox.namespace
    if observed.pod is not None and not observed.pod.deleting:
        client.delete_pod(namespace, observed.pod.name)
    for pvc in observed.pvcs:
        if not pvc.deleting:
            client.delete_pvc(namespace, pvc.name)
    if observed.secret:
        client.delete_secret(namespace, names.secret(sandbox.name))
    if observed.service is not None and not observed.service.deleting:
        client.delete_service(namespace, names.service(sandbox.name))
    # Only once the Pod is gone: a terminating Pod still runs, and must not run unguarded.
    if (observed.pod is None and observed.network_policy is not None
            and not observed.network_policy.deleting):
        client.delete_network_policy(namespace, names.network_policy(sandbox.name))
    status = copy.deepcopy(sandbox.status)
    status.phase = SandboxPhase.TERMINATING
    status.pod_ip = None
    status.service_fqdn = None
    set_condition(status.conditions, READY, ConditionStatus.FALSE, "Deleting",
                  "deleting the Pod, both volumes, the credentials, the Service and the "
                  "NetworkPolicy", now)
    # Done only once the cache shows nothing left: a delete accepted is not yet a child gone.
    done = (observed.pod is None and not observed.pvcs and not observed.secret
            and observed.network_policy is None and observed.service is None)
    return CleanupOutput(done, status)
