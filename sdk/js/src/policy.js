// A policy as a set of decisions, each the default one unless the policy replaces it, and the
// error a kube-client call fails with.
import { reconcile } from "./reconcile.js";
import { cleanup } from "./cleanup.js";
import { reconcilePool } from "./pool.js";
import { reap } from "./reaper.js";

/** The version of the `cubepod:controller` WIT package this SDK follows. */
export const CONTRACT_VERSION = "0.2.0";

const KINDS = ["not-found", "conflict", "refused", "invalid", "retryable", "other"];

/**
 * A kube-client call failed, or a policy refuses a call: the contract's `kube-error`. `payload`
 * is the WIT variant (`{tag, val}`): the component returns it as the call's error, and the
 * controller retries, reports or gives up as for a Rust policy's error.
 */
export class KubeError extends Error {
  /**
   * @param tag "not-found", "conflict", "refused", "invalid", "retryable" or "other"
   * @param message what failed, in words
   * @param delayMs for "retryable": when to try again (milliseconds)
   */
  constructor(tag, message, delayMs) {
    super(`${tag}: ${message}`);
    if (!KINDS.includes(tag)) throw new TypeError(`KubeError: ${tag} is not one of ${KINDS.join(", ")}`);
    this.name = "KubeError";
    const val = tag === "retryable" ? { delayMs: BigInt(delayMs ?? 1000), message } : message;
    Object.defineProperty(this, "payload", { value: { tag, val }, enumerable: true });
  }

  /** The error a call to the host threw (its `payload` the WIT variant), as a KubeError. */
  static from(error) {
    if (error instanceof KubeError) return error;
    const payload = error?.payload;
    if (payload && KINDS.includes(payload.tag)) {
      const retry = payload.tag === "retryable";
      return new KubeError(payload.tag, retry ? payload.val.message : payload.val, retry ? payload.val.delayMs : undefined);
    }
    return error;
  }
}

/** The default policy's decisions. Each takes what the contract's function takes, and a client. */
export const defaults = Object.freeze({
  reconcileSandbox: (client, input) => reconcile(client, input),
  cleanupSandbox: (client, now, sandbox, observed) => cleanup(client, now, sandbox, observed),
  reconcilePool: (input) => reconcilePool(input),
  reap: (now, namespace, sandboxes) => reap(now, namespace, sandboxes),
});

/**
 * A policy: `describe` (required) and the decisions it changes; every other decision is the
 * default policy's. A decision may call `defaults.<name>` for the default's answer.
 */
export function definePolicy(decisions) {
  if (typeof decisions?.describe !== "function") {
    throw new TypeError("definePolicy: a policy needs describe() returning {name, version, contractVersion}");
  }
  return Object.freeze({ ...defaults, ...decisions });
}
