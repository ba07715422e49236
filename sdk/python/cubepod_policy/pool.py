"""Warm pools: keep `replicas` ready, unclaimed member Sandboxes, named `<pool>-<index>`
(lowest free index first, so a create the cache has not shown yet is chosen again under the
same name). A member whose `cubepod.io/template-hash` is not the template's is stale:
`Recreate` replaces it at once, `OnReplenish` keeps it until it is claimed."""

from __future__ import annotations

import copy
from typing import Optional

from . import names, validate
from . import status as _status
from .manifest import Owner, pool_member, template_hash
from .status import READY, SPEC_VALID, set_condition
from .text import quoted
from .types import (
    ConditionStatus,
    MemberCreate,
    PoolInput,
    PoolOutput,
    Timestamp,
    UpdateStrategy,
)

REPLICAS_CAPPED = "ReplicasCapped"
_U32_MAX = 0xFFFF_FFFF

__all__ = ["reconcile_pool", "template_hash", "REPLICAS_CAPPED"]


def reconcile_pool(input: PoolInput) -> PoolOutput:
    pool = input.pool
    now = input.now
    status = copy.deepcopy(pool.status)
    status.observed_generation = pool.generation
    out = PoolOutput(create=[], delete=[], status=status, events=[])
    active = [m for m in input.members if not m.claimed and not m.deleting]
    out.status.replicas = len(active)
    out.status.ready_replicas = sum(1 for m in active if m.ready)

    problem = _check(input)
    if problem is not None:
        if not _status.holds(out.status.conditions, SPEC_VALID, ConditionStatus.FALSE, problem.reason):
            out.events.append(_status.warning(problem.reason, problem.message))
        set_condition(out.status.conditions, SPEC_VALID, ConditionStatus.FALSE, problem.reason,
                      problem.message, now)
        return out
    set_condition(out.status.conditions, SPEC_VALID, ConditionStatus.TRUE, "Valid", "", now)

    wanted = min(pool.spec.replicas, input.max_replicas)
    _report_cap(out, pool.spec.replicas, input.max_replicas, now)

    digest = template_hash(pool.spec.template)
    stale = ([m for m in active if m.template_hash != digest]
             if pool.spec.update_strategy == UpdateStrategy.RECREATE else [])
    if stale:
        out.delete = [m.name for m in stale]
        out.events.append(_status.normal(
            "Recreating", f"deleting {len(stale)} member(s) made from an older template"))
    stale_names = {m.name for m in stale}
    active = [m for m in active if m.name not in stale_names]

    have = len(active)
    if have < wanted:
        owner = Owner("PodWarmPool", pool.name, pool.uid)
        taken = {m.name for m in input.members}
        index = 0
        created = 0
        while created < wanted - have:
            name = names.pool_member(pool.name, index)
            index += 1
            if name in taken:
                continue
            out.create.append(MemberCreate(name, pool_member(name, pool.namespace, owner,
                                                             pool.spec.template)))
            created += 1
        out.events.append(_status.normal(
            "Scaling", f"creating {wanted - have} member(s) to reach {wanted}"))
    elif have > wanted:
        # Surplus goes unready first (it serves no claim yet), then newest first.
        surplus = sorted(active, key=lambda m: (m.ready, -_member_index(pool.name, m.name)))
        out.delete.extend(m.name for m in surplus[: have - wanted])
        out.events.append(_status.normal(
            "Scaling", f"deleting {have - wanted} member(s) down to {wanted}"))

    kept_ready = sum(1 for m in active if m.ready and m.name not in out.delete)
    ready_status, reason = ((ConditionStatus.TRUE, "Filled") if kept_ready >= wanted
                            else (ConditionStatus.FALSE, "Filling"))
    surplus_ready = max(0, out.status.ready_replicas - kept_ready)
    message = f"{kept_ready} of {wanted} members ready"
    if surplus_ready > 0:
        message += f"; {surplus_ready} more being deleted"
    set_condition(out.status.conditions, READY, ready_status, reason, message, now)
    return out


def _check(input: PoolInput) -> Optional[validate.Invalid]:
    pool = input.pool
    problem = validate.spec(pool.spec.template, "spec.template")
    if problem is not None:
        return problem
    if pool.spec.template.shutdown_time is not None:
        # One absolute time for every member would shut the pool down at once.
        return validate.Invalid(
            "ShutdownTimeInTemplate",
            "a pool template may not set shutdownTime: set it on the Sandbox that claims from "
            "the pool",
        )
    # Member names are `<pool>-<index>` and label their children, so they must fit a label.
    longest = names.pool_member(pool.name, (max(pool.spec.replicas, 1) * 2) & _U32_MAX)
    if len(longest.encode("utf-8")) > names.MAX_LABEL_VALUE:
        return validate.Invalid(
            "NameTooLong",
            f"member names such as {quoted(longest)} exceed {names.MAX_LABEL_VALUE} characters: "
            "recreate the pool with a shorter name",
        )
    return None


def _report_cap(out: PoolOutput, replicas: int, cap: int, now: Timestamp) -> None:
    if replicas > cap:
        message = (f"spec.replicas {replicas} is above the controller's cap of {cap}: {cap} "
                   "members are kept; lower spec.replicas or raise the controller's "
                   "--max-pool-replicas")
        if not _status.holds(out.status.conditions, REPLICAS_CAPPED, ConditionStatus.TRUE, "AboveCap"):
            out.events.append(_status.warning(REPLICAS_CAPPED, message))
        set_condition(out.status.conditions, REPLICAS_CAPPED, ConditionStatus.TRUE, "AboveCap",
                      message, now)
    else:
        set_condition(out.status.conditions, REPLICAS_CAPPED, ConditionStatus.FALSE, "WithinCap",
                      "", now)


def _member_index(pool: str, member: str) -> int:
    prefix = pool + "-"
    if member.startswith(prefix):
        index = names.parse_u32(member[len(prefix):])
        if index is not None:
            return index
    return _U32_MAX
