import type * as T from "./types.js";
export type * from "./types.js";

export declare const CONTRACT_VERSION: "0.2.0";

/** A kube-client call failed, or a decision refuses: the contract's `kube-error`. */
export declare class KubeError extends Error {
  constructor(
    tag: "not-found" | "conflict" | "refused" | "invalid" | "retryable" | "other",
    message: string,
    delayMs?: number | bigint,
  );
  readonly payload: T.KubeErrorValue;
  static from(error: unknown): unknown;
}

/** A spec a policy will not act on: the condition's reason and a message naming the fix. */
export declare class Invalid {
  constructor(reason: string, message: string);
  reason: string;
  message: string;
}

/** The default policy's decisions. */
export declare const defaults: Readonly<T.Decisions>;
/** `describe` and the decisions a policy changes; the others are the default's. */
export declare function definePolicy(
  decisions: Partial<T.Decisions> & { describe(): T.PolicyInfo },
): Readonly<T.Policy>;

export declare function reconcile(client: T.KubeClient, input: T.ReconcileInput): T.ReconcileOutput;
/** The default's answer to a spec it will not act on: `SpecValid=False`, no child touched. */
export declare function refused(input: T.ReconcileInput, problem: { reason: string; message: string }): T.ReconcileOutput;
export declare function cleanup(
  client: T.KubeClient,
  now: T.Timestamp,
  sandbox: T.Sandbox,
  observed: T.ObservedChildren,
): T.CleanupOutput;
export declare function reconcilePool(input: T.PoolInput): T.PoolOutput;
export declare function templateHash(template: T.SandboxSpec): string;
export declare const REPLICAS_CAPPED: "ReplicasCapped";
export declare function reap(now: T.Timestamp, namespace: string, sandboxes: T.ReapCandidate[]): T.ReapDecision[];

export declare const validate: {
  sandbox(sandbox: T.Sandbox, observed: T.ObservedChildren): Invalid | undefined;
  spec(spec: T.SandboxSpec, path: string): Invalid | undefined;
  Invalid: typeof Invalid;
};
export declare const status: {
  READY: "Ready";
  PAUSED: "Paused";
  SPEC_VALID: "SpecValid";
  setCondition(
    conditions: T.Condition[],
    kind: string,
    status: T.ConditionStatus,
    reason: string,
    message: string,
    now: T.Timestamp,
  ): void;
  condition(conditions: T.Condition[], kind: string): T.Condition | undefined;
  holds(conditions: T.Condition[], kind: string, status: T.ConditionStatus, reason: string): boolean;
  normal(reason: string, message: string): T.Event;
  warning(reason: string, message: string): T.Event;
  copyStatus<S extends { conditions: T.Condition[] }>(status: S): S;
};
export declare const shutdown: {
  bucket(left: bigint): [string, bigint | undefined];
  report(out: T.ReconcileOutput, sandbox: T.Sandbox, now: T.Timestamp): void;
};
export declare const names: Record<string, unknown> & {
  rootfsPvc(sandbox: string, generation: number): string;
  workspacePvc(sandbox: string): string;
  secret(sandbox: string): string;
  networkPolicy(sandbox: string): string;
  rootfsGenerationOf(sandbox: string, pvc: string): number | undefined;
};
export declare const manifest: Record<string, unknown>;
export declare const applied: Record<string, unknown>;
export declare class Cidr {
  static parse(text: string): Cidr | undefined;
  readonly v6: boolean;
  readonly prefix: number;
  contains(other: Cidr): boolean;
  equals(other: Cidr): boolean;
  v4Forms(): Cidr[] | undefined;
  toString(): string;
}
export declare function digest(json: string): string;
export declare function toJson(value: unknown): string;
export declare function quoted(text: string): string;
