"""The reaper: which sandboxes reached their `spec.shutdownTime`, and which running ones have
gone without activity past their timeout. It only decides; the host checks each decision and
carries it out."""

from __future__ import annotations

from typing import List, Optional

from .types import ReapAction, ReapCandidate, ReapDecision, ShutdownPolicy, Timestamp

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _sub(a: int, b: int) -> int:
    """`a - b` saturating at i64's bounds, as the Rust SDK computes it."""
    return max(_I64_MIN, min(_I64_MAX, a - b))


def reap(now: Timestamp, namespace: str, sandboxes: List[ReapCandidate]) -> List[ReapDecision]:
    decisions = []
    for sb in sandboxes:
        decision = _shutdown(now, namespace, sb) or _idle(now, namespace, sb)
        if decision is not None:
            decisions.append(decision)
    decisions.sort(key=lambda d: d.name.encode("utf-8"))
    return decisions


def _shutdown(now: Timestamp, namespace: str, sb: ReapCandidate) -> Optional[ReapDecision]:
    """A shutdown time that has passed wins over idleness."""
    at = sb.shutdown_time
    if at is None or at > now:
        return None
    action = (ReapAction.SHUTDOWN_DELETE if sb.shutdown_policy == ShutdownPolicy.DELETE
              else ReapAction.SHUTDOWN_PAUSE)
    return ReapDecision(namespace, sb.name, action, 0,
                        f"spec.shutdownTime passed {_sub(now, at)}s ago")


def _idle(now: Timestamp, namespace: str, sb: ReapCandidate) -> Optional[ReapDecision]:
    if not sb.running:
        return None
    timeout = sb.idle_timeout_seconds
    if timeout is None or timeout <= 0:
        return None
    # An unclaimed pool member is idle by design; a claim's member is reaped itself.
    eligible = (sb.pool is None or sb.claimed_by is not None) and sb.claimed_member is None
    if not eligible:
        return None
    marks = [t for t in (sb.last_activity, sb.started_at) if t is not None]
    if not marks:
        return None
    idle = max(0, _sub(now, max(marks)))
    if idle <= timeout:
        return None
    return ReapDecision(namespace, sb.name, ReapAction.IDLE_PAUSE, idle,
                        f"no activity for {idle}s, above idleTimeoutSeconds {timeout}")
