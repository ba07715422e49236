// Reconcile one Sandbox: every row of the lifecycle table (docs/architecture.md),
// level-triggered, as the Rust SDK's `reconcile` (sdk/src/reconcile.rs) decides it.
import * as applied from "./applied.js";
import * as manifest from "./manifest.js";
import * as names from "./names.js";
import * as shutdown from "./shutdown.js";
import * as status from "./status.js";
import * as validate from "./validate.js";
import { quoted } from "./json.js";

const { PAUSED, READY, SPEC_VALID, setCondition } = status;

// Seconds before looking again at what changes without a watch event to count on.
const WAIT_FOR_SOURCE_SECONDS = 10;
const WAIT_FOR_TERMINATION_SECONDS = 2;

/** The default reconcile: the calls it makes through `client`, and the output. */
export function reconcile(client, input) {
  const out = reconcileChildren(client, input);
  shutdown.report(out, input.sandbox, input.now);
  return out;
}

function reconcileChildren(client, input) {
  const sandbox = input.sandbox;
  const now = input.now;
  const problem = validate.sandbox(sandbox, input.observed);
  if (problem) return refused(input, problem);
  const out = unchanged(sandbox);
  const fork = forkPlan(input);
  if (fork.missing) {
    refuse(out, fork.missing, now);
    out.requeueAfterSeconds = WAIT_FOR_SOURCE_SECONDS;
    return out;
  }
  if (fork.notReady) {
    markSpecValid(out, now);
    starting(out, "ForkSourceNotReady", fork.notReady, now);
    out.requeueAfterSeconds = WAIT_FOR_SOURCE_SECONDS;
    return out;
  }
  markSpecValid(out, now);

  const member = sandbox.status.claimedMember;
  if (member != null) {
    const held = input.claimedMember;
    if (held != null && held.claimedBy === sandbox.name) {
      mirrorClaimedMember(out, member, held, now);
      return out;
    }
    lostMember(out, sandbox, member);
  }
  if (claimFromPool(out, input)) return out;
  converge(client, input, fork, out);
  return out;
}

function markSpecValid(out, now) {
  setCondition(out.status.conditions, SPEC_VALID, "true", "Valid", "", now);
}

/** The PVCs to clone, or why the fork cannot start yet. */
function forkPlan(input) {
  const sandbox = input.sandbox;
  const sourceName = sandbox.spec.forkFrom;
  if (sourceName == null) return {};
  const firstRootfs =
    sandbox.status.rootfsPvc == null &&
    !input.observed.pvcs.some((p) => names.rootfsGenerationOf(sandbox.name, p.name) !== undefined);
  const firstWorkspace =
    sandbox.status.workspacePvc == null && !hasPvc(input.observed, names.workspacePvc(sandbox.name));
  // Cloned already: the source may come and go as it likes.
  if (!firstRootfs && !firstWorkspace) return {};
  const source = input.forkSource;
  if (source == null) {
    return {
      missing: new validate.Invalid(
        "ForkSourceNotFound",
        `spec.forkFrom names ${quoted(sourceName)}, which is not a Sandbox in namespace ${quoted(sandbox.namespace)}: create it, or recreate this sandbox without forkFrom`,
      ),
    };
  }
  const { rootfsPvc, workspacePvc } = source.status;
  if (rootfsPvc == null || workspacePvc == null) {
    return {
      notReady: `the fork source ${quoted(sourceName)} has no volumes yet; the fork starts when it has`,
    };
  }
  return {
    rootfs: firstRootfs ? rootfsPvc : undefined,
    workspace: firstWorkspace ? workspacePvc : undefined,
  };
}

/** The output that changes nothing yet: the status as it is, for this generation. */
function unchanged(sandbox) {
  const out = {
    status: status.copyStatus(sandbox.status),
    requeueAfterSeconds: undefined,
    claim: undefined,
    events: [],
  };
  out.status.observedGeneration = sandbox.generation;
  return out;
}

/**
 * The default's answer to a spec it will not act on, for a policy's own checks as for the
 * default's: `SpecValid=False` with the problem (a Warning Event the first time), no child
 * touched, and `Failed` only for a sandbox that has none yet. `problem` is a `validate.Invalid`
 * ({reason, message}).
 */
export function refused(input, problem) {
  const out = unchanged(input.sandbox);
  refuse(out, problem, input.now);
  return out;
}

function refuse(out, problem, now) {
  const conditions = out.status.conditions;
  if (!status.holds(conditions, SPEC_VALID, "false", problem.reason)) {
    out.events.push(status.warning(problem.reason, problem.message));
  }
  setCondition(conditions, SPEC_VALID, "false", problem.reason, problem.message, now);
  // A sandbox that has children keeps them as they are; only one that has none fails.
  if (out.status.rootfsPvc == null) {
    out.status.phase = "failed";
    setCondition(conditions, READY, "false", problem.reason, problem.message, now);
  }
}

function mirrorClaimedMember(out, memberName, member, now) {
  const s = out.status;
  s.phase = member.status.phase;
  s.podIp = member.status.podIp;
  s.rootfsPvc = member.status.rootfsPvc;
  s.workspacePvc = member.status.workspacePvc;
  const c = status.condition(member.status.conditions, READY);
  const [ready, reason] = c ? [c.status, c.reason] : ["unknown", "MemberStarting"];
  setCondition(s.conditions, READY, ready, reason, `adopted pool member ${quoted(memberName)}`, now);
}

function lostMember(out, sandbox, member) {
  const pool = sandbox.spec.warmPool ?? "";
  out.events.push(
    status.warning(
      "ClaimedMemberLost",
      `the adopted pool member ${quoted(member)} is gone, failed or held by another sandbox: claiming another ready member of warm pool ${quoted(pool)}, or starting cold`,
    ),
  );
  const s = out.status;
  s.claimedMember = undefined;
  s.podIp = undefined;
  s.rootfsPvc = undefined;
  s.workspacePvc = undefined;
  s.phase = "pending";
}

function claimFromPool(out, input) {
  const sandbox = input.sandbox;
  const pool = sandbox.spec.warmPool;
  if (pool == null) return false;
  // `out`'s status, not the input's: a claim that lost its member forgot its volumes.
  const untouched =
    out.status.rootfsPvc == null && input.observed.pvcs.length === 0 && input.observed.pod == null;
  if (!untouched) return false;
  const member = input.poolCandidates[0];
  if (member !== undefined) {
    out.claim = member;
    out.status.claimedMember = member;
    out.status.phase = "pending";
    setCondition(out.status.conditions, READY, "false", "Claiming", `adopting pool member ${quoted(member)}`, input.now);
    out.events.push(status.normal("Claimed", `adopted ready member ${quoted(member)} of warm pool ${quoted(pool)}`));
    return true;
  }
  out.events.push(
    status.warning("NoReadyMember", `warm pool ${quoted(pool)} has no ready member for this sandbox: starting cold`),
  );
  return false;
}

const hasPvc = (observed, name) => observed.pvcs.some((p) => p.name === name);

function converge(client, input, fork, out) {
  const sandbox = input.sandbox;
  const spec = sandbox.spec;
  const namespace = sandbox.namespace;
  const now = input.now;
  const owner = manifest.sandboxOwner(sandbox);
  const generation = spec.rootfsGeneration;
  const rootfs = names.rootfsPvc(sandbox.name, generation);
  const workspace = names.workspacePvc(sandbox.name);
  const secret = names.secret(sandbox.name);

  resumeAfterActivity(out, sandbox);
  const run = spec.desiredState === "running" && out.status.idlePausedAt == null;

  // A Pod that must go: the sandbox is paused, or it runs an older rootfs generation.
  const observedPod = input.observed.pod;
  let livePod = observedPod != null && !observedPod.deleting ? observedPod : undefined;
  let podTerminating = observedPod != null && observedPod.deleting;
  if (livePod) {
    const stale = livePod.rootfsGeneration !== generation;
    if (!run || stale) {
      client.deletePod(namespace, livePod.name);
      out.events.push(
        stale
          ? status.normal("Reset", `rootfs reset to generation ${generation}`)
          : status.normal("Paused", "Pod deleted; volumes and credentials kept"),
      );
      livePod = undefined;
      podTerminating = true;
    }
  }

  for (const old of input.observed.pvcs) {
    const oldGeneration = names.rootfsGenerationOf(sandbox.name, old.name);
    if (oldGeneration !== undefined && oldGeneration !== generation && !old.deleting) {
      client.deletePvc(namespace, old.name);
    }
  }

  const storageClass = spec.storageClass;
  if (!hasPvc(input.observed, workspace)) {
    const m = manifest.pvc(workspace, namespace, owner, "workspace", undefined, spec.workspaceSize, storageClass, fork.workspace);
    client.ensurePvc(namespace, workspace, m);
  }
  if (!hasPvc(input.observed, rootfs)) {
    const m = manifest.pvc(rootfs, namespace, owner, "rootfs", generation, spec.rootfsSize, storageClass, fork.rootfs);
    client.ensurePvc(namespace, rootfs, m);
  }
  if (!input.observed.secret) {
    client.ensureSecret(namespace, secret, manifest.secret(secret, namespace, owner, input.freshToken));
  }
  // Before the Pod, always: a Pod must never start without its NetworkPolicy.
  network(client, input, owner, out);
  out.status.rootfsPvc = rootfs;
  out.status.workspacePvc = workspace;

  if (!run) {
    settlePaused(out, sandbox, now);
    return;
  }
  setCondition(out.status.conditions, PAUSED, "false", "Running", "", now);
  if (livePod) {
    applied.running(out, sandbox, now);
    out.status.podIp = livePod.ip;
    // A Pod found running with no start recorded: the reaper's clock starts now.
    if (out.status.startedAt == null) out.status.startedAt = now;
    if (livePod.ready) {
      out.status.phase = "running";
      setCondition(out.status.conditions, READY, "true", "PodReady", "", now);
    } else {
      starting(out, "PodStarting", "the Pod is starting", now);
    }
  } else if (podTerminating) {
    // The old Pod still holds the name; a create now would only meet it again.
    applied.stopped(out);
    out.status.podIp = undefined;
    starting(out, "PodTerminating", "waiting for the previous Pod to go", now);
    out.requeueAfterSeconds = WAIT_FOR_TERMINATION_SECONDS;
  } else {
    const m = manifest.pod(namespace, owner, spec, rootfs, workspace, secret);
    const ip = client.ensurePod(namespace, names.pod(sandbox.name), m);
    out.status.podIp = ip ?? undefined;
    out.status.startedAt = now;
    applied.started(out, spec, now);
    out.events.push(status.normal("Started", `Pod created with rootfs generation ${generation}`));
    starting(out, "PodStarting", "the Pod is starting", now);
  }
}

/** The NetworkPolicy and the Service, applied when their digest differs from the cache's. */
function network(client, input, owner, out) {
  const sandbox = input.sandbox;
  const namespace = sandbox.namespace;
  const observedHash = (object) => (object != null && !object.deleting ? object.specHash : undefined);
  // The digest first: a converged sandbox renders no manifest.
  const policy = manifest.planNetworkPolicy(owner, sandbox.spec, input.clusterNetwork);
  if (observedHash(input.observed.networkPolicy) !== policy.specHash) {
    client.applyNetworkPolicy(namespace, names.networkPolicy(sandbox.name), policy.render(namespace).manifest);
  }
  const name = names.service(sandbox.name);
  const service = sandbox.spec.service;
  if (service != null) {
    const planned = manifest.planService(owner, service);
    if (observedHash(input.observed.service) !== planned.specHash) {
      client.applyService(namespace, name, planned.render(namespace).manifest);
    }
    out.status.serviceFqdn = manifest.fqdn(sandbox.name, namespace, input.clusterNetwork.clusterDomain);
  } else {
    const observed = input.observed.service;
    if (observed != null && !observed.deleting) client.deleteService(namespace, name);
    out.status.serviceFqdn = undefined;
  }
}

function starting(out, reason, message, now) {
  out.status.phase = "pending";
  setCondition(out.status.conditions, READY, "false", reason, message, now);
}

/** The reaper's pause holds until activity after it; a user's explicit pause replaces it. */
function resumeAfterActivity(out, sandbox) {
  const pausedAt = out.status.idlePausedAt;
  if (pausedAt == null) return;
  if (sandbox.spec.desiredState === "paused") {
    out.status.idlePausedAt = undefined;
  } else if (sandbox.lastActivity != null && sandbox.lastActivity > pausedAt) {
    out.status.idlePausedAt = undefined;
    out.events.push(
      status.normal("Resumed", `activity ${sandbox.lastActivity - pausedAt}s after the idle pause: resuming`),
    );
  }
}

function settlePaused(out, sandbox, now) {
  const [reason, message] =
    out.status.idlePausedAt != null
      ? [
          "Idle",
          `paused after ${sandbox.spec.idleTimeoutSeconds ?? 0}s without activity; resumes when cubepod.io/last-activity moves`,
        ]
      : ["UserRequested", "spec.desiredState is Paused"];
  out.status.phase = "paused";
  out.status.podIp = undefined;
  applied.stopped(out);
  setCondition(out.status.conditions, PAUSED, "true", reason, message, now);
  setCondition(out.status.conditions, READY, "false", "Paused", message, now);
}
