"""Conditions and their transition times, kept true in every transition."""

from __future__ import annotations

from typing import List, Optional

from .types import Condition, ConditionStatus, Event, EventType, Timestamp

READY = "Ready"
PAUSED = "Paused"
SPEC_VALID = "SpecValid"


def set_condition(
    conditions: List[Condition],
    kind: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: Timestamp,
) -> None:
    """Sets a condition; its transition time moves only when its status does."""
    for existing in conditions:
        if existing.kind == kind:
            if existing.status != status:
                existing.last_transition_time = now
            existing.status = status
            existing.reason = reason
            existing.message = message
            return
    conditions.append(Condition(kind, status, reason, message, now))


def condition(conditions: List[Condition], kind: str) -> Optional[Condition]:
    return next((c for c in conditions if c.kind == kind), None)


def holds(conditions: List[Condition], kind: str, status: ConditionStatus, reason: str) -> bool:
    """True when `kind` already holds this status and reason: an Event is emitted once per
    transition rather than once per reconcile."""
    c = condition(conditions, kind)
    return c is not None and c.status == status and c.reason == reason


def normal(reason: str, message: str) -> Event:
    return Event(EventType.NORMAL, reason, message)


def warning(reason: str, message: str) -> Event:
    return Event(EventType.WARNING, reason, message)
