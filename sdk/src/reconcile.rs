//! Reconcile one Sandbox: every row of the lifecycle table (docs/architecture.md),
//! level-triggered. The same input makes the same calls, a converged sandbox makes none, and a
//! call that fails leaves only steps that the next reconcile finishes.

use crate::prelude::*;

use crate::bindings::{
    ConditionStatus, DesiredState, ObservedChildren, ObservedObject, ObservedPod, ReconcileInput,
    ReconcileOutput, Sandbox, SandboxPhase,
};
use crate::client::{KubeClient, KubeResult};
use crate::manifest::{self, Owner, VolumeRole};
use crate::status::{self, PAUSED, READY, SPEC_VALID, set_condition};
use crate::{applied, names, validate};

/// Seconds to wait before looking again at something that changes without a watch event we
/// can count on (a fork source appearing, a Pod finishing its termination).
const WAIT_FOR_SOURCE_SECONDS: u32 = 10;
const WAIT_FOR_TERMINATION_SECONDS: u32 = 2;

pub fn reconcile(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
) -> KubeResult<ReconcileOutput> {
    let mut out = reconcile_children(client, input)?;
    crate::shutdown::report(&mut out, &input.sandbox, input.now);
    Ok(out)
}

/// Everything of a reconcile but `status.shutdownIn`, which every path reports alike.
fn reconcile_children(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
) -> KubeResult<ReconcileOutput> {
    let sandbox = &input.sandbox;
    let now = input.now;
    if let Err(problem) = validate::sandbox(sandbox, &input.observed) {
        return Ok(refused(input, &problem));
    }
    let mut out = unchanged(sandbox);
    let fork = match fork_plan(input) {
        Ok(fork) => fork,
        Err(ForkBlocked::SourceMissing(problem)) => {
            refuse(&mut out, &problem, now);
            out.requeue_after_seconds = Some(WAIT_FOR_SOURCE_SECONDS);
            return Ok(out);
        }
        Err(ForkBlocked::SourceNotReady(message)) => {
            mark_spec_valid(&mut out, now);
            starting(&mut out, "ForkSourceNotReady", &message, now);
            out.requeue_after_seconds = Some(WAIT_FOR_SOURCE_SECONDS);
            return Ok(out);
        }
    };
    mark_spec_valid(&mut out, now);

    if let Some(member) = sandbox.status.claimed_member.clone() {
        let held = input
            .claimed_member
            .as_ref()
            .filter(|m| m.claimed_by.as_deref() == Some(sandbox.name.as_str()));
        match held {
            Some(held) => {
                mirror_claimed_member(&mut out, &member, held, now);
                return Ok(out);
            }
            None => lost_member(&mut out, sandbox, &member),
        }
    }
    if claim_from_pool(&mut out, input) {
        return Ok(out);
    }
    converge(client, input, &fork, &mut out)?;
    Ok(out)
}

fn mark_spec_valid(out: &mut ReconcileOutput, now: i64) {
    set_condition(
        &mut out.status.conditions,
        SPEC_VALID,
        ConditionStatus::True,
        "Valid",
        "",
        now,
    );
}

/// Why a fork cannot start yet.
enum ForkBlocked {
    /// The source does not exist: the spec names something that is not there.
    SourceMissing(validate::Invalid),
    /// The source exists but has no volumes yet: wait for it.
    SourceNotReady(String),
}

/// The PVCs to clone, when this sandbox is a fork whose volumes are still to be made.
#[derive(Default)]
struct ForkPlan {
    rootfs: Option<String>,
    workspace: Option<String>,
}

fn fork_plan(input: &ReconcileInput) -> Result<ForkPlan, ForkBlocked> {
    let sandbox = &input.sandbox;
    let Some(source_name) = &sandbox.spec.fork_from else {
        return Ok(ForkPlan::default());
    };
    let first_rootfs = sandbox.status.rootfs_pvc.is_none()
        && !input
            .observed
            .pvcs
            .iter()
            .any(|p| names::rootfs_generation_of(&sandbox.name, &p.name).is_some());
    let first_workspace = sandbox.status.workspace_pvc.is_none()
        && !has_pvc(&input.observed, &names::workspace_pvc(&sandbox.name));
    if !first_rootfs && !first_workspace {
        // Cloned already: the source may come and go as it likes.
        return Ok(ForkPlan::default());
    }
    let source = input.fork_source.as_ref().ok_or_else(|| {
        ForkBlocked::SourceMissing(validate::Invalid {
            reason: "ForkSourceNotFound",
            message: format!(
                "spec.forkFrom names {source_name:?}, which is not a Sandbox in namespace \
                     {:?}: create it, or recreate this sandbox without forkFrom",
                sandbox.namespace
            ),
        })
    })?;
    let (Some(rootfs), Some(workspace)) = (&source.status.rootfs_pvc, &source.status.workspace_pvc)
    else {
        return Err(ForkBlocked::SourceNotReady(format!(
            "the fork source {source_name:?} has no volumes yet; the fork starts when it has"
        )));
    };
    Ok(ForkPlan {
        rootfs: first_rootfs.then(|| rootfs.clone()),
        workspace: first_workspace.then(|| workspace.clone()),
    })
}

/// Records why the spec cannot be acted on. Nothing is created or deleted because of it.
/// The output that changes nothing yet: the status as it is, for this generation.
fn unchanged(sandbox: &Sandbox) -> ReconcileOutput {
    let mut out = ReconcileOutput {
        status: sandbox.status.clone(),
        requeue_after_seconds: None,
        claim: None,
        events: Vec::new(),
    };
    out.status.observed_generation = sandbox.generation;
    out
}

/// The default's answer to a spec it will not act on, for a policy's own checks as for the
/// default's: `SpecValid=False` with the problem (a Warning Event the first time), no child
/// touched, and `Failed` only for a sandbox that has none yet.
pub fn refused(input: &ReconcileInput, problem: &validate::Invalid) -> ReconcileOutput {
    let mut out = unchanged(&input.sandbox);
    refuse(&mut out, problem, input.now);
    out
}

fn refuse(out: &mut ReconcileOutput, problem: &validate::Invalid, now: i64) {
    let conditions = &mut out.status.conditions;
    if !status::holds(
        conditions,
        SPEC_VALID,
        ConditionStatus::False,
        problem.reason,
    ) {
        out.events
            .push(status::warning(problem.reason, problem.message.clone()));
    }
    set_condition(
        conditions,
        SPEC_VALID,
        ConditionStatus::False,
        problem.reason,
        problem.message.clone(),
        now,
    );
    // A sandbox that has children keeps them as they are; only one that has none fails.
    if out.status.rootfs_pvc.is_none() {
        out.status.phase = SandboxPhase::Failed;
        set_condition(
            conditions,
            READY,
            ConditionStatus::False,
            problem.reason,
            problem.message.clone(),
            now,
        );
    }
}

/// A claim that adopted a pool member reports the member's state.
fn mirror_claimed_member(out: &mut ReconcileOutput, member_name: &str, member: &Sandbox, now: i64) {
    let status = &mut out.status;
    status.phase = member.status.phase;
    status.pod_ip = member.status.pod_ip.clone();
    status.rootfs_pvc = member.status.rootfs_pvc.clone();
    status.workspace_pvc = member.status.workspace_pvc.clone();
    let (ready, reason) = status::condition(&member.status.conditions, READY)
        .map(|c| (c.status, c.reason.clone()))
        .unwrap_or((ConditionStatus::Unknown, "MemberStarting".to_string()));
    set_condition(
        &mut status.conditions,
        READY,
        ready,
        &reason,
        format!("adopted pool member {member_name:?}"),
        now,
    );
}

/// The member a claim adopted is gone, being deleted, failed or held by another claim: the
/// claim forgets it (and the member's volumes it reported) and is served again, by another
/// ready member or cold. The user did nothing wrong: the claim is not failed for it.
fn lost_member(out: &mut ReconcileOutput, sandbox: &Sandbox, member: &str) {
    let pool = sandbox.spec.warm_pool.as_deref().unwrap_or_default();
    out.events.push(status::warning(
        "ClaimedMemberLost",
        format!(
            "the adopted pool member {member:?} is gone, failed or held by another sandbox: \
             claiming another ready member of warm pool {pool:?}, or starting cold"
        ),
    ));
    let status = &mut out.status;
    status.claimed_member = None;
    status.pod_ip = None;
    status.rootfs_pvc = None;
    status.workspace_pvc = None;
    status.phase = SandboxPhase::Pending;
}

/// A new sandbox with `spec.warmPool` adopts a ready member when there is one. Returns true
/// when it did; otherwise the sandbox starts cold.
fn claim_from_pool(out: &mut ReconcileOutput, input: &ReconcileInput) -> bool {
    let sandbox = &input.sandbox;
    let Some(pool) = &sandbox.spec.warm_pool else {
        return false;
    };
    // `out`'s status, not the input's: a claim that lost its member forgot its volumes.
    let untouched = out.status.rootfs_pvc.is_none()
        && input.observed.pvcs.is_empty()
        && input.observed.pod.is_none();
    if !untouched {
        return false;
    }
    match input.pool_candidates.first() {
        Some(member) => {
            out.claim = Some(member.clone());
            out.status.claimed_member = Some(member.clone());
            out.status.phase = SandboxPhase::Pending;
            set_condition(
                &mut out.status.conditions,
                READY,
                ConditionStatus::False,
                "Claiming",
                format!("adopting pool member {member:?}"),
                input.now,
            );
            out.events.push(status::normal(
                "Claimed",
                format!("adopted ready member {member:?} of warm pool {pool:?}"),
            ));
            true
        }
        None => {
            out.events.push(status::warning(
                "NoReadyMember",
                format!("warm pool {pool:?} has no ready member for this sandbox: starting cold"),
            ));
            false
        }
    }
}

fn has_pvc(observed: &ObservedChildren, name: &str) -> bool {
    observed.pvcs.iter().any(|p| p.name == name)
}

/// Brings the children to the spec: the lifecycle table's rows for a live sandbox.
fn converge(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
    fork: &ForkPlan,
    out: &mut ReconcileOutput,
) -> KubeResult<()> {
    let sandbox = &input.sandbox;
    let spec = &sandbox.spec;
    let namespace = sandbox.namespace.as_str();
    let now = input.now;
    let owner = Owner {
        kind: "Sandbox",
        name: &sandbox.name,
        uid: &sandbox.uid,
    };
    let generation = spec.rootfs_generation;
    let rootfs = names::rootfs_pvc(&sandbox.name, generation);
    let workspace = names::workspace_pvc(&sandbox.name);
    let secret = names::secret(&sandbox.name);

    resume_after_activity(out, sandbox);
    let run = spec.desired_state == DesiredState::Running && out.status.idle_paused_at.is_none();

    // A Pod that must go: the sandbox is paused, or it runs an older rootfs generation.
    let mut live_pod: Option<&ObservedPod> = input.observed.pod.as_ref().filter(|p| !p.deleting);
    let mut pod_terminating = input.observed.pod.as_ref().is_some_and(|p| p.deleting);
    if let Some(current) = live_pod {
        let stale = current.rootfs_generation != Some(generation);
        if !run || stale {
            client.delete_pod(namespace, &current.name)?;
            out.events.push(if stale {
                status::normal("Reset", format!("rootfs reset to generation {generation}"))
            } else {
                status::normal("Paused", "Pod deleted; volumes and credentials kept")
            });
            live_pod = None;
            pod_terminating = true;
        }
    }

    for old in &input.observed.pvcs {
        let old_generation = names::rootfs_generation_of(&sandbox.name, &old.name);
        if old_generation.is_some_and(|g| g != generation) && !old.deleting {
            client.delete_pvc(namespace, &old.name)?;
        }
    }

    let storage_class = spec.storage_class.as_deref();
    if !has_pvc(&input.observed, &workspace) {
        let manifest = manifest::pvc(
            &workspace,
            namespace,
            owner,
            VolumeRole::Workspace,
            None,
            &spec.workspace_size,
            storage_class,
            fork.workspace.as_deref(),
        );
        client.ensure_pvc(namespace, &workspace, &manifest)?;
    }
    if !has_pvc(&input.observed, &rootfs) {
        let manifest = manifest::pvc(
            &rootfs,
            namespace,
            owner,
            VolumeRole::Rootfs,
            Some(generation),
            &spec.rootfs_size,
            storage_class,
            fork.rootfs.as_deref(),
        );
        client.ensure_pvc(namespace, &rootfs, &manifest)?;
    }
    if !input.observed.secret {
        let manifest = manifest::secret(&secret, namespace, owner, &input.fresh_token);
        client.ensure_secret(namespace, &secret, &manifest)?;
    }
    // Before the Pod, always: a Pod must never start without its NetworkPolicy.
    network(client, input, owner, out)?;
    out.status.rootfs_pvc = Some(rootfs.clone());
    out.status.workspace_pvc = Some(workspace.clone());

    if !run {
        settle_paused(out, sandbox, now);
        return Ok(());
    }
    set_condition(
        &mut out.status.conditions,
        PAUSED,
        ConditionStatus::False,
        "Running",
        "",
        now,
    );
    match live_pod {
        Some(current) => {
            applied::running(out, sandbox, now);
            out.status.pod_ip = current.ip.clone();
            // A Pod found running with no start recorded (the status write after its creation
            // was lost): the reaper's clock starts now rather than never.
            if out.status.started_at.is_none() {
                out.status.started_at = Some(now);
            }
            if current.ready {
                out.status.phase = SandboxPhase::Running;
                set_condition(
                    &mut out.status.conditions,
                    READY,
                    ConditionStatus::True,
                    "PodReady",
                    "",
                    now,
                );
            } else {
                starting(out, "PodStarting", "the Pod is starting", now);
            }
        }
        None if pod_terminating => {
            // The old Pod still holds the name; a create now would only meet it again.
            applied::stopped(out);
            out.status.pod_ip = None;
            starting(
                out,
                "PodTerminating",
                "waiting for the previous Pod to go",
                now,
            );
            out.requeue_after_seconds = Some(WAIT_FOR_TERMINATION_SECONDS);
        }
        None => {
            let manifest = manifest::pod(namespace, owner, spec, &rootfs, &workspace, &secret);
            let ip = client.ensure_pod(namespace, &names::pod(&sandbox.name), &manifest)?;
            out.status.pod_ip = ip;
            out.status.started_at = Some(now);
            applied::started(out, spec, now);
            out.events.push(status::normal(
                "Started",
                format!("Pod created with rootfs generation {generation}"),
            ));
            starting(out, "PodStarting", "the Pod is starting", now);
        }
    }
    Ok(())
}

/// The NetworkPolicy, applied when its spec differs from the one the cache shows (by digest),
/// and the Service of `spec.service`, applied likewise or deleted when the spec drops it. An
/// apply patches in place: the Pod keeps running and is never without its policy.
fn network(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
    owner: Owner<'_>,
    out: &mut ReconcileOutput,
) -> KubeResult<()> {
    let sandbox = &input.sandbox;
    let namespace = sandbox.namespace.as_str();
    let observed_hash = |object: &Option<ObservedObject>| {
        object
            .as_ref()
            .filter(|o| !o.deleting)
            .and_then(|o| o.spec_hash.clone())
    };
    // The digest first: a converged sandbox renders no manifest.
    let policy = manifest::plan_network_policy(owner, &sandbox.spec, &input.cluster_network);
    if observed_hash(&input.observed.network_policy).as_deref() != Some(policy.spec_hash()) {
        let name = names::network_policy(&sandbox.name);
        let policy = policy.render(namespace);
        client.apply_network_policy(namespace, &name, &policy.manifest)?;
    }
    let name = names::service(&sandbox.name);
    match &sandbox.spec.service {
        Some(spec) => {
            let service = manifest::plan_service(owner, spec);
            if observed_hash(&input.observed.service).as_deref() != Some(service.spec_hash()) {
                let service = service.render(namespace);
                client.apply_service(namespace, &name, &service.manifest)?;
            }
            out.status.service_fqdn = Some(manifest::fqdn(
                &sandbox.name,
                namespace,
                &input.cluster_network.cluster_domain,
            ));
        }
        None => {
            if input.observed.service.as_ref().is_some_and(|s| !s.deleting) {
                client.delete_service(namespace, &name)?;
            }
            out.status.service_fqdn = None;
        }
    }
    Ok(())
}

fn starting(out: &mut ReconcileOutput, reason: &str, message: &str, now: i64) {
    out.status.phase = SandboxPhase::Pending;
    set_condition(
        &mut out.status.conditions,
        READY,
        ConditionStatus::False,
        reason,
        message,
        now,
    );
}

/// The reaper's pause holds until activity is seen after it; a user's explicit pause replaces
/// it, so that a later `Running` from the user is not held back by an old idle pause.
fn resume_after_activity(out: &mut ReconcileOutput, sandbox: &Sandbox) {
    let Some(paused_at) = out.status.idle_paused_at else {
        return;
    };
    if sandbox.spec.desired_state == DesiredState::Paused {
        out.status.idle_paused_at = None;
    } else if let Some(activity) = sandbox.last_activity.filter(|a| *a > paused_at) {
        out.status.idle_paused_at = None;
        out.events.push(status::normal(
            "Resumed",
            format!(
                "activity {}s after the idle pause: resuming",
                activity.saturating_sub(paused_at)
            ),
        ));
    }
}

fn settle_paused(out: &mut ReconcileOutput, sandbox: &Sandbox, now: i64) {
    let (reason, message) = if out.status.idle_paused_at.is_some() {
        (
            "Idle",
            format!(
                "paused after {}s without activity; resumes when cubepod.io/last-activity moves",
                sandbox.spec.idle_timeout_seconds.unwrap_or(0)
            ),
        )
    } else {
        ("UserRequested", "spec.desiredState is Paused".to_string())
    };
    out.status.phase = SandboxPhase::Paused;
    out.status.pod_ip = None;
    applied::stopped(out);
    set_condition(
        &mut out.status.conditions,
        PAUSED,
        ConditionStatus::True,
        reason,
        message.clone(),
        now,
    );
    set_condition(
        &mut out.status.conditions,
        READY,
        ConditionStatus::False,
        "Paused",
        message,
        now,
    );
}
