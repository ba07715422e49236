import type { KubeClient, Policy, PolicyInfo } from "./types.js";

/** The host's kube-client (only inside a component). */
export declare const hostClient: Readonly<KubeClient>;
/** `policy` as the component's `policy` interface: `export const policy = exportPolicy(p)`. */
export declare function exportPolicy(policy: Policy): {
  describe(): PolicyInfo;
  [decision: string]: (...args: any[]) => unknown;
};
