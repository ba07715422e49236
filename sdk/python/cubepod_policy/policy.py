"""A policy as a set of decisions, each the default one unless a subclass replaces it: a policy
that changes one decision writes that one method, and calls the default for the rest (e.g.
`super().reconcile_sandbox(client, input)`)."""

from __future__ import annotations

from typing import List

from . import cleanup as _cleanup
from . import pool as _pool
from . import reaper as _reaper
from . import reconcile as _reconcile
from .client import KubeClient
from .types import (
    CleanupOutput,
    ObservedChildren,
    PolicyInfo,
    PoolInput,
    PoolOutput,
    ReapCandidate,
    ReapDecision,
    ReconcileInput,
    ReconcileOutput,
    Sandbox,
    Timestamp,
)

#: The version of the `cubepod:controller` WIT package this SDK follows: a policy's
#: `describe` returns it as its `contract_version`.
CONTRACT_VERSION = "0.2.0"


class Policy:
    """The default policy's decisions. A subclass sets `NAME` and `VERSION` (or overrides
    `describe`) and overrides what it changes."""

    NAME = "cubepod-default"
    VERSION = "0.1.0"

    def describe(self) -> PolicyInfo:
        return PolicyInfo(self.NAME, self.VERSION, CONTRACT_VERSION)

    def reconcile_sandbox(self, client: KubeClient, input: ReconcileInput) -> ReconcileOutput:
        return _reconcile.reconcile(client, input)

    def cleanup_sandbox(self, client: KubeClient, now: Timestamp, sandbox: Sandbox,
                        observed: ObservedChildren) -> CleanupOutput:
        return _cleanup.cleanup(client, now, sandbox, observed)

    def reconcile_pool(self, input: PoolInput) -> PoolOutput:
        return _pool.reconcile_pool(input)

    def reap(self, now: Timestamp, namespace: str,
             sandboxes: List[ReapCandidate]) -> List[ReapDecision]:
        return _reaper.reap(now, namespace, sandboxes)
