// The contract's types (wit/controller.wit, cubepod:controller@0.2.0) as a JavaScript policy
// sees them through componentize-js: records are objects with camelCase fields, enums and
// variant tags are their WIT names, an absent `option` is `undefined`, `s64` and `u64` are
// BigInt, `list<tuple<a, b>>` is an array of pairs.

/** Seconds since the Unix epoch, UTC. */
export type Timestamp = bigint;

export type EgressMode = "internet" | "none" | "cluster";
export type ServiceProtocol = "tcp" | "udp" | "sctp";
export type ShutdownPolicy = "delete" | "pause";
export type DesiredState = "running" | "paused";
export type SandboxPhase = "pending" | "running" | "paused" | "terminating" | "failed";
export type ConditionStatus = "true" | "false" | "unknown";
export type EventType = "normal" | "warning";
export type UpdateStrategy = "recreate" | "on-replenish";
export type ReapAction = "idle-pause" | "shutdown-pause" | "shutdown-delete";

export interface NetworkSpec {
  egress: EgressMode;
  allowCidrs: string[];
  denyCidrs: string[];
}
export interface ServicePort {
  name: string;
  port: number;
  protocol: ServiceProtocol;
}
export interface ServiceSpec {
  ports: ServicePort[];
}
export interface ClusterNetwork {
  clusterCidrs: string[];
  dnsNamespace: string;
  dnsPodLabels: [string, string][];
  ingressFrom: [string, string][];
  clusterDomain: string;
}
export interface SandboxSpec {
  image: string;
  desiredState: DesiredState;
  rootfsGeneration: number;
  forkFrom?: string;
  idleTimeoutSeconds?: bigint;
  cpu?: string;
  memory?: string;
  storageClass?: string;
  rootfsSize: string;
  workspaceSize: string;
  runtimeClass?: string;
  warmPool?: string;
  network: NetworkSpec;
  service?: ServiceSpec;
  shutdownTime?: Timestamp;
  shutdownPolicy: ShutdownPolicy;
}
export interface Condition {
  kind: string;
  status: ConditionStatus;
  reason: string;
  message: string;
  lastTransitionTime: Timestamp;
}
export interface SandboxStatus {
  phase: SandboxPhase;
  podIp?: string;
  rootfsPvc?: string;
  workspacePvc?: string;
  observedGeneration: bigint;
  conditions: Condition[];
  startedAt?: Timestamp;
  idlePausedAt?: Timestamp;
  claimedMember?: string;
  serviceFqdn?: string;
  shutdownIn?: string;
}
export interface Sandbox {
  namespace: string;
  name: string;
  uid: string;
  generation: bigint;
  deleting: boolean;
  lastActivity?: Timestamp;
  pool?: string;
  claimedBy?: string;
  labels: [string, string][];
  annotations: [string, string][];
  metaTruncated: boolean;
  spec: SandboxSpec;
  status: SandboxStatus;
}
export interface ObservedPvc {
  name: string;
  deleting: boolean;
}
export interface ObservedPod {
  name: string;
  deleting: boolean;
  ip?: string;
  ready: boolean;
  rootfsGeneration?: number;
}
export interface ObservedObject {
  name: string;
  deleting: boolean;
  specHash?: string;
}
export interface ObservedChildren {
  pvcs: ObservedPvc[];
  pod?: ObservedPod;
  secret: boolean;
  networkPolicy?: ObservedObject;
  service?: ObservedObject;
}
export interface Event {
  kind: EventType;
  reason: string;
  message: string;
}
export type KubeErrorValue =
  | { tag: "not-found" | "conflict" | "refused" | "invalid" | "other"; val: string }
  | { tag: "retryable"; val: { delayMs: bigint; message: string } };
export interface WarmPoolSpec {
  replicas: number;
  template: SandboxSpec;
  updateStrategy: UpdateStrategy;
}
export interface WarmPoolStatus {
  replicas: number;
  readyReplicas: number;
  observedGeneration: bigint;
  conditions: Condition[];
}
export interface WarmPool {
  namespace: string;
  name: string;
  uid: string;
  generation: bigint;
  spec: WarmPoolSpec;
  status: WarmPoolStatus;
}
export interface PoolMember {
  name: string;
  ready: boolean;
  claimed: boolean;
  deleting: boolean;
  templateHash?: string;
}
export interface MemberCreate {
  name: string;
  manifest: string;
}
export interface ReapCandidate {
  name: string;
  running: boolean;
  idleTimeoutSeconds?: bigint;
  lastActivity?: Timestamp;
  startedAt?: Timestamp;
  pool?: string;
  claimedBy?: string;
  claimedMember?: string;
  shutdownTime?: Timestamp;
  shutdownPolicy: ShutdownPolicy;
}
export interface ReapDecision {
  namespace: string;
  name: string;
  action: ReapAction;
  idleSeconds: bigint;
  reason: string;
}
export interface PolicyInfo {
  name: string;
  version: string;
  contractVersion: string;
}
export interface ReconcileInput {
  now: Timestamp;
  sandbox: Sandbox;
  observed: ObservedChildren;
  forkSource?: Sandbox;
  poolCandidates: string[];
  claimedMember?: Sandbox;
  freshToken: string;
  clusterNetwork: ClusterNetwork;
}
export interface ReconcileOutput {
  status: SandboxStatus;
  requeueAfterSeconds?: number;
  claim?: string;
  events: Event[];
}
export interface CleanupOutput {
  done: boolean;
  status: SandboxStatus;
}
export interface PoolInput {
  now: Timestamp;
  pool: WarmPool;
  members: PoolMember[];
  maxReplicas: number;
}
export interface PoolOutput {
  create: MemberCreate[];
  delete: string[];
  status: WarmPoolStatus;
  events: Event[];
}

/** The host's `kube-client`: each call throws a KubeError when it fails. */
export interface KubeClient {
  ensurePvc(namespace: string, name: string, manifest: string): void;
  deletePvc(namespace: string, name: string): void;
  /** Returns the Pod's IP once it has one. */
  ensurePod(namespace: string, name: string, manifest: string): string | undefined;
  deletePod(namespace: string, name: string): void;
  ensureSecret(namespace: string, name: string, manifest: string): void;
  deleteSecret(namespace: string, name: string): void;
  applyNetworkPolicy(namespace: string, name: string, manifest: string): void;
  deleteNetworkPolicy(namespace: string, name: string): void;
  applyService(namespace: string, name: string, manifest: string): void;
  deleteService(namespace: string, name: string): void;
}

/** The decisions of a policy, each with the client it acts through. */
export interface Decisions {
  reconcileSandbox(client: KubeClient, input: ReconcileInput): ReconcileOutput;
  cleanupSandbox(client: KubeClient, now: Timestamp, sandbox: Sandbox, observed: ObservedChildren): CleanupOutput;
  reconcilePool(input: PoolInput): PoolOutput;
  reap(now: Timestamp, namespace: string, sandboxes: ReapCandidate[]): ReapDecision[];
}
export interface Policy extends Decisions {
  describe(): PolicyInfo;
}
