"""The Python SDK of cubepod-controller policies: the counterpart of the Rust SDK (`sdk/`).

A policy subclasses `Policy`, whose every method is the default policy's decision, and
overrides only what it changes; `export` makes it the component's exports. The contract's
types are in `cubepod_policy.types`, the default decisions' parts (manifests, names, status,
validation) in their modules, and `cubepod_policy.testing` has a recording client and inputs
for native unit tests. The default decisions write the same JSON as the Rust SDK's for the
same input (checked by host/tests/differential.rs)."""

from __future__ import annotations

from typing import Type

from . import errors, manifest, names, status, testing, types, validate
from .errors import Conflict, Invalid, KubeError, NotFound, Other, Refused, Retryable
from .policy import CONTRACT_VERSION, Policy
from .reconcile import refused
from .types import *  # noqa: F401,F403 (the contract's types, for `from cubepod_policy import Sandbox`)

__all__ = [
    "CONTRACT_VERSION", "Conflict", "Invalid", "KubeError", "NotFound", "Other", "Policy",
    "Refused", "Retryable", "errors", "export", "manifest", "names", "refused", "status",
    "testing", "types", "validate",
]


def export(policy_class: Type[Policy]) -> type:
    """The class componentize-py exports for `policy_class` (assign it to `Policy` in the app
    module). Outside a component there is nothing to export to: `policy_class` comes back as
    it is, so the app module also imports in a native test."""
    try:
        import wit_world  # noqa: F401  (only in a component)
    except ImportError:
        return policy_class
    from .component import export as component_export

    return component_export(policy_class)
