"""What a running sandbox's Pod was started with, and which of those spec fields changed since:
the condition `SpecApplied`. The condition's message starts with the record ("the Pod was
started with spec.image \"...\", ..."), each value quoted as Rust quotes a string, or `unset`:
the status is all a policy keeps between calls, so the record is how the next pass knows."""

from __future__ import annotations

from typing import List, Optional, Tuple

from . import status as _status
from .status import set_condition
from .text import quoted
from .types import ConditionStatus, ReconcileOutput, Sandbox, SandboxSpec, Timestamp

SPEC_APPLIED = "SpecApplied"
STARTED = "Started"
PENDING_RESTART = "PendingRestart"

_STARTED_WITH = "the Pod was started with "
_SEPARATOR = ", "
_POD_FIELDS = ("spec.image", "spec.resources.cpu", "spec.resources.memory", "spec.runtimeClassName")
HOW_TO_APPLY = (
    "pause and resume the sandbox (spec.desiredState Paused, then Running), or raise "
    "spec.rootfsGeneration by one to reset it"
)


def _shown(value: Optional[str]) -> str:
    return "unset" if value is None else quoted(value)


def _pod_values(spec: SandboxSpec) -> List[str]:
    return [_shown(v) for v in (spec.image, spec.cpu, spec.memory, spec.runtime_class)]


def record(spec: SandboxSpec) -> str:
    """The record of a Pod started from `spec`: the message of `SpecApplied=True`."""
    return _STARTED_WITH + _SEPARATOR.join(
        f"{path} {value}" for path, value in zip(_POD_FIELDS, _pod_values(spec))
    )


def _shown_len(text: str) -> Optional[int]:
    if text.startswith("unset"):
        return len("unset")
    if not text.startswith('"'):
        return None
    i = 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text):
                return None
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    return None


def _recorded(message: str) -> Optional[Tuple[List[str], int]]:
    if not message.startswith(_STARTED_WITH):
        return None
    rest = message[len(_STARTED_WITH):]
    values = []
    for index, path in enumerate(_POD_FIELDS):
        if index > 0:
            if not rest.startswith(_SEPARATOR):
                return None
            rest = rest[len(_SEPARATOR):]
        if not rest.startswith(path + " "):
            return None
        rest = rest[len(path) + 1:]
        end = _shown_len(rest)
        if end is None:
            return None
        values.append(rest[:end])
        rest = rest[end:]
    return values, len(message) - len(rest)


def started(out: ReconcileOutput, spec: SandboxSpec, now: Timestamp) -> None:
    """A Pod was just started from `spec`: the condition records it."""
    set_condition(out.status.conditions, SPEC_APPLIED, ConditionStatus.TRUE, STARTED,
                  record(spec), now)


def running(out: ReconcileOutput, sandbox: Sandbox, now: Timestamp) -> None:
    """`sandbox`'s Pod runs on: `SpecApplied` says whether it has what the spec says, and if
    not, which fields differ and how to apply them (a Normal Event when that becomes so)."""
    spec = sandbox.spec
    conditions = out.status.conditions
    if (_status.condition(conditions, SPEC_APPLIED) is None
            and out.status.started_at is None and sandbox.generation == 1):
        started(out, spec, now)
        return
    held = _status.condition(conditions, SPEC_APPLIED)
    if held is None:
        return
    parsed = _recorded(held.message)
    if parsed is None:
        return
    values, record_len = parsed
    changed = [(path, wanted) for path, wanted, then in zip(_POD_FIELDS, _pod_values(spec), values)
               if wanted != then]
    rec = held.message[:record_len]
    if not changed:
        set_condition(conditions, SPEC_APPLIED, ConditionStatus.TRUE, STARTED, rec, now)
        return
    fields = _SEPARATOR.join(f"{path} (now {value})" for path, value in changed)
    paths = _SEPARATOR.join(path for path, _ in changed)
    if not _status.holds(conditions, SPEC_APPLIED, ConditionStatus.FALSE, PENDING_RESTART):
        out.events.append(_status.normal(
            PENDING_RESTART,
            f"{paths} changed while the sandbox runs; its Pod keeps what it was started with "
            f"until the next start: {HOW_TO_APPLY}",
        ))
    set_condition(
        conditions, SPEC_APPLIED, ConditionStatus.FALSE, PENDING_RESTART,
        f"{rec}; changed since: {fields}, which the running Pod keeps until the next start: "
        f"{HOW_TO_APPLY}",
        now,
    )


def stopped(out: ReconcileOutput) -> None:
    """No Pod runs: nothing to say until the next start, which records what it starts with."""
    out.status.conditions[:] = [c for c in out.status.conditions if c.kind != SPEC_APPLIED]
