import type * as T from "./types.js";
export { KubeError } from "./index.js";

export declare const NAMESPACE: "cubepod-workloads";
export declare const NOW: bigint;

export interface RecordedCall {
  call: string;
  name: string;
  /** The manifest, parsed (a string if it is not JSON). */
  manifest?: unknown;
  text?: string;
}
export declare class RecordingClient implements T.KubeClient {
  constructor(options?: { podIp?: string; fail?: [string, Error] });
  calls: RecordedCall[];
  objects: Map<string, any>;
  podIp?: string;
  summaries(): string[];
  takeSummaries(): string[];
  ensurePvc(namespace: string, name: string, manifest: string): void;
  deletePvc(namespace: string, name: string): void;
  ensurePod(namespace: string, name: string, manifest: string): string | undefined;
  deletePod(namespace: string, name: string): void;
  ensureSecret(namespace: string, name: string, manifest: string): void;
  deleteSecret(namespace: string, name: string): void;
  applyNetworkPolicy(namespace: string, name: string, manifest: string): void;
  deleteNetworkPolicy(namespace: string, name: string): void;
  applyService(namespace: string, name: string, manifest: string): void;
  deleteService(namespace: string, name: string): void;
}
export declare function spec(image: string): T.SandboxSpec;
export declare function clusterNetwork(): T.ClusterNetwork;
export declare function nothingObserved(): T.ObservedChildren;
export declare function newStatus(): T.SandboxStatus;
export declare function sandbox(name: string, edit?: (sandbox: T.Sandbox) => void): T.Sandbox;
export declare function input(sandbox: T.Sandbox): T.ReconcileInput;
export declare function candidate(sandbox: T.Sandbox): T.ReapCandidate;
export declare function observe(client: RecordingClient, sandbox: string, podsReady: boolean): T.ObservedChildren;
export declare function pool(name: string, replicas: number): T.WarmPool;
export declare function member(name: string, ready: boolean): T.PoolMember;
export declare function poolInput(pool: T.WarmPool, members: T.PoolMember[]): T.PoolInput;
export declare function newAndConverged(name: string): [T.ReconcileInput, T.ReconcileInput];
