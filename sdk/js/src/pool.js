// Keep `replicas` ready, unclaimed members in a warm pool (sdk/src/pool.rs).
import * as manifest from "./manifest.js";
import * as names from "./names.js";
import * as status from "./status.js";
import * as validate from "./validate.js";
import { parseU32, quoted } from "./json.js";

export const REPLICAS_CAPPED = "ReplicasCapped";
export const templateHash = manifest.templateHash;
const U32_MAX = 0xffffffff;

export function reconcilePool(input) {
  const pool = input.pool;
  const now = input.now;
  const out = {
    create: [],
    delete: [],
    status: { ...status.copyStatus(pool.status), observedGeneration: pool.generation },
    events: [],
  };
  let active = input.members.filter((m) => !m.claimed && !m.deleting);
  out.status.replicas = active.length;
  out.status.readyReplicas = active.filter((m) => m.ready).length;

  const problem = check(input);
  if (problem) {
    if (!status.holds(out.status.conditions, status.SPEC_VALID, "false", problem.reason)) {
      out.events.push(status.warning(problem.reason, problem.message));
    }
    status.setCondition(out.status.conditions, status.SPEC_VALID, "false", problem.reason, problem.message, now);
    return out;
  }
  status.setCondition(out.status.conditions, status.SPEC_VALID, "true", "Valid", "", now);

  const wanted = Math.min(pool.spec.replicas, input.maxReplicas);
  reportCap(out, pool.spec.replicas, input.maxReplicas, now);

  const hash = manifest.templateHash(pool.spec.template);
  const stale =
    pool.spec.updateStrategy === "recreate" ? active.filter((m) => m.templateHash !== hash) : [];
  if (stale.length > 0) {
    out.delete = stale.map((m) => m.name);
    out.events.push(status.normal("Recreating", `deleting ${stale.length} member(s) made from an older template`));
  }
  active = active.filter((m) => !stale.some((s) => s.name === m.name));

  const have = active.length;
  if (have < wanted) {
    const owner = { kind: "PodWarmPool", name: pool.name, uid: pool.uid };
    const taken = new Set(input.members.map((m) => m.name));
    for (let i = 0, made = 0; made < wanted - have; i++) {
      const name = names.poolMember(pool.name, i);
      if (taken.has(name)) continue;
      out.create.push({ name, manifest: manifest.poolMember(name, pool.namespace, owner, pool.spec.template) });
      made++;
    }
    out.events.push(status.normal("Scaling", `creating ${wanted - have} member(s) to reach ${wanted}`));
  } else if (have > wanted) {
    // Unready members first, then the highest index.
    const surplus = [...active].sort(
      (a, b) => Number(a.ready) - Number(b.ready) || memberIndex(pool.name, b.name) - memberIndex(pool.name, a.name),
    );
    out.delete.push(...surplus.slice(0, have - wanted).map((m) => m.name));
    out.events.push(status.normal("Scaling", `deleting ${have - wanted} member(s) down to ${wanted}`));
  }

  const keptReady = active.filter((m) => m.ready && !out.delete.includes(m.name)).length;
  const [readyStatus, reason] = keptReady >= wanted ? ["true", "Filled"] : ["false", "Filling"];
  const surplus = Math.max(out.status.readyReplicas - keptReady, 0);
  let message = `${keptReady} of ${wanted} members ready`;
  if (surplus > 0) message += `; ${surplus} more being deleted`;
  status.setCondition(out.status.conditions, status.READY, readyStatus, reason, message, now);
  return out;
}

function check(input) {
  const pool = input.pool;
  const problem = validate.spec(pool.spec.template, "spec.template");
  if (problem) return problem;
  if (pool.spec.template.shutdownTime != null) {
    return new validate.Invalid(
      "ShutdownTimeInTemplate",
      "a pool template may not set shutdownTime: set it on the Sandbox that claims from the pool",
    );
  }
  const longest = names.poolMember(pool.name, Math.max(pool.spec.replicas, 1) * 2);
  if (longest.length > names.MAX_LABEL_VALUE) {
    return new validate.Invalid(
      "NameTooLong",
      `member names such as ${quoted(longest)} exceed ${names.MAX_LABEL_VALUE} characters: recreate the pool with a shorter name`,
    );
  }
  return undefined;
}

function reportCap(out, replicas, cap, now) {
  if (replicas > cap) {
    const message = `spec.replicas ${replicas} is above the controller's cap of ${cap}: ${cap} members are kept; lower spec.replicas or raise the controller's --max-pool-replicas`;
    if (!status.holds(out.status.conditions, REPLICAS_CAPPED, "true", "AboveCap")) {
      out.events.push(status.warning(REPLICAS_CAPPED, message));
    }
    status.setCondition(out.status.conditions, REPLICAS_CAPPED, "true", "AboveCap", message, now);
  } else {
    status.setCondition(out.status.conditions, REPLICAS_CAPPED, "false", "WithinCap", "", now);
  }
}

function memberIndex(pool, member) {
  if (!member.startsWith(`${pool}-`)) return U32_MAX;
  return parseU32(member.slice(pool.length + 1)) ?? U32_MAX;
}
