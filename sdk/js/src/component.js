// A policy as the component's exports: the `policy` interface of the `policy-module` world, with
// the host's `kube-client` as its client. Only a component imports this module (its import of
// the contract exists only there); unit tests use @cubepod/policy/testing instead.
//
//   import { exportPolicy } from "@cubepod/policy/component";
//   export const policy = exportPolicy(myPolicy);
import * as host from "cubepod:controller/kube-client@0.2.0";
import { KubeError } from "./policy.js";

/** Each host call, with its error (a thrown `{payload}`) as a KubeError. */
function wrap(call) {
  return (...args) => {
    try {
      return call(...args);
    } catch (error) {
      throw KubeError.from(error);
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
      return call();
    } catch (error) {
      if (error instanceof KubeError) throw error;
      console.error(error instanceof Error && error.stack ? `${error}\n${error.stack}` : String(error));
      throw error instanceof Error ? error : new Error(String(error));
    }
  };
  return {
    describe: () => policy.describe(),
    reconcileSandbox: (input) => decide(() => policy.reconcileSandbox(hostClient, input)),
    cleanupSandbox: (now, sandbox, observed) =>
      decide(() => policy.cleanupSandbox(hostClient, now, sandbox, observed)),
    reconcilePool: (input) => decide(() => policy.reconcilePool(input)),
    reap: (now, namespace, sandboxes) => decide(() => policy.reap(now, namespace, sandboxes)),
  };
}
