//! Calling a policy: each export in a fresh, bounded store, in the module's own contract.

use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::{
    CleanupOutput, KubeError, ObservedChildren, PolicyInfo, PoolInput, PoolOutput, ReapCandidate,
    ReapDecision, ReconcileInput, ReconcileOutput, Sandbox,
};
use super::context::{CallContext, GuestCall};
use super::contract::ModulePre;
use super::host::HostState;
use super::{PolicyEngine, PolicyModule, RuntimeConfig, RuntimeError};
use crate::containment::{Boundary, ForkSource, SandboxScope};
use cubepod_kube::Resource;

// Each export is called in the module's own contract (`contract/`), in a fresh store under
// the same bounds and scope whatever the version.
//
// A call is a future (`*_async`): the controller awaits it on its runtime, where the guest's
// requests are awaited too, with no thread to hand each to and back. The blocking forms are
// the same call driven to its end on the calling thread, for `policy test`, the CLI and
// tests; like any `block_on` they must not be called on a thread of the runtime.
impl PolicyModule {
    /// `reconcile-sandbox`: bring one Sandbox's children to its spec. Answered from the
    /// module's memo when it holds the answer to the same input (`memo.rs`); a call that makes
    /// no `kube-client` call leaves its answer there.
    pub async fn reconcile_sandbox_async(
        &self,
        ctx: &CallContext,
        input: ReconcileInput,
    ) -> Result<GuestCall<Result<ReconcileOutput, KubeError>>, RuntimeError> {
        let memo = self.memo();
        let Some(key) = memo.key(self.digest(), &input) else {
            return self.run_reconcile_sandbox(ctx, input).await;
        };
        let input = match memo.answer(&key, input) {
            Ok(answer) => return Ok(GuestCall::answered(Ok(answer))),
            Err(input) => *input,
        };
        let handed = input.sandbox.status.clone();
        let call = self.run_reconcile_sandbox(ctx, input).await?;
        // Only a call that asked the cluster nothing is a function of its input alone.
        let alone = call.host_calls == 0
            && call.effects.is_empty()
            && call.deferred.is_none()
            && call.name_conflicts.is_empty();
        if let (true, Ok(answer)) = (alone, &call.value) {
            memo.keep(key, &handed, answer);
        }
        Ok(call)
    }

    async fn run_reconcile_sandbox(
        &self,
        ctx: &CallContext,
        input: ReconcileInput,
    ) -> Result<GuestCall<Result<ReconcileOutput, KubeError>>, RuntimeError> {
        let scope = reconcile_scope(&input, ctx);
        self.call(
            "reconcile-sandbox",
            Some(ctx),
            Some(scope),
            async |pre, store| pre.reconcile_sandbox(store, input).await,
        )
        .await
    }

    /// `cleanup-sandbox`: delete a deleted Sandbox's children.
    pub async fn cleanup_sandbox_async(
        &self,
        ctx: &CallContext,
        now: i64,
        sandbox: Sandbox,
        observed: ObservedChildren,
    ) -> Result<GuestCall<Result<CleanupOutput, KubeError>>, RuntimeError> {
        let scope = SandboxScope {
            cleanup: true,
            ..sandbox_scope(&sandbox, &observed, None, &ctx.boundary)
        };
        self.call(
            "cleanup-sandbox",
            Some(ctx),
            Some(scope),
            async |pre, store| pre.cleanup_sandbox(store, now, sandbox, observed).await,
        )
        .await
    }

    /// `reconcile-pool`: decide a warm pool's creates and deletes.
    pub async fn reconcile_pool_async(
        &self,
        ctx: &CallContext,
        input: PoolInput,
    ) -> Result<GuestCall<Result<PoolOutput, KubeError>>, RuntimeError> {
        // No cluster access (no scope): a pool's members are the host's to create and delete.
        self.call("reconcile-pool", Some(ctx), None, async |pre, store| {
            pre.reconcile_pool(store, input).await
        })
        .await
    }

    /// `reap`: decide which sandboxes have been idle too long (or, in contract 0.2, reached
    /// their shutdown time).
    pub async fn reap_async(
        &self,
        ctx: &CallContext,
        now: i64,
        namespace: &str,
        sandboxes: &[ReapCandidate],
    ) -> Result<GuestCall<Vec<ReapDecision>>, RuntimeError> {
        self.call("reap", Some(ctx), None, async |pre, store| {
            pre.reap(store, now, namespace, sandboxes).await
        })
        .await
    }

    /// [`Self::reconcile_sandbox_async`], blocking.
    pub fn reconcile_sandbox(
        &self,
        ctx: &CallContext,
        input: ReconcileInput,
    ) -> Result<GuestCall<Result<ReconcileOutput, KubeError>>, RuntimeError> {
        ctx.handle
            .block_on(self.reconcile_sandbox_async(ctx, input))
    }

    /// [`Self::cleanup_sandbox_async`], blocking.
    pub fn cleanup_sandbox(
        &self,
        ctx: &CallContext,
        now: i64,
        sandbox: Sandbox,
        observed: ObservedChildren,
    ) -> Result<GuestCall<Result<CleanupOutput, KubeError>>, RuntimeError> {
        ctx.handle
            .block_on(self.cleanup_sandbox_async(ctx, now, sandbox, observed))
    }

    /// [`Self::reconcile_pool_async`], blocking.
    pub fn reconcile_pool(
        &self,
        ctx: &CallContext,
        input: PoolInput,
    ) -> Result<GuestCall<Result<PoolOutput, KubeError>>, RuntimeError> {
        ctx.handle.block_on(self.reconcile_pool_async(ctx, input))
    }

    /// [`Self::reap_async`], blocking.
    pub fn reap(
        &self,
        ctx: &CallContext,
        now: i64,
        namespace: &str,
        sandboxes: &[ReapCandidate],
    ) -> Result<GuestCall<Vec<ReapDecision>>, RuntimeError> {
        ctx.handle
            .block_on(self.reap_async(ctx, now, namespace, sandboxes))
    }

    /// `describe`. It needs no cluster: every `kube-client` call it made would be refused.
    /// Blocking, on any thread: with no cluster there is nothing of the runtime to wait on.
    pub fn describe(&self) -> Result<PolicyInfo, RuntimeError> {
        let build = self.build();
        Ok(describe(&build.engine, &build.pre)?.value)
    }

    async fn call<R>(
        &self,
        export: &'static str,
        ctx: Option<&CallContext>,
        scope: Option<SandboxScope>,
        run: impl AsyncFnOnce(&ModulePre, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<GuestCall<R>, RuntimeError> {
        // The build serving when the call begins runs all of it, in a store of its engine.
        let build = self.build();
        call(&build.engine, export, ctx, scope, async |store| {
            run(&build.pre, store).await
        })
        .await
    }
}

/// `describe` of a module being loaded (no [`PolicyModule`] yet) or loaded, in its contract:
/// driven to its end on the calling thread (it may reach nothing that needs the runtime).
pub(crate) fn describe(
    engine: &PolicyEngine,
    pre: &ModulePre,
) -> Result<GuestCall<PolicyInfo>, RuntimeError> {
    futures_executor::block_on(call(engine, "describe", None, None, async |store| {
        pre.describe(store).await
    }))
}

/// The Sandbox a reconcile is for, and its fork source when `spec.forkFrom` names the one the
/// input carries: what the call may write. The source's PVCs are those the cache holds as the
/// source's (its uid is the API server's); without a cache, none (fail closed).
fn reconcile_scope(input: &ReconcileInput, ctx: &CallContext) -> SandboxScope {
    let sandbox = &input.sandbox;
    let fork = input
        .fork_source
        .as_ref()
        .filter(|source| {
            sandbox.spec.fork_from.as_deref() == Some(source.name.as_str())
                && source.namespace == sandbox.namespace
        })
        .map(|source| ForkSource {
            name: source.name.clone(),
            pvcs: ctx.children.as_ref().map_or_else(Vec::new, |cache| {
                cache.owned_pvcs(&source.namespace, &source.name, &source.uid)
            }),
        });
    sandbox_scope(sandbox, &input.observed, fork, &ctx.boundary)
}

fn sandbox_scope(
    sandbox: &Sandbox,
    observed: &ObservedChildren,
    fork: Option<ForkSource>,
    boundary: &Boundary,
) -> SandboxScope {
    // Every field named, none behind `..`: a child kind added to `observed-children` does not
    // compile here until it is among the children a delete may name.
    let ObservedChildren {
        pvcs,
        pod,
        secret,
        network_policy,
        service,
    } = observed;
    let mut children: Vec<(Resource, String)> = pvcs
        .iter()
        .map(|p| (Resource::PersistentVolumeClaim, p.name.clone()))
        .collect();
    if let Some(pod) = pod {
        children.push((Resource::Pod, pod.name.clone()));
    }
    if *secret {
        children.push((Resource::Secret, crate::model::names::secret(&sandbox.name)));
    }
    if let Some(policy) = network_policy {
        children.push((Resource::NetworkPolicy, policy.name.clone()));
    }
    if let Some(service) = service {
        children.push((Resource::Service, service.name.clone()));
    }
    // What the boundary checks the sandbox's NetworkPolicy and Service against.
    let network = crate::containment::SandboxNetwork {
        egress: sandbox.spec.network.egress,
        allow_cidrs: sandbox.spec.network.allow_cidrs.clone(),
        deny_cidrs: sandbox.spec.network.deny_cidrs.clone(),
        service_ports: sandbox
            .spec
            .service
            .as_ref()
            .map(|service| service.ports.iter().map(|p| (p.port, p.protocol)).collect()),
        cluster: boundary.network.clone(),
    };
    SandboxScope {
        namespace: sandbox.namespace.clone(),
        name: sandbox.name.clone(),
        uid: sandbox.uid.clone(),
        rootfs_generation: sandbox.spec.rootfs_generation,
        storage_class: sandbox.spec.storage_class.clone(),
        fork,
        cleanup: false,
        observed: children,
        network: Some(network),
    }
}

/// Runs one export in a fresh store: a trap poisons a store, and a fresh one also means no
/// state survives between calls, as the contract requires. `run` instantiates the module in
/// the store and calls the export, in whichever contract the module speaks.
async fn call<R>(
    engine: &PolicyEngine,
    export: &'static str,
    ctx: Option<&CallContext>,
    scope: Option<SandboxScope>,
    run: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
) -> Result<GuestCall<R>, RuntimeError> {
    let config = engine.config();
    let deadline = config.call_deadline;
    let mut store = Store::new(
        engine.engine(),
        HostState::new(ctx.cloned(), scope, config, engine.memory_budget().clone()),
    );
    store.limiter(|state| &mut state.limits);
    // A store's deadline starts at 0, which would interrupt at once. One tick: a guest that
    // runs on past it yields to the runtime's other tasks (watches, leases, other calls) at
    // every tick, so a spinning policy holds a worker thread for a tick at a time, never for
    // its whole deadline.
    store.set_epoch_deadline(1);
    // Trap only once the guest's own time is spent: the deadline bounds the policy, not the
    // API server (host calls have their own timeout) nor the other calls on its thread.
    store.epoch_deadline_callback(move |store| {
        let state = store.data();
        if state.guest_time() >= deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::YieldCustom(1, state.yield_to_others()))
        }
    });

    match run(&mut store).await {
        Ok(value) => {
            let state = store.into_data();
            Ok(GuestCall {
                value,
                effects: state.effects,
                host_calls: state.host_calls,
                calls: state.calls,
                deferred: state.deferred,
                name_conflicts: state.name_conflicts,
            })
        }
        Err(error) => Err(failure(engine.config(), export, store.data(), error)),
    }
}

/// Names why a call failed: the memory limit, the deadline, or any other trap.
fn failure(
    config: &RuntimeConfig,
    export: &'static str,
    state: &HostState,
    error: wasmtime::Error,
) -> RuntimeError {
    tracing::debug!(export, error = ?error, "policy call failed");
    if let Some(budget) = &state.budget_exceeded {
        return RuntimeError::Budget(format!("{export}: {budget}"));
    }
    if state.limits.budget_refused {
        return RuntimeError::MemoryBudget {
            export,
            budget: state.limits.charge.budget().limit(),
        };
    }
    if state.limits.memory_refused {
        return RuntimeError::MemoryExhausted {
            export,
            limit: config.memory_limit_bytes,
        };
    }
    let trap = error.downcast_ref::<Trap>().copied();
    if trap == Some(Trap::Interrupt) {
        return RuntimeError::DeadlineExceeded {
            export,
            deadline: config.call_deadline,
        };
    }
    let mut message = match trap {
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    if let Some(output) = state.output_tail() {
        message = format!("{message}; the policy's last output: {output}");
    }
    RuntimeError::Trap { export, message }
}
