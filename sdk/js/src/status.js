// Conditions and Events as the default policy writes them.

export const READY = "Ready";
export const PAUSED = "Paused";
export const SPEC_VALID = "SpecValid";

/**
 * Sets condition `kind` in `conditions` (in place): its transition time moves only when its
 * status changes.
 */
export function setCondition(conditions, kind, status, reason, message, now) {
  const existing = conditions.find((c) => c.kind === kind);
  if (existing) {
    if (existing.status !== status) existing.lastTransitionTime = now;
    existing.status = status;
    existing.reason = reason;
    existing.message = message;
  } else {
    conditions.push({ kind, status, reason, message, lastTransitionTime: now });
  }
}

export function condition(conditions, kind) {
  return conditions.find((c) => c.kind === kind);
}

/** Condition `kind` holds with this status and reason. */
export function holds(conditions, kind, status, reason) {
  const c = condition(conditions, kind);
  return c !== undefined && c.status === status && c.reason === reason;
}

export const normal = (reason, message) => ({ kind: "normal", reason, message });
export const warning = (reason, message) => ({ kind: "warning", reason, message });

/** A copy of a sandbox's or pool's status that the policy may change. */
export function copyStatus(status) {
  return { ...status, conditions: status.conditions.map((c) => ({ ...c })) };
}
