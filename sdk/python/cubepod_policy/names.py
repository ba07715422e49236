"""The names and labels that docs/architecture.md fixes: other tools and tests rely on them."""

from __future__ import annotations

from typing import Optional

API_VERSION = "cubepod.io/v1alpha1"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "cubepod-controller"
SANDBOX_LABEL = "cubepod.io/sandbox"
POOL_LABEL = "cubepod.io/pool"
VOLUME_LABEL = "cubepod.io/volume"
GENERATION_LABEL = "cubepod.io/rootfs-generation"
#: On a pool member: the digest of the pool template it was made from.
TEMPLATE_HASH_LABEL = "cubepod.io/template-hash"
#: On a NetworkPolicy or Service: the digest of the spec the policy wrote.
SPEC_HASH_ANNOTATION = "cubepod.io/spec-hash"
DEFAULT_RUNTIME_CLASS = "kata-qemu"
#: Kubernetes label values are at most 63 characters; a sandbox's name is one.
MAX_LABEL_VALUE = 63
#: The label the API server sets on every namespace, with its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

#: What `egress: Internet` never reaches besides the cluster's own ranges (see the Rust SDK's
#: `names::BLOCKED_FOR_INTERNET` for why each is here).
BLOCKED_FOR_INTERNET = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
    "fe80::/10",
    "::/64",
)


def pod(sandbox: str) -> str:
    return sandbox


def rootfs_pvc(sandbox: str, generation: int) -> str:
    return f"{sandbox}-rootfs-g{generation}"


def workspace_pvc(sandbox: str) -> str:
    return f"{sandbox}-workspace"


def secret(sandbox: str) -> str:
    return f"{sandbox}-credentials"


def rootfs_generation_of(sandbox: str, pvc: str) -> Optional[int]:
    """The generation of a rootfs PVC of `sandbox`, or None for any other name."""
    prefix = sandbox + "-rootfs-g"
    if not pvc.startswith(prefix):
        return None
    return parse_u32(pvc[len(prefix):])


def parse_u32(text: str) -> Optional[int]:
    """`text` as Rust parses a `u32`: ASCII digits with an optional `+`, at most 2^32 - 1."""
    digits = text[1:] if text.startswith("+") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    value = int(digits)
    return value if value <= 0xFFFF_FFFF else None


def network_policy(sandbox: str) -> str:
    return f"{sandbox}-network"


def service(sandbox: str) -> str:
    """The headless Service of a sandbox has the sandbox's name."""
    return sandbox


def pool_member(pool: str, index: int) -> str:
    return f"{pool}-{index}"
