"""The contract's types (`wit/controller.wit`, package cubepod:controller@0.2.0) as dataclasses
and enums, with the names componentize-py gives them, so that a component's inputs convert to
these field by field (`cubepod_policy.component`) and a native test builds them by hand
(`cubepod_policy.testing`). Timestamps are seconds since the Unix epoch (UTC), as `int`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional, Tuple

Timestamp = int


class EgressMode(Enum):
    """`spec.network.egress`."""

    INTERNET = 0
    NONE = 1
    CLUSTER = 2


@dataclass
class NetworkSpec:
    egress: EgressMode = EgressMode.INTERNET
    allow_cidrs: List[str] = field(default_factory=list)
    deny_cidrs: List[str] = field(default_factory=list)


class ServiceProtocol(Enum):
    TCP = 0
    UDP = 1
    SCTP = 2


@dataclass
class ServicePort:
    name: str
    port: int
    protocol: ServiceProtocol = ServiceProtocol.TCP


@dataclass
class ServiceSpec:
    ports: List[ServicePort] = field(default_factory=list)


class ShutdownPolicy(Enum):
    DELETE = 0
    PAUSE = 1


@dataclass
class ClusterNetwork:
    cluster_cidrs: List[str]
    dns_namespace: str
    dns_pod_labels: List[Tuple[str, str]]
    ingress_from: List[Tuple[str, str]]
    cluster_domain: str


class DesiredState(Enum):
    RUNNING = 0
    PAUSED = 1


@dataclass
class SandboxSpec:
    """`Sandbox.spec`, after the host applied the defaults."""

    image: str
    desired_state: DesiredState = DesiredState.RUNNING
    rootfs_generation: int = 1
    fork_from: Optional[str] = None
    idle_timeout_seconds: Optional[int] = None
    cpu: Optional[str] = None
    memory: Optional[str] = None
    storage_class: Optional[str] = None
    rootfs_size: str = "10Gi"
    workspace_size: str = "10Gi"
    runtime_class: Optional[str] = None
    warm_pool: Optional[str] = None
    network: NetworkSpec = field(default_factory=NetworkSpec)
    service: Optional[ServiceSpec] = None
    shutdown_time: Optional[Timestamp] = None
    shutdown_policy: ShutdownPolicy = ShutdownPolicy.DELETE


class SandboxPhase(Enum):
    PENDING = 0
    RUNNING = 1
    PAUSED = 2
    TERMINATING = 3
    FAILED = 4


class ConditionStatus(Enum):
    TRUE = 0
    FALSE = 1
    UNKNOWN = 2


@dataclass
class Condition:
    kind: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: Timestamp


@dataclass
class SandboxStatus:
    phase: SandboxPhase = SandboxPhase.PENDING
    pod_ip: Optional[str] = None
    rootfs_pvc: Optional[str] = None
    workspace_pvc: Optional[str] = None
    observed_generation: int = 0
    conditions: List[Condition] = field(default_factory=list)
    started_at: Optional[Timestamp] = None
    idle_paused_at: Optional[Timestamp] = None
    claimed_member: Optional[str] = None
    service_fqdn: Optional[str] = None
    shutdown_in: Optional[str] = None


@dataclass
class Sandbox:
    namespace: str
    name: str
    uid: str
    generation: int
    deleting: bool
    last_activity: Optional[Timestamp]
    pool: Optional[str]
    claimed_by: Optional[str]
    labels: List[Tuple[str, str]]
    annotations: List[Tuple[str, str]]
    meta_truncated: bool
    spec: SandboxSpec
    status: SandboxStatus


@dataclass
class ObservedPvc:
    name: str
    deleting: bool = False


@dataclass
class ObservedPod:
    name: str
    deleting: bool = False
    ip: Optional[str] = None
    ready: bool = False
    rootfs_generation: Optional[int] = None


@dataclass
class ObservedObject:
    name: str
    deleting: bool = False
    spec_hash: Optional[str] = None


@dataclass
class ObservedChildren:
    pvcs: List[ObservedPvc] = field(default_factory=list)
    pod: Optional[ObservedPod] = None
    secret: bool = False
    network_policy: Optional[ObservedObject] = None
    service: Optional[ObservedObject] = None


class EventType(Enum):
    NORMAL = 0
    WARNING = 1


@dataclass
class Event:
    kind: EventType
    reason: str
    message: str


@dataclass
class RetryAfter:
    delay_ms: int
    message: str


class UpdateStrategy(Enum):
    RECREATE = 0
    ON_REPLENISH = 1


@dataclass
class WarmPoolSpec:
    replicas: int
    template: SandboxSpec
    update_strategy: UpdateStrategy = UpdateStrategy.RECREATE


@dataclass
class WarmPoolStatus:
    replicas: int = 0
    ready_replicas: int = 0
    observed_generation: int = 0
    conditions: List[Condition] = field(default_factory=list)


@dataclass
class WarmPool:
    namespace: str
    name: str
    uid: str
    generation: int
    spec: WarmPoolSpec
    status: WarmPoolStatus


@dataclass
class PoolMember:
    name: str
    ready: bool
    claimed: bool = False
    deleting: bool = False
    template_hash: Optional[str] = None


@dataclass
class MemberCreate:
    name: str
    manifest: str


@dataclass
class ReapCandidate:
    name: str
    running: bool
    idle_timeout_seconds: Optional[int]
    last_activity: Optional[Timestamp]
    started_at: Optional[Timestamp]
    pool: Optional[str]
    claimed_by: Optional[str]
    claimed_member: Optional[str]
    shutdown_time: Optional[Timestamp]
    shutdown_policy: ShutdownPolicy


class ReapAction(Enum):
    IDLE_PAUSE = 0
    SHUTDOWN_PAUSE = 1
    SHUTDOWN_DELETE = 2


@dataclass
class ReapDecision:
    namespace: str
    name: str
    action: ReapAction
    idle_seconds: int
    reason: str


@dataclass
class PolicyInfo:
    name: str
    version: str
    contract_version: str


@dataclass
class ReconcileInput:
    now: Timestamp
    sandbox: Sandbox
    observed: ObservedChildren
    fork_source: Optional[Sandbox]
    pool_candidates: List[str]
    claimed_member: Optional[Sandbox]
    fresh_token: str
    cluster_network: ClusterNetwork


@dataclass
class ReconcileOutput:
    status: SandboxStatus
    requeue_after_seconds: Optional[int] = None
    claim: Optional[str] = None
    events: List[Event] = field(default_factory=list)


@dataclass
class CleanupOutput:
    done: bool
    status: SandboxStatus


@dataclass
class PoolInput:
    now: Timestamp
    pool: WarmPool
    members: List[PoolMember]
    max_replicas: int


@dataclass
class PoolOutput:
    create: List[MemberCreate]
    delete: List[str]
    status: WarmPoolStatus
    events: List[Event]
