// Test doubles for a policy's unit tests under node's test runner: a client that records the
// calls a decision makes (and keeps the objects they write), and inputs as the host hands them,
// built as the Rust SDK's fixtures (sdk/src/fixtures.rs) build them.
import { KubeError } from "./policy.js";
import * as names from "./names.js";
import * as manifest from "./manifest.js";
import { reconcile } from "./reconcile.js";

export { KubeError };

/** The namespace and the clock of the fixtures. */
export const NAMESPACE = "cubepod-workloads";
export const NOW = 1_800_000_000n;

/**
 * A kube-client that records each call (`calls`: {call, name, manifest}, the manifest parsed),
 * keeps the objects written (`objects`, keyed "pvc NAME", "pod NAME", ...), answers ensurePod
 * with `podIp`, and fails the call whose summary ("ensure-pod a") is `fail[0]` once with
 * `fail[1]` (a KubeError).
 */
export class RecordingClient {
  constructor({ podIp, fail } = {}) {
    this.calls = [];
    this.objects = new Map();
    this.podIp = podIp;
    this.fail = fail;
  }

  /** Each call as "ensure-pvc NAME", in order. */
  summaries() {
    return this.calls.map((c) => `${c.call} ${c.name}`);
  }

  /** The summaries so far, forgetting them. */
  takeSummaries() {
    const summaries = this.summaries();
    this.calls = [];
    return summaries;
  }

  #record(call, name, text) {
    if (this.fail && this.fail[0] === `${call} ${name}`) {
      const error = this.fail[1];
      this.fail = undefined;
      throw error;
    }
    let parsed;
    if (text !== undefined) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    }
    this.calls.push({ call, name, manifest: parsed, text });
    return parsed;
  }

  #ensure(call, kind, name, text) {
    const m = this.#record(call, name, text);
    if (!this.objects.has(`${kind} ${name}`)) this.objects.set(`${kind} ${name}`, m);
  }

  #apply(call, kind, name, text) {
    this.objects.set(`${kind} ${name}`, this.#record(call, name, text));
  }

  #delete(call, kind, name) {
    this.#record(call, name);
    this.objects.delete(`${kind} ${name}`);
  }

  ensurePvc(_namespace, name, text) {
    this.#ensure("ensure-pvc", "pvc", name, text);
  }
  deletePvc(_namespace, name) {
    this.#delete("delete-pvc", "pvc", name);
  }
  ensurePod(_namespace, name, text) {
    this.#ensure("ensure-pod", "pod", name, text);
    return this.podIp;
  }
  deletePod(_namespace, name) {
    this.#delete("delete-pod", "pod", name);
  }
  ensureSecret(_namespace, name, text) {
    this.#ensure("ensure-secret", "secret", name, text);
  }
  deleteSecret(_namespace, name) {
    this.#delete("delete-secret", "secret", name);
  }
  applyNetworkPolicy(_namespace, name, text) {
    this.#apply("apply-network-policy", "networkpolicy", name, text);
  }
  deleteNetworkPolicy(_namespace, name) {
    this.#delete("delete-network-policy", "networkpolicy", name);
  }
  applyService(_namespace, name, text) {
    this.#apply("apply-service", "service", name, text);
  }
  deleteService(_namespace, name) {
    this.#delete("delete-service", "service", name);
  }
}

/** A sandbox spec after the host's defaults, running `image`. */
export function spec(image) {
  return {
    image,
    desiredState: "running",
    rootfsGeneration: 1,
    forkFrom: undefined,
    idleTimeoutSeconds: undefined,
    cpu: undefined,
    memory: undefined,
    storageClass: undefined,
    rootfsSize: "10Gi",
    workspaceSize: "10Gi",
    runtimeClass: undefined,
    warmPool: undefined,
    network: { egress: "internet", allowCidrs: [], denyCidrs: [] },
    service: undefined,
    shutdownTime: undefined,
    shutdownPolicy: "delete",
  };
}

export function clusterNetwork() {
  return {
    clusterCidrs: ["10.244.0.0/16", "10.96.0.0/12"],
    dnsNamespace: "kube-system",
    dnsPodLabels: [["k8s-app", "kube-dns"]],
    ingressFrom: [],
    clusterDomain: "cluster.local",
  };
}

export function nothingObserved() {
  return { pvcs: [], pod: undefined, secret: false, networkPolicy: undefined, service: undefined };
}

export function newStatus() {
  return {
    phase: "pending",
    podIp: undefined,
    rootfsPvc: undefined,
    workspacePvc: undefined,
    observedGeneration: 0n,
    conditions: [],
    startedAt: undefined,
    idlePausedAt: undefined,
    claimedMember: undefined,
    serviceFqdn: undefined,
    shutdownIn: undefined,
  };
}

/** A new Sandbox `name` in NAMESPACE; `edit` (optional) changes it in place before it is returned. */
export function sandbox(name, edit) {
  const s = {
    namespace: NAMESPACE,
    name,
    uid: `uid-${name}`,
    generation: 1n,
    deleting: false,
    lastActivity: undefined,
    pool: undefined,
    claimedBy: undefined,
    labels: [],
    annotations: [],
    metaTruncated: false,
    spec: spec("ghcr.io/cubepod/sandbox-base:1.0"),
    status: newStatus(),
  };
  edit?.(s);
  return s;
}

/** The reconcile input of `s` (a sandbox) with nothing observed yet, at NOW. */
export function input(s) {
  return {
    now: NOW,
    sandbox: s,
    observed: nothingObserved(),
    forkSource: undefined,
    poolCandidates: [],
    claimedMember: undefined,
    freshToken: "token-0123456789abcdef",
    clusterNetwork: clusterNetwork(),
  };
}

/** What the reaper is handed of `s`. */
export function candidate(s) {
  return {
    name: s.name,
    running: s.spec.desiredState === "running" && s.status.idlePausedAt == null,
    idleTimeoutSeconds: s.spec.idleTimeoutSeconds,
    lastActivity: s.lastActivity,
    startedAt: s.status.startedAt,
    pool: s.pool,
    claimedBy: s.claimedBy,
    claimedMember: s.status.claimedMember,
    shutdownTime: s.spec.shutdownTime,
    shutdownPolicy: s.spec.shutdownPolicy,
  };
}

/** What the cache would hold of `sandboxName`'s children after `client`'s writes. */
export function observe(client, sandboxName, podsReady) {
  const observed = nothingObserved();
  for (const [key, m] of client.objects) {
    if (m?.metadata?.labels?.[names.SANDBOX_LABEL] !== sandboxName) continue;
    const [kind, name] = key.split(" ");
    if (kind === "pvc") observed.pvcs.push({ name, deleting: false });
    else if (kind === "pod") {
      const generation = Number(m.metadata.labels[names.GENERATION_LABEL]);
      observed.pod = {
        name,
        deleting: false,
        ip: podsReady ? client.podIp : undefined,
        ready: podsReady,
        rootfsGeneration: Number.isInteger(generation) ? generation : undefined,
      };
    } else if (kind === "secret") observed.secret = true;
    else if (kind === "networkpolicy" || kind === "service") {
      const object = { name, deleting: false, specHash: m.metadata.annotations?.[names.SPEC_HASH_ANNOTATION] };
      if (kind === "service") observed.service = object;
      else observed.networkPolicy = object;
    }
  }
  return observed;
}

/** A warm pool `name` of `replicas` members. */
export function pool(name, replicas) {
  return {
    namespace: NAMESPACE,
    name,
    uid: `uid-${name}`,
    generation: 1n,
    spec: { replicas, template: spec("ghcr.io/cubepod/sandbox-python:3.12"), updateStrategy: "recreate" },
    status: { replicas: 0, readyReplicas: 0, observedGeneration: 0n, conditions: [] },
  };
}

/** A member of a pool made from the fixtures' template. */
export function member(name, ready) {
  return {
    name,
    ready,
    claimed: false,
    deleting: false,
    templateHash: manifest.templateHash(pool("", 0).spec.template),
  };
}

export function poolInput(p, members) {
  return { now: NOW, pool: p, members, maxReplicas: 100 };
}

/**
 * A new sandbox's input, and the input of the same sandbox once the default policy created its
 * children and its Pod is ready: [input, converged].
 */
export function newAndConverged(name) {
  const fresh = input(sandbox(name));
  const client = new RecordingClient({ podIp: "10.0.0.1" });
  const created = reconcile(client, fresh);
  const converged = { ...fresh, sandbox: { ...fresh.sandbox, status: created.status } };
  converged.observed = observe(client, name, true);
  return [fresh, converged];
}
