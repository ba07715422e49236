"""What the CRD schema cannot check, or an API server without the schema lets through. A spec
that fails here gets a condition that says what to change, and no child is touched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import names
from .cidr import Cidr
from .quantity import is_positive_quantity
from .text import quoted
from .types import ObservedChildren, Sandbox, SandboxSpec


@dataclass(frozen=True)
class Invalid:
    """Why a spec is refused: the condition's reason, and a message that names the fix."""

    reason: str
    message: str


def sandbox(sb: Sandbox, observed: ObservedChildren) -> Optional[Invalid]:
    """Checks a sandbox's spec against its name and what already exists of it."""
    name_len = len(sb.name.encode("utf-8"))
    if name_len > names.MAX_LABEL_VALUE:
        return Invalid(
            "NameTooLong",
            f"the name is {name_len} characters long; its children are labelled with it and a "
            f"label value is at most {names.MAX_LABEL_VALUE}: recreate the sandbox with a "
            "shorter name",
        )
    problem = spec(sb.spec, "spec")
    if problem is not None:
        return problem
    if sb.spec.fork_from is not None and sb.spec.fork_from == sb.name:
        return Invalid(
            "ForkFromSelf",
            "spec.forkFrom names this sandbox itself: name another sandbox, or remove the field",
        )
    if sb.spec.fork_from is not None and sb.spec.warm_pool is not None:
        return Invalid(
            "ForkAndClaim",
            "spec.forkFrom and spec.warmPool are both set: a sandbox is either a fork or a "
            "claim from a pool, so remove one",
        )
    highest = _highest_rootfs_generation(sb, observed)
    if highest > sb.spec.rootfs_generation:
        return Invalid(
            "RootfsGenerationDecreased",
            f"spec.rootfsGeneration went down from {highest} to {sb.spec.rootfs_generation}: "
            f"a reset only moves forward, so set it to {highest} (keep) or {highest + 1} (reset)",
        )
    return None


def spec(s: SandboxSpec, path: str) -> Optional[Invalid]:
    """Checks a spec alone; `path` names it in messages ("spec", "spec.template")."""
    if s.image.strip() == "":
        return Invalid(
            "ImageMissing", f"{path}.image is empty: set it to the sandbox's container image"
        )
    if s.rootfs_generation == 0:
        return Invalid(
            "InvalidRootfsGeneration", f"{path}.rootfsGeneration is 0: generations start at 1"
        )
    quantities = [
        ("storage.rootfsSize", s.rootfs_size),
        ("storage.workspaceSize", s.workspace_size),
        ("resources.cpu", s.cpu),
        ("resources.memory", s.memory),
    ]
    for field, value in quantities:
        if value is not None and not is_positive_quantity(value):
            return Invalid(
                "InvalidQuantity",
                f"{path}.{field} {quoted(value)} is not a positive Kubernetes quantity: write "
                'it like "10Gi", "512Mi" or "500m"',
            )
    return _network(s, path)


def _network(s: SandboxSpec, path: str) -> Optional[Invalid]:
    for field, values in (("allowCIDRs", s.network.allow_cidrs), ("denyCIDRs", s.network.deny_cidrs)):
        for i, text in enumerate(values):
            if Cidr.parse(text) is None:
                return Invalid(
                    "InvalidCIDR",
                    f"{path}.network.{field}[{i}] {quoted(text)} is not a CIDR: write an "
                    'address and a prefix length, like "10.0.5.0/24" or "2001:db8::/32"',
                )
    if s.service is not None:
        seen = []
        for i, port in enumerate(s.service.ports):
            if port.port == 0:
                return Invalid(
                    "InvalidServicePort", f"{path}.service.ports[{i}].port is 0: ports are 1-65535"
                )
            if (port.port, port.protocol) in seen:
                return Invalid(
                    "InvalidServicePort",
                    f"{path}.service.ports[{i}] repeats port {port.port} of the same protocol",
                )
            seen.append((port.port, port.protocol))
        if len(s.service.ports) > 1 and any(p.name == "" for p in s.service.ports):
            return Invalid(
                "InvalidServicePort",
                f"{path}.service.ports: with more than one port, each needs a name",
            )
    return None


def _highest_rootfs_generation(sb: Sandbox, observed: ObservedChildren) -> int:
    found = [names.rootfs_generation_of(sb.name, p.name) for p in observed.pvcs]
    if sb.status.rootfs_pvc is not None:
        found.append(names.rootfs_generation_of(sb.name, sb.status.rootfs_pvc))
    return max((g for g in found if g is not None), default=0)
