"""Kubernetes JSON for every object the default policy writes, byte for byte as the Rust SDK
writes it (keys in the same order, maps sorted, no whitespace), and the digests by which a
policy tells from the cache alone whether an object it wrote is still what it would write."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import cidr as _cidr
from . import names
from .cidr import Cidr
from .types import (
    ClusterNetwork,
    DesiredState,
    EgressMode,
    NetworkSpec,
    SandboxSpec,
    ServiceProtocol,
    ServiceSpec,
    ShutdownPolicy,
)


@dataclass(frozen=True)
class Owner:
    """The object that owns a child: garbage collection and `kubectl get -o wide` follow it."""

    kind: str
    name: str
    uid: str


class VolumeRole:
    ROOTFS = "rootfs"
    WORKSPACE = "workspace"


def to_json(value: Any) -> str:
    """Compact JSON, escaped as serde_json escapes it (non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def digest(text: str) -> str:
    """64-bit FNV-1a of `text`'s UTF-8 bytes, as 16 hex digits (a label value). A digest to
    tell specs apart, not a security boundary."""
    h = 0xCBF2_9CE4_8422_2325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x0000_0100_0000_01B3) & 0xFFFF_FFFF_FFFF_FFFF
    return "%016x" % h


def spec_hash(spec: Any) -> str:
    """The digest of a spec read back from the API (a parsed JSON value): its keys sorted, as
    the policy writes them."""
    return digest(to_json(_sorted_value(spec)))


def _sorted_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_value(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_value(v) for v in value]
    return value


def _sorted(pairs: Iterable[Tuple[str, Any]]) -> Dict[str, Any]:
    """A map as Rust's BTreeMap holds it: sorted by key, a key given twice keeping its last value."""
    d = dict(pairs)
    return {k: d[k] for k in sorted(d)}


def _managed(name: str, namespace: str, owner: Owner, labels: Dict[str, str],
             annotations: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    meta: Dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": _sorted([(names.MANAGED_BY_LABEL, names.MANAGED_BY), *labels.items()]),
    }
    if annotations:
        meta["annotations"] = _sorted(annotations.items())
    meta["ownerReferences"] = [
        {
            "apiVersion": names.API_VERSION,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return meta


def _child_of(name: str, namespace: str, owner: Owner, labels: Optional[Dict[str, str]] = None,
              annotations: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    return _managed(name, namespace, owner, {names.SANDBOX_LABEL: owner.name, **(labels or {})},
                    annotations)


@dataclass(frozen=True)
class Rendered:
    """A manifest and the digest of its spec."""

    manifest: str
    spec_hash: str


class Planned:
    """A child's spec, serialized once, with its digest: a reconcile compares the digest with
    the cache's and renders the manifest only when they differ."""

    def __init__(self, kind: str, api_version: str, name: str, owner: Owner, spec: Dict[str, Any]):
        self.kind = kind
        self.api_version = api_version
        self.name = name
        self.owner = owner
        self.spec_json = to_json(spec)
        self.spec_hash = digest(self.spec_json)

    def render(self, namespace: str) -> Rendered:
        head = to_json({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": _child_of(self.name, namespace, self.owner,
                                  annotations={names.SPEC_HASH_ANNOTATION: self.spec_hash}),
        })
        return Rendered(head[:-1] + ',"spec":' + self.spec_json + "}", self.spec_hash)


# --- PVC, Secret, Pod -------------------------------------------------------------------------

def pvc(name: str, namespace: str, owner: Owner, role: str, generation: Optional[int], size: str,
        storage_class: Optional[str], clone_of: Optional[str]) -> str:
    """A `volumeMode: Block` PVC; with `clone_of`, a CSI clone of that PVC."""
    labels = {names.VOLUME_LABEL: role}
    if generation is not None:
        labels[names.GENERATION_LABEL] = str(generation)
    spec: Dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Block",
        "resources": {"requests": {"storage": size}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if clone_of is not None:
        spec["dataSource"] = {"kind": "PersistentVolumeClaim", "name": clone_of}
    return to_json({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _child_of(name, namespace, owner, labels),
        "spec": spec,
    })


#: The key of the sandbox's access token in its Secret.
TOKEN_KEY = "token"


def secret(name: str, namespace: str, owner: Owner, token: str) -> str:
    return to_json({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _child_of(name, namespace, owner),
        "type": "Opaque",
        # stringData lets the API server do the base64.
        "stringData": {TOKEN_KEY: token},
    })


ROOTFS_DEVICE = "/dev/cubepod/rootfs"
WORKSPACE_DEVICE = "/dev/cubepod/workspace"
#: Formats a blank rootfs device from the image's `/cubepod/rootfs` tree; a device that already
#: holds a filesystem is left alone.
PREPARE_ROOTFS = """set -eu
if blkid "$CUBEPOD_ROOTFS_DEVICE" >/dev/null 2>&1; then
  echo "rootfs generation $CUBEPOD_ROOTFS_GENERATION already prepared"
  exit 0
fi
mkfs.ext4 -q -L "cubepod-g$CUBEPOD_ROOTFS_GENERATION" -d /cubepod/rootfs "$CUBEPOD_ROOTFS_DEVICE"
echo "rootfs generation $CUBEPOD_ROOTFS_GENERATION prepared\""""


def _env(name: str, value: str) -> Dict[str, Any]:
    return {"name": name, "value": value}


def pod(namespace: str, owner: Owner, spec: SandboxSpec, rootfs_pvc: str, workspace_pvc: str,
        secret_name: str) -> str:
    """The sandbox's Kata Pod, attaching both block volumes as raw devices."""
    generation = str(spec.rootfs_generation)
    rootfs_device = {"name": "rootfs", "devicePath": ROOTFS_DEVICE}
    prepare = {
        "name": "prepare-rootfs",
        "image": spec.image,
        "command": ["/bin/sh", "-c", PREPARE_ROOTFS],
        "env": [_env("CUBEPOD_ROOTFS_DEVICE", ROOTFS_DEVICE),
                _env("CUBEPOD_ROOTFS_GENERATION", generation)],
        "volumeDevices": [rootfs_device],
    }
    sandbox: Dict[str, Any] = {
        "name": "sandbox",
        "image": spec.image,
        "env": [
            _env("CUBEPOD_SANDBOX", owner.name),
            _env("CUBEPOD_ROOTFS_DEVICE", ROOTFS_DEVICE),
            _env("CUBEPOD_WORKSPACE_DEVICE", WORKSPACE_DEVICE),
            {"name": "CUBEPOD_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": secret_name, "key": TOKEN_KEY}}},
        ],
    }
    # Requests equal limits: Kata sizes the VM from the limits, and equal values give the Pod
    # the Guaranteed QoS class.
    amounts = _sorted([(k, v) for k, v in (("cpu", spec.cpu), ("memory", spec.memory)) if v is not None])
    if amounts:
        sandbox["resources"] = {"requests": amounts, "limits": dict(amounts)}
    sandbox["volumeDevices"] = [rootfs_device,
                                {"name": "workspace", "devicePath": WORKSPACE_DEVICE}]
    return to_json({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _child_of(owner.name, namespace, owner, {names.GENERATION_LABEL: generation}),
        "spec": {
            "runtimeClassName": spec.runtime_class if spec.runtime_class is not None
            else names.DEFAULT_RUNTIME_CLASS,
            "restartPolicy": "Always",
            # The sandbox runs user code: it gets no Kubernetes API credentials.
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "initContainers": [prepare],
            "containers": [sandbox],
            "volumes": [
                {"name": "rootfs", "persistentVolumeClaim": {"claimName": rootfs_pvc}},
                {"name": "workspace", "persistentVolumeClaim": {"claimName": workspace_pvc}},
            ],
        },
    })


# --- Service ----------------------------------------------------------------------------------

_PROTOCOLS = {ServiceProtocol.TCP: "TCP", ServiceProtocol.UDP: "UDP", ServiceProtocol.SCTP: "SCTP"}


def protocol(p: ServiceProtocol) -> str:
    return _PROTOCOLS[p]


def _ports(service: ServiceSpec) -> List[Dict[str, Any]]:
    ports = []
    for p in service.ports:
        port: Dict[str, Any] = {"name": p.name} if p.name != "" else {}
        port["port"] = p.port
        port["protocol"] = protocol(p.protocol)
        ports.append(port)
    return ports


def plan_service(owner: Owner, service: ServiceSpec) -> Planned:
    """The headless Service `<s>`: a stable DNS name for the sandbox's own Pod."""
    spec = {
        "clusterIP": "None",
        "ports": _ports(service),
        "selector": {names.SANDBOX_LABEL: owner.name},
    }
    return Planned("Service", "v1", names.service(owner.name), owner, spec)


def fqdn(name: str, namespace: str, cluster_domain: str) -> str:
    return f"{names.service(name)}.{namespace}.svc.{cluster_domain}"


# --- NetworkPolicy ----------------------------------------------------------------------------

_BLOCKED = [(Cidr.parse(text), text) for text in names.BLOCKED_FOR_INTERNET]
_EVERYWHERE = [(Cidr.parse("0.0.0.0/0"), "0.0.0.0/0"), (Cidr.parse("::/0"), "::/0")]


def plan_network_policy(owner: Owner, spec: SandboxSpec, cluster: ClusterNetwork) -> Planned:
    """The NetworkPolicy `<s>-network`: default-deny for the sandbox's Pod both ways, then
    exactly what `spec.network` and `spec.service` ask for."""
    return plan_network_policy_of(owner, spec.network, spec.service, cluster)


def plan_network_policy_of(owner: Owner, network: NetworkSpec, service: Optional[ServiceSpec],
                           cluster: ClusterNetwork) -> Planned:
    spec: Dict[str, Any] = {}
    egress = _egress(network, cluster)
    if egress:
        spec["egress"] = egress
    ingress = _ingress(service, cluster)
    if ingress:
        spec["ingress"] = ingress
    spec["podSelector"] = {"matchLabels": {names.SANDBOX_LABEL: owner.name}}
    spec["policyTypes"] = ["Ingress", "Egress"]
    return Planned("NetworkPolicy", "networking.k8s.io/v1", names.network_policy(owner.name),
                   owner, spec)


def _match_labels(labels: List[Tuple[str, str]]) -> Dict[str, Any]:
    return {"matchLabels": _sorted(labels)}


def _ingress(service: Optional[ServiceSpec], cluster: ClusterNetwork) -> List[Dict[str, Any]]:
    """From the `--ingress-from` pods of any namespace, to the Service's ports only."""
    if service is None or not service.ports or not cluster.ingress_from:
        return []
    ports = [{"port": p.port, "protocol": protocol(p.protocol)} for p in service.ports]
    return [{
        "from": [{"namespaceSelector": {}, "podSelector": _match_labels(cluster.ingress_from)}],
        "ports": ports,
    }]


Cut = Tuple[Cidr, str]


def _parsed(texts: List[str]) -> List[Cut]:
    out = []
    for text in texts:
        c = Cidr.parse(text)
        if c is not None:
            out.append((c, text))
    return out


def _with_forms(cuts: List[Cut]) -> List[Cut]:
    """`cuts` with every IPv6 form of their IPv4 ranges: an except of an address is an except
    of each address that carries it."""
    out: List[Cut] = []
    for c, text in cuts:
        out.append((c, text))
        for form in c.v4_forms() or []:
            out.append((form, str(form)))
    return out


def _ip_block(c: Cidr, text: str, cuts: List[Cut]) -> Optional[Dict[str, Any]]:
    kept = _cidr.excepts(c, cuts)
    if kept is None:
        return None
    block: Dict[str, Any] = {"cidr": text}
    if kept:
        block["except"] = kept
    return {"ipBlock": block}


def _ip_peer(text: str, cuts: List[Cut]) -> Optional[Dict[str, Any]]:
    c = Cidr.parse(text)
    return None if c is None else _ip_block(c, text, cuts)


def _egress(network: NetworkSpec, cluster: ClusterNetwork) -> List[Dict[str, Any]]:
    deny = _with_forms(_parsed(network.deny_cidrs))
    peers: List[Dict[str, Any]] = []
    if network.egress == EgressMode.NONE:
        return []
    if network.egress == EgressMode.INTERNET:
        cuts = _with_forms(_BLOCKED + _parsed(cluster.cluster_cidrs))
        cuts.extend(deny)
        cuts.append((_cidr.NAT64_LOCAL, str(_cidr.NAT64_LOCAL)))
        for everything, text in _EVERYWHERE:
            peer = _ip_block(everything, text, cuts)
            if peer is not None:
                peers.append(peer)
    else:
        peers.append({"namespaceSelector": {}})
        peers.extend(p for p in (_ip_peer(c, deny) for c in cluster.cluster_cidrs) if p is not None)
    peers.extend(p for p in (_ip_peer(c, deny) for c in network.allow_cidrs) if p is not None)
    rules: List[Dict[str, Any]] = []
    if peers:
        rules.append({"to": peers})
    # Without labels the DNS peer would be every pod of the DNS namespace.
    if cluster.dns_pod_labels:
        rules.append({
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            "to": [{
                "namespaceSelector": {"matchLabels": {names.NAMESPACE_NAME_LABEL: cluster.dns_namespace}},
                "podSelector": _match_labels(cluster.dns_pod_labels),
            }],
        })
    return rules


# --- Pool members -----------------------------------------------------------------------------

def _member_spec(template: SandboxSpec) -> Dict[str, Any]:
    spec: Dict[str, Any] = {
        "image": template.image,
        "desiredState": "Running" if template.desired_state == DesiredState.RUNNING else "Paused",
        "rootfsGeneration": template.rootfs_generation,
    }
    if template.idle_timeout_seconds is not None:
        spec["idleTimeoutSeconds"] = template.idle_timeout_seconds
    if template.cpu is not None or template.memory is not None:
        resources = {}
        if template.cpu is not None:
            resources["cpu"] = template.cpu
        if template.memory is not None:
            resources["memory"] = template.memory
        spec["resources"] = resources
    storage: Dict[str, Any] = {}
    if template.storage_class is not None:
        storage["storageClassName"] = template.storage_class
    storage["rootfsSize"] = template.rootfs_size
    storage["workspaceSize"] = template.workspace_size
    spec["storage"] = storage
    if template.runtime_class is not None:
        spec["runtimeClassName"] = template.runtime_class
    network: Dict[str, Any] = {"egress": {
        EgressMode.INTERNET: "Internet", EgressMode.NONE: "None", EgressMode.CLUSTER: "Cluster",
    }[template.network.egress]}
    if template.network.allow_cidrs:
        network["allowCIDRs"] = list(template.network.allow_cidrs)
    if template.network.deny_cidrs:
        network["denyCIDRs"] = list(template.network.deny_cidrs)
    spec["network"] = network
    if template.service is not None:
        spec["service"] = {"ports": _ports(template.service)}
    spec["shutdownPolicy"] = "Delete" if template.shutdown_policy == ShutdownPolicy.DELETE else "Pause"
    return spec


def template_hash(template: SandboxSpec) -> str:
    """The `cubepod.io/template-hash` of the members made from `template`."""
    return digest(to_json(_member_spec(template)))


def pool_member(name: str, namespace: str, pool: Owner, template: SandboxSpec) -> str:
    """A member Sandbox of a warm pool, made from the pool's template and labelled with its
    template hash. A member is never a fork nor a claim, so those fields are not carried over."""
    spec = _member_spec(template)
    metadata = _managed(name, namespace, pool, {
        names.POOL_LABEL: pool.name,
        names.TEMPLATE_HASH_LABEL: digest(to_json(spec)),
    })
    return to_json({"apiVersion": names.API_VERSION, "kind": "Sandbox", "metadata": metadata,
                    "spec": spec})
