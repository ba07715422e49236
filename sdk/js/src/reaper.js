// Which sandboxes of a namespace reached their shutdown time or were idle past their timeout.
import { compareStrings } from "./json.js";

export function reap(now, namespace, sandboxes) {
  const decisions = [];
  for (const sandbox of sandboxes) {
    const decision = shutdown(now, namespace, sandbox) ?? idle(now, namespace, sandbox);
    if (decision) decisions.push(decision);
  }
  return decisions.sort((a, b) => compareStrings(a.name, b.name));
}

function shutdown(now, namespace, sandbox) {
  const at = sandbox.shutdownTime;
  if (at == null || at > now) return undefined;
  return {
    namespace,
    name: sandbox.name,
    action: sandbox.shutdownPolicy === "delete" ? "shutdown-delete" : "shutdown-pause",
    idleSeconds: 0n,
    reason: `spec.shutdownTime passed ${now - at}s ago`,
  };
}

function idle(now, namespace, sandbox) {
  if (!sandbox.running) return undefined;
  const timeout = sandbox.idleTimeoutSeconds;
  if (timeout == null || timeout <= 0n) return undefined;
  const eligible = (sandbox.pool == null || sandbox.claimedBy != null) && sandbox.claimedMember == null;
  if (!eligible) return undefined;
  const times = [sandbox.lastActivity, sandbox.startedAt].filter((t) => t != null);
  if (times.length === 0) return undefined;
  const since = times.reduce((a, b) => (a > b ? a : b));
  const idleFor = now - since > 0n ? now - since : 0n;
  if (idleFor <= timeout) return undefined;
  return {
    namespace,
    name: sandbox.name,
    action: "idle-pause",
    idleSeconds: idleFor,
    reason: `no activity for ${idleFor}s, above idleTimeoutSeconds ${timeout}`,
  };
}
