// A policy as the component's exports: the `policy` interface of the `policy-module` world, with
// the host's `kube-client` as its client. Only a component imports this module (its import of
// the contract exists only there); unit tests use @cubepod/policy/testing instead.
//
//   import { exportPolicy } from "@cubepod/policy/component";
//   export const policy = exportPolicy(myPolicy);
import * as host from "cubepod:controller/kube-client@0.2.0";
import { KubeError } from "./policy.js";

// The contract's s64 and u64 fields (timestamps, generations, durations), by name: the SDK holds
// them as BigInt, which is how componentize-js (StarlingMonkey) passes them. componentize-qjs
// (QuickJS) passes them as numbers instead; sdk/js/build.sh --quickjs defines
// CUBEPOD_INT64_AS_NUMBER, and the values are converted at this boundary, both ways.
const INT64_FIELDS = new Set([
  "now", "generation", "observedGeneration", "lastTransitionTime", "startedAt", "idlePausedAt",
  "lastActivity", "shutdownTime", "idleTimeoutSeconds", "idleSeconds", "delayMs",
]);
const INT64_AS_NUMBER = typeof CUBEPOD_INT64_AS_NUMBER !== "undefined" && CUBEPOD_INT64_AS_NUMBER === true;

/** `value` with every s64 and u64 field converted by `convert` (the others as they are). */
function int64s(value, convert) {
  if (Array.isArray(value)) return value.map((item) => int64s(item, convert));
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const [key, field] of Object.entries(value)) {
    out[key] = INT64_FIELDS.has(key) && field != null ? convert(field) : int64s(field, convert);
  }
  return out;
}
const big = (v) => (typeof v === "number" ? BigInt(v) : v);
const small = (v) => (typeof v === "bigint" ? Number(v) : v);
/** What the engine passed in, as the SDK holds it. */
const fromHost = INT64_AS_NUMBER ? (value) => int64s(value, big) : (value) => value;
/** What the SDK returns, as the engine takes it. */
const toHost = INT64_AS_NUMBER ? (value) => int64s(value, small) : (value) => value;

/** Each host call, with its error (a thrown `{payload}`) as a KubeError. */
function wrap(call) {
  return (...args) => {
    try {
      return call(...args);
    } catch (error) {
      throw KubeError.from(error?.payload ? { payload: fromHost(error.payload) } : error);
    }
  };
}

/** The host's kube-client. */
export const hostClient = Object.freeze({
  ensurePvc: wrap(host.ensurePvc),
  deletePvc: wrap(host.deletePvc),
  ensurePod: wrap(host.ensurePod),
  deletePod: wrap(host.deletePod),
  ensureSecret: wrap(host.ensureSecret),
  deleteSecret: wrap(host.deleteSecret),
  applyNetworkPolicy: wrap(host.applyNetworkPolicy),
  deleteNetworkPolicy: wrap(host.deleteNetworkPolicy),
  applyService: wrap(host.applyService),
  deleteService: wrap(host.deleteService),
});

/**
 * `policy` (made by definePolicy) as the `policy` interface's exports. A KubeError thrown by a
 * decision is the call's `kube-error`; any other error traps the call, and its message (with the
 * stack, on stderr) reaches the object's PolicyFailed condition.
 */
export function exportPolicy(policy) {
  const decide = (call) => {
    try {
      return toHost(call());
    } catch (error) {
      if (error instanceof KubeError) {
        if (!INT64_AS_NUMBER) throw error;
        throw Object.assign(new Error(error.message), { payload: toHost(error.payload) });
      }
      // QuickJS has no console: its message and stack reach the trap's report all the same.
      globalThis.console?.error(error instanceof Error && error.stack ? `${error}\n${error.stack}` : String(error));
      throw error instanceof Error ? error : new Error(String(error));
    }
  };
  return {
    describe: () => policy.describe(),
    reconcileSandbox: (input) => decide(() => policy.reconcileSandbox(hostClient, fromHost(input))),
    cleanupSandbox: (now, sandbox, observed) =>
      decide(() => policy.cleanupSandbox(hostClient, big(now), fromHost(sandbox), fromHost(observed))),
    reconcilePool: (input) => decide(() => policy.reconcilePool(fromHost(input))),
    reap: (now, namespace, sandboxes) => decide(() => policy.reap(big(now), namespace, fromHost(sandboxes))),
  };
}
