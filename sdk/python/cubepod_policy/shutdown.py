"""`status.shutdownIn`: the time left before `spec.shutdownTime`, coarse on purpose (a printer
column, and every change is a status write): it moves only at a fixed ladder of boundaries and
shows the bucket's lower bound. The reconcile is requeued at the next boundary."""

from __future__ import annotations

from typing import Optional, Tuple

from .types import ReconcileOutput, Sandbox, Timestamp

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
WEEK = 7 * DAY

_LADDER = (
    (3 * DAY, "3d"), (2 * DAY, "2d"), (DAY, "1d"), (12 * HOUR, "12h"), (5 * HOUR, "5h"),
    (2 * HOUR, "2h"), (HOUR, "1h"), (40 * MINUTE, "40m"), (20 * MINUTE, "20m"), (10 * MINUTE, "10m"),
)
PASSED = "passed"
UNDER_TEN_MINUTES = "<10m"
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_U32_MAX = 0xFFFF_FFFF


def bucket(left: int) -> Tuple[str, Optional[int]]:
    """What `status.shutdownIn` shows with `left` seconds to go, and how many seconds until it
    shows something else (None once passed)."""
    if left <= 0:
        return PASSED, None
    if left >= WEEK:
        bound = left // WEEK * WEEK
        return f"{bound // DAY}d", left - bound + 1
    for bound, shown in _LADDER:
        if left >= bound:
            return shown, left - bound + 1
    return UNDER_TEN_MINUTES, left


def report(out: ReconcileOutput, sandbox: Sandbox, now: Timestamp) -> None:
    """Sets `status.shutdownIn` and asks to be reconciled again when it next changes, unless
    the output already asks sooner."""
    at = sandbox.spec.shutdown_time
    if at is None:
        out.status.shutdown_in = None
        return
    left = max(_I64_MIN, min(_I64_MAX, at - now))
    shown, next_change = bucket(left)
    out.status.shutdown_in = shown
    if next_change is not None:
        next_change = min(next_change, _U32_MAX)
        asked = out.requeue_after_seconds
        out.requeue_after_seconds = next_change if asked is None else min(asked, next_change)
