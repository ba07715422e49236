"""For a policy's native unit tests (pytest): a client that records every call and keeps the
objects it made, and inputs to start from, the same the Rust SDK's tests use."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import names
from .errors import KubeError
from .manifest import template_hash
from .types import (
    ClusterNetwork,
    DesiredState,
    ObservedChildren,
    ObservedObject,
    ObservedPod,
    ObservedPvc,
    PoolInput,
    PoolMember,
    ReapCandidate,
    ReconcileInput,
    Sandbox,
    SandboxSpec,
    SandboxStatus,
    UpdateStrategy,
    WarmPool,
    WarmPoolSpec,
    WarmPoolStatus,
)

NAMESPACE = "cubepod-workloads"
NOW = 1_800_000_000
FRESH_TOKEN = "token-0123456789abcdef"


@dataclass
class Call:
    """One kube-client call: `verb` ("ensure-pvc"), the object's name and, for a write, its
    manifest parsed."""

    verb: str
    name: str
    manifest: Optional[Any] = None

    def summary(self) -> str:
        """A short form for assertions: "ensure-pvc a-workspace"."""
        return f"{self.verb} {self.name}"


_KINDS = {
    "pvc": "pvc", "pod": "pod", "secret": "secret",
    "network-policy": "networkpolicy", "service": "service",
}


@dataclass
class RecordingClient:
    """Records each call; keeps the objects that exist by "kind name" ("pvc a-workspace").
    `fail` makes the call whose summary it names fail once with its error."""

    calls: List[Call] = field(default_factory=list)
    #: The IP that `ensure-pod` answers with.
    pod_ip: Optional[str] = None
    fail: Optional[Tuple[str, KubeError]] = None
    objects: Dict[str, Any] = field(default_factory=dict)

    def summaries(self) -> List[str]:
        return [c.summary() for c in self.calls]

    def take_summaries(self) -> List[str]:
        out = self.summaries()
        self.calls.clear()
        return out

    def _record(self, call: Call) -> None:
        if self.fail is not None and self.fail[0] == call.summary():
            error = self.fail[1]
            self.fail = None
            raise error
        self.calls.append(call)

    @staticmethod
    def _parse(manifest: str) -> Any:
        try:
            return json.loads(manifest)
        except ValueError:
            return manifest

    def _write(self, verb: str, name: str, manifest: str, replace: bool) -> None:
        parsed = self._parse(manifest)
        self._record(Call(verb, name, parsed))
        key = f"{_KINDS[verb.split('-', 1)[1]]} {name}"
        if replace or key not in self.objects:
            self.objects[key] = parsed

    def _delete(self, verb: str, name: str) -> None:
        self._record(Call(verb, name))
        self.objects.pop(f"{_KINDS[verb.split('-', 1)[1]]} {name}", None)

    def ensure_pvc(self, namespace: str, name: str, manifest: str) -> None:
        self._write("ensure-pvc", name, manifest, False)

    def delete_pvc(self, namespace: str, name: str) -> None:
        self._delete("delete-pvc", name)

    def ensure_pod(self, namespace: str, name: str, manifest: str) -> Optional[str]:
        self._write("ensure-pod", name, manifest, False)
        return self.pod_ip

    def delete_pod(self, namespace: str, name: str) -> None:
        self._delete("delete-pod", name)

    def ensure_secret(self, namespace: str, name: str, manifest: str) -> None:
        self._write("ensure-secret", name, manifest, False)

    def delete_secret(self, namespace: str, name: str) -> None:
        self._delete("delete-secret", name)

    def apply_network_policy(self, namespace: str, name: str, manifest: str) -> None:
        self._write("apply-network-policy", name, manifest, True)

    def delete_network_policy(self, namespace: str, name: str) -> None:
        self._delete("delete-network-policy", name)

    def apply_service(self, namespace: str, name: str, manifest: str) -> None:
        self._write("apply-service", name, manifest, True)

    def delete_service(self, namespace: str, name: str) -> None:
        self._delete("delete-service", name)


def spec(image: str = "ghcr.io/cubepod/sandbox-base:1.0") -> SandboxSpec:
    return SandboxSpec(image=image)


def cluster_network() -> ClusterNetwork:
    return ClusterNetwork(
        cluster_cidrs=["10.244.0.0/16", "10.96.0.0/12"],
        dns_namespace="kube-system",
        dns_pod_labels=[("k8s-app", "kube-dns")],
        ingress_from=[],
        cluster_domain="cluster.local",
    )


def nothing_observed() -> ObservedChildren:
    return ObservedChildren()


def sandbox(name: str, image: str = "ghcr.io/cubepod/sandbox-base:1.0", *, paused: bool = False,
            forked_from: Optional[str] = None, rootfs_generation: int = 1,
            idle_timeout: Optional[int] = None, last_activity: Optional[int] = None,
            warm_pool: Optional[str] = None, deleting: bool = False) -> Sandbox:
    """A new Sandbox of namespace NAMESPACE, as the host hands it before any reconcile."""
    s = spec(image)
    s.desired_state = DesiredState.PAUSED if paused else DesiredState.RUNNING
    s.fork_from = forked_from
    s.rootfs_generation = rootfs_generation
    s.idle_timeout_seconds = idle_timeout
    s.warm_pool = warm_pool
    return Sandbox(
        namespace=NAMESPACE, name=name, uid=f"uid-{name}", generation=1, deleting=deleting,
        last_activity=last_activity, pool=None, claimed_by=None, labels=[], annotations=[],
        meta_truncated=False, spec=s, status=SandboxStatus(),
    )


def reconcile_input(sb: Sandbox, observed: Optional[ObservedChildren] = None) -> ReconcileInput:
    """The input of a reconcile of `sb` at NOW."""
    return ReconcileInput(
        now=NOW, sandbox=sb, observed=observed or nothing_observed(), fork_source=None,
        pool_candidates=[], claimed_member=None, fresh_token=FRESH_TOKEN,
        cluster_network=cluster_network(),
    )


def candidate(sb: Sandbox) -> ReapCandidate:
    """What the reaper is handed of `sb`."""
    return ReapCandidate(
        name=sb.name,
        running=sb.spec.desired_state == DesiredState.RUNNING and sb.status.idle_paused_at is None,
        idle_timeout_seconds=sb.spec.idle_timeout_seconds, last_activity=sb.last_activity,
        started_at=sb.status.started_at, pool=sb.pool, claimed_by=sb.claimed_by,
        claimed_member=sb.status.claimed_member, shutdown_time=sb.spec.shutdown_time,
        shutdown_policy=sb.spec.shutdown_policy,
    )


def observe(client: RecordingClient, sandbox_name: str, pods_ready: bool) -> ObservedChildren:
    """What the host's cache would show of the objects `client` holds for `sandbox_name`."""
    observed = nothing_observed()
    for key, manifest in sorted(client.objects.items()):
        labels = manifest.get("metadata", {}).get("labels", {}) if isinstance(manifest, dict) else {}
        if labels.get(names.SANDBOX_LABEL) != sandbox_name:
            continue
        kind, _, name = key.partition(" ")
        if kind == "pvc":
            observed.pvcs.append(ObservedPvc(name))
        elif kind == "pod":
            generation = labels.get(names.GENERATION_LABEL)
            observed.pod = ObservedPod(
                name, False, client.pod_ip if pods_ready else None, pods_ready,
                names.parse_u32(generation) if isinstance(generation, str) else None)
        elif kind == "secret":
            observed.secret = True
        elif kind in ("networkpolicy", "service"):
            annotations = manifest["metadata"].get("annotations", {})
            obj = ObservedObject(name, False, annotations.get(names.SPEC_HASH_ANNOTATION))
            if kind == "service":
                observed.service = obj
            else:
                observed.network_policy = obj
    return observed


def pool(name: str, replicas: int) -> WarmPool:
    return WarmPool(
        namespace=NAMESPACE, name=name, uid=f"uid-{name}", generation=1,
        spec=WarmPoolSpec(replicas, spec("ghcr.io/cubepod/sandbox-python:3.12"),
                          UpdateStrategy.RECREATE),
        status=WarmPoolStatus(),
    )


def member(name: str, ready: bool) -> PoolMember:
    """A member made from `pool`'s template (its `cubepod.io/template-hash`)."""
    return PoolMember(name, ready, False, False, template_hash(pool("", 0).spec.template))


def pool_input(p: WarmPool, members: List[PoolMember]) -> PoolInput:
    return PoolInput(now=NOW, pool=p, members=members, max_replicas=100)


def converged(input: ReconcileInput, status: SandboxStatus, client: RecordingClient) -> ReconcileInput:
    """`input` after a reconcile that returned `status` and made `client`'s objects, with the
    Pod ready: the next reconcile should change nothing."""
    out = copy.deepcopy(input)
    out.sandbox.status = copy.deepcopy(status)
    out.observed = observe(client, input.sandbox.name, True)
    return out
