//! Modules of the current contract (`wit/controller.wit`): each export called on the host's
//! own types, as they are.

use wasmtime::Store;

use super::PreV0_2;
use crate::runtime::bindings::{
    CleanupOutput, KubeError, ObservedChildren, PolicyInfo, PoolInput, PoolOutput, ReapCandidate,
    ReapDecision, ReconcileInput, ReconcileOutput, Sandbox,
};
use crate::runtime::host::HostState;

pub(super) async fn reconcile_sandbox(
    pre: &PreV0_2,
    store: &mut Store<HostState>,
    input: ReconcileInput,
) -> wasmtime::Result<Result<ReconcileOutput, KubeError>> {
    let instance = pre
        .bindings
        .instance_pre()
        .instantiate_async(&mut *store)
        .await?;
    // The export checked once for the component (`TypedExport`), not at every instance.
    let export = pre.reconcile_sandbox.func(&mut *store, &instance)?;
    let (out,) = export.call_async(store, (input,)).await?;
    Ok(out)
}

pub(super) async fn cleanup_sandbox(
    pre: &PreV0_2,
    store: &mut Store<HostState>,
    now: i64,
    sandbox: Sandbox,
    observed: ObservedChildren,
) -> wasmtime::Result<Result<CleanupOutput, KubeError>> {
    pre.bindings
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_cleanup_sandbox(store, now, &sandbox, &observed)
        .await
}

pub(super) async fn reconcile_pool(
    pre: &PreV0_2,
    store: &mut Store<HostState>,
    input: PoolInput,
) -> wasmtime::Result<Result<PoolOutput, KubeError>> {
    pre.bindings
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_reconcile_pool(store, &input)
        .await
}

pub(super) async fn reap(
    pre: &PreV0_2,
    store: &mut Store<HostState>,
    now: i64,
    namespace: &str,
    sandboxes: &[ReapCandidate],
) -> wasmtime::Result<Vec<ReapDecision>> {
    pre.bindings
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_reap(store, now, namespace, sandboxes)
        .await
}

pub(super) async fn describe(
    pre: &PreV0_2,
    store: &mut Store<HostState>,
) -> wasmtime::Result<PolicyInfo> {
    pre.bindings
        .instantiate_async(&mut *store)
        .await?
        .cubepod_controller_policy()
        .call_describe(store)
        .await
}
