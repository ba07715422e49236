"""Reconcile one Sandbox: every row of the lifecycle table (docs/architecture.md),
level-triggered. The same input makes the same calls, a converged sandbox makes none, and a
call that fails leaves only steps that the next reconcile finishes."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional, Union

from . import applied, manifest, names, shutdown, validate
from . import status as _status
from .client import KubeClient
from .manifest import Owner, VolumeRole
from .status import PAUSED, READY, SPEC_VALID, set_condition
from .text import quoted
from .types import (
    ConditionStatus,
    DesiredState,
    ObservedChildren,
    ObservedObject,
    ReconcileInput,
    ReconcileOutput,
    Sandbox,
    SandboxPhase,
    Timestamp,
)

#: Seconds to wait before looking again at what changes without a watch event to count on.
WAIT_FOR_SOURCE_SECONDS = 10
WAIT_FOR_TERMINATION_SECONDS = 2


def reconcile(client: KubeClient, input: ReconcileInput) -> ReconcileOutput:
    out = _reconcile_children(client, input)
    shutdown.report(out, input.sandbox, input.now)
    return out


@dataclass
class _SourceMissing:
    problem: validate.Invalid


@dataclass
class _SourceNotReady:
    message: str


@dataclass
class _ForkPlan:
    rootfs: Optional[str] = None
    workspace: Optional[str] = None


def _reconcile_children(client: KubeClient, input: ReconcileInput) -> ReconcileOutput:
    sandbox = input.sandbox
    now = input.now
    problem = validate.sandbox(sandbox, input.observed)
    if problem is not None:
        return refused(input, problem)
    out = unchanged(sandbox)
    fork = _fork_plan(input)
    if isinstance(fork, _SourceMissing):
        _refuse(out, fork.problem, now)
        out.requeue_after_seconds = WAIT_FOR_SOURCE_SECONDS
        return out
    if isinstance(fork, _SourceNotReady):
        _mark_spec_valid(out, now)
        _starting(out, "ForkSourceNotReady", fork.message, now)
        out.requeue_after_seconds = WAIT_FOR_SOURCE_SECONDS
        return out
    _mark_spec_valid(out, now)

    member = sandbox.status.claimed_member
    if member is not None:
        held = input.claimed_member
        if held is not None and held.claimed_by == sandbox.name:
            _mirror_claimed_member(out, member, held, now)
            return out
        _lost_member(out, sandbox, member)
    if _claim_from_pool(out, input):
        return out
    _converge(client, input, fork, out)
    return out


def _mark_spec_valid(out: ReconcileOutput, now: Timestamp) -> None:
    set_condition(out.status.conditions, SPEC_VALID, ConditionStatus.TRUE, "Valid", "", now)


def _has_pvc(observed: ObservedChildren, name: str) -> bool:
    return any(p.name == name for p in observed.pvcs)


def _fork_plan(input: ReconcileInput) -> Union[_ForkPlan, _SourceMissing, _SourceNotReady]:
    sandbox = input.sandbox
    source_name = sandbox.spec.fork_from
    if source_name is None:
        return _ForkPlan()
    first_rootfs = sandbox.status.rootfs_pvc is None and not any(
        names.rootfs_generation_of(sandbox.name, p.name) is not None for p in input.observed.pvcs
    )
    first_workspace = sandbox.status.workspace_pvc is None and not _has_pvc(
        input.observed, names.workspace_pvc(sandbox.name)
    )
    if not first_rootfs and not first_workspace:
        # Cloned already: the source may come and go as it likes.
        return _ForkPlan()
    source = input.fork_source
    if source is None:
        return _SourceMissing(validate.Invalid(
            "ForkSourceNotFound",
            f"spec.forkFrom names {quoted(source_name)}, which is not a Sandbox in namespace "
            f"{quoted(sandbox.namespace)}: create it, or recreate this sandbox without forkFrom",
        ))
    rootfs, workspace = source.status.rootfs_pvc, source.status.workspace_pvc
    if rootfs is None or workspace is None:
        return _SourceNotReady(
            f"the fork source {quoted(source_name)} has no volumes yet; the fork starts when it has"
        )
    return _ForkPlan(rootfs if first_rootfs else None, workspace if first_workspace else None)


def unchanged(sandbox: Sandbox) -> ReconcileOutput:
    """The output that changes nothing yet: the status as it is, for this generation."""
    out = ReconcileOutput(status=copy.deepcopy(sandbox.status))
    out.status.observed_generation = sandbox.generation
    return out


def refused(input: ReconcileInput, problem: validate.Invalid) -> ReconcileOutput:
    """The default's answer to a spec it will not act on, for a policy's own checks as for the
    default's: `SpecValid=False` with the problem (a Warning Event the first time), no child
    touched, and `Failed` only for a sandbox that has none yet."""
    out = unchanged(input.sandbox)
    _refuse(out, problem, input.now)
    return out


def _refuse(out: ReconcileOutput, problem: validate.Invalid, now: Timestamp) -> None:
    conditions = out.status.conditions
    if not _status.holds(conditions, SPEC_VALID, ConditionStatus.FALSE, problem.reason):
        out.events.append(_status.warning(problem.reason, problem.message))
    set_condition(conditions, SPEC_VALID, ConditionStatus.FALSE, problem.reason, problem.message, now)
    # A sandbox that has children keeps them as they are; only one that has none fails.
    if out.status.rootfs_pvc is None:
        out.status.phase = SandboxPhase.FAILED
        set_condition(conditions, READY, ConditionStatus.FALSE, problem.reason, problem.message, now)


def _mirror_claimed_member(out: ReconcileOutput, member_name: str, member: Sandbox,
                           now: Timestamp) -> None:
    """A claim that adopted a pool member reports the member's state."""
    s = out.status
    s.phase = member.status.phase
    s.pod_ip = member.status.pod_ip
    s.rootfs_pvc = member.status.rootfs_pvc
    s.workspace_pvc = member.status.workspace_pvc
    ready = _status.condition(member.status.conditions, READY)
    status, reason = (ready.status, ready.reason) if ready else (ConditionStatus.UNKNOWN, "MemberStarting")
    set_condition(s.conditions, READY, status, reason, f"adopted pool member {quoted(member_name)}", now)


def _lost_member(out: ReconcileOutput, sandbox: Sandbox, member: str) -> None:
    """The member a claim adopted is gone, being deleted, failed or held by another claim: the
    claim forgets it and is served again, by another ready member or cold."""
    pool = sandbox.spec.warm_pool or ""
    out.events.append(_status.warning(
        "ClaimedMemberLost",
        f"the adopted pool member {quoted(member)} is gone, failed or held by another sandbox: "
        f"claiming another ready member of warm pool {quoted(pool)}, or starting cold",
    ))
    s = out.status
    s.claimed_member = None
    s.pod_ip = None
    s.rootfs_pvc = None
    s.workspace_pvc = None
    s.phase = SandboxPhase.PENDING


def _claim_from_pool(out: ReconcileOutput, input: ReconcileInput) -> bool:
    """A new sandbox with `spec.warmPool` adopts a ready member when there is one."""
    pool = input.sandbox.spec.warm_pool
    if pool is None:
        return False
    untouched = (out.status.rootfs_pvc is None and not input.observed.pvcs
                 and input.observed.pod is None)
    if not untouched:
        return False
    if input.pool_candidates:
        member = input.pool_candidates[0]
        out.claim = member
        out.status.claimed_member = member
        out.status.phase = SandboxPhase.PENDING
        set_condition(out.status.conditions, READY, ConditionStatus.FALSE, "Claiming",
                      f"adopting pool member {quoted(member)}", input.now)
        out.events.append(_status.normal(
            "Claimed", f"adopted ready member {quoted(member)} of warm pool {quoted(pool)}"))
        return True
    out.events.append(_status.warning(
        "NoReadyMember",
        f"warm pool {quoted(pool)} has no ready member for this sandbox: starting cold"))
    return False


def _converge(client: KubeClient, input: ReconcileInput, fork: _ForkPlan,
              out: ReconcileOutput) -> None:
    """Brings the children to the spec: the lifecycle table's rows for a live sandbox."""
    sandbox = input.sandbox
    spec = sandbox.spec
    namespace = sandbox.namespace
    now = input.now
    owner = Owner("Sandbox", sandbox.name, sandbox.uid)
    generation = spec.rootfs_generation
    rootfs = names.rootfs_pvc(sandbox.name, generation)
    workspace = names.workspace_pvc(sandbox.name)
    secret = names.secret(sandbox.name)

    _resume_after_activity(out, sandbox)
    run = spec.desired_state == DesiredState.RUNNING and out.status.idle_paused_at is None

    # A Pod that must go: the sandbox is paused, or it runs an older rootfs generation.
    observed_pod = input.observed.pod
    live_pod = observed_pod if observed_pod is not None and not observed_pod.deleting else None
    pod_terminating = observed_pod is not None and observed_pod.deleting
    if live_pod is not None:
        stale = live_pod.rootfs_generation != generation
        if not run or stale:
            client.delete_pod(namespace, live_pod.name)
            out.events.append(
                _status.normal("Reset", f"rootfs reset to generation {generation}") if stale
                else _status.normal("Paused", "Pod deleted; volumes and credentials kept"))
            live_pod = None
            pod_terminating = True

    for old in input.observed.pvcs:
        old_generation = names.rootfs_generation_of(sandbox.name, old.name)
        if old_generation is not None and old_generation != generation and not old.deleting:
            client.delete_pvc(namespace, old.name)

    storage_class = spec.storage_class
    if not _has_pvc(input.observed, workspace):
        client.ensure_pvc(namespace, workspace, manifest.pvc(
            workspace, namespace, owner, VolumeRole.WORKSPACE, None, spec.workspace_size,
            storage_class, fork.workspace))
    if not _has_pvc(input.observed, rootfs):
        client.ensure_pvc(namespace, rootfs, manifest.pvc(
            rootfs, namespace, owner, VolumeRole.ROOTFS, generation, spec.rootfs_size,
            storage_class, fork.rootfs))
    if not input.observed.secret:
        client.ensure_secret(namespace, secret,
                             manifest.secret(secret, namespace, owner, input.fresh_token))
    # Before the Pod, always: a Pod must never start without its NetworkPolicy.
    _network(client, input, owner, out)
    out.status.rootfs_pvc = rootfs
    out.status.workspace_pvc = workspace

    if not run:
        _settle_paused(out, sandbox, now)
        return
    set_condition(out.status.conditions, PAUSED, ConditionStatus.FALSE, "Running", "", now)
    if live_pod is not None:
        applied.running(out, sandbox, now)
        out.status.pod_ip = live_pod.ip
        # A Pod found running with no start recorded: the reaper's clock starts now.
        if out.status.started_at is None:
            out.status.started_at = now
        if live_pod.ready:
            out.status.phase = SandboxPhase.RUNNING
            set_condition(out.status.conditions, READY, ConditionStatus.TRUE, "PodReady", "", now)
        else:
            _starting(out, "PodStarting", "the Pod is starting", now)
    elif pod_terminating:
        # The old Pod still holds the name; a create now would only meet it again.
        applied.stopped(out)
        out.status.pod_ip = None
        _starting(out, "PodTerminating", "waiting for the previous Pod to go", now)
        out.requeue_after_seconds = WAIT_FOR_TERMINATION_SECONDS
    else:
        pod = manifest.pod(namespace, owner, spec, rootfs, workspace, secret)
        ip = client.ensure_pod(namespace, names.pod(sandbox.name), pod)
        out.status.pod_ip = ip
        out.status.started_at = now
        applied.started(out, spec, now)
        out.events.append(_status.normal(
            "Started", f"Pod created with rootfs generation {generation}"))
        _starting(out, "PodStarting", "the Pod is starting", now)


def _observed_hash(obj: Optional[ObservedObject]) -> Optional[str]:
    return obj.spec_hash if obj is not None and not obj.deleting else None


def _network(client: KubeClient, input: ReconcileInput, owner: Owner, out: ReconcileOutput) -> None:
    """The NetworkPolicy, applied when its spec differs from the one the cache shows (by
    digest), and the Service of `spec.service`, applied likewise or deleted when dropped."""
    sandbox = input.sandbox
    namespace = sandbox.namespace
    policy = manifest.plan_network_policy(owner, sandbox.spec, input.cluster_network)
    if _observed_hash(input.observed.network_policy) != policy.spec_hash:
        client.apply_network_policy(namespace, names.network_policy(sandbox.name),
                                    policy.render(namespace).manifest)
    name = names.service(sandbox.name)
    if sandbox.spec.service is not None:
        service = manifest.plan_service(owner, sandbox.spec.service)
        if _observed_hash(input.observed.service) != service.spec_hash:
            client.apply_service(namespace, name, service.render(namespace).manifest)
        out.status.service_fqdn = manifest.fqdn(sandbox.name, namespace,
                                                input.cluster_network.cluster_domain)
    else:
        observed = input.observed.service
        if observed is not None and not observed.deleting:
            client.delete_service(namespace, name)
        out.status.service_fqdn = None


def _starting(out: ReconcileOutput, reason: str, message: str, now: Timestamp) -> None:
    out.status.phase = SandboxPhase.PENDING
    set_condition(out.status.conditions, READY, ConditionStatus.FALSE, reason, message, now)


def _resume_after_activity(out: ReconcileOutput, sandbox: Sandbox) -> None:
    """The reaper's pause holds until activity is seen after it; a user's explicit pause
    replaces it."""
    paused_at = out.status.idle_paused_at
    if paused_at is None:
        return
    if sandbox.spec.desired_state == DesiredState.PAUSED:
        out.status.idle_paused_at = None
        return
    activity = sandbox.last_activity
    if activity is not None and activity > paused_at:
        out.status.idle_paused_at = None
        out.events.append(_status.normal(
            "Resumed", f"activity {activity - paused_at}s after the idle pause: resuming"))


def _settle_paused(out: ReconcileOutput, sandbox: Sandbox, now: Timestamp) -> None:
    if out.status.idle_paused_at is not None:
        reason = "Idle"
        message = (f"paused after {sandbox.spec.idle_timeout_seconds or 0}s without activity; "
                   "resumes when cubepod.io/last-activity moves")
    else:
        reason, message = "UserRequested", "spec.desiredState is Paused"
    out.status.phase = SandboxPhase.PAUSED
    out.status.pod_ip = None
    applied.stopped(out)
    set_condition(out.status.conditions, PAUSED, ConditionStatus.TRUE, reason, message, now)
    set_condition(out.status.conditions, READY, ConditionStatus.FALSE, "Paused", message, now)
