//! The contracts the host runs modules of, one module each: how a module of that version is
//! pre-instantiated, and how each export is called in it. The current contract's exports take
//! and return the host's own types (`v0_2`); an older one's convert them at the call (`v0_1`).
//! [`ModulePre`] is the one place that picks between them.

mod v0_1;
mod v0_2;

use std::marker::PhantomData;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{
    Component, ComponentExportIndex, ComponentNamedList, Instance, InstancePre, Lift, Lower,
    TypedFunc,
};
use wasmtime::{AsContextMut, Store};

use super::Contract;
use super::bindings::{
    self, CleanupOutput, KubeError, ObservedChildren, PolicyInfo, PoolInput, PoolOutput,
    ReapCandidate, ReapDecision, ReconcileInput, ReconcileOutput, Sandbox,
};
use super::engine::PolicyEngine;
use super::host::HostState;

/// A component pre-instantiated with the linker of the contract it targets.
pub(crate) enum ModulePre {
    V0_1(bindings::v0_1::PolicyModulePre<HostState>),
    V0_2(PreV0_2),
}

/// A module of the current contract: the bindings, and the export every reconcile calls,
/// type-checked once here rather than at every instance.
pub(crate) struct PreV0_2 {
    pub(crate) bindings: bindings::PolicyModulePre<HostState>,
    pub(crate) reconcile_sandbox:
        TypedExport<(ReconcileInput,), (Result<ReconcileOutput, KubeError>,)>,
}

impl ModulePre {
    pub(crate) fn new(
        engine: &PolicyEngine,
        component: &Component,
        contract: Contract,
    ) -> wasmtime::Result<Self> {
        let pre = engine.linker(contract).instantiate_pre(component)?;
        Ok(match contract {
            Contract::V0_1 => ModulePre::V0_1(bindings::v0_1::PolicyModulePre::new(pre)?),
            Contract::V0_2 => {
                let reconcile_sandbox = TypedExport::new(&pre, contract, "reconcile-sandbox")?;
                ModulePre::V0_2(PreV0_2 {
                    bindings: bindings::PolicyModulePre::new(pre)?,
                    reconcile_sandbox,
                })
            }
        })
    }
}

// Each export in the module's own contract. The one place that picks the contract: the
// caller (`call.rs`) sets up the store and its bounds once, the same for every version.
impl ModulePre {
    pub(crate) async fn reconcile_sandbox(
        &self,
        store: &mut Store<HostState>,
        input: ReconcileInput,
    ) -> wasmtime::Result<Result<ReconcileOutput, KubeError>> {
        match self {
            ModulePre::V0_1(pre) => v0_1::reconcile_sandbox(pre, store, input).await,
            ModulePre::V0_2(pre) => v0_2::reconcile_sandbox(pre, store, input).await,
        }
    }

    pub(crate) async fn cleanup_sandbox(
        &self,
        store: &mut Store<HostState>,
        now: i64,
        sandbox: Sandbox,
        observed: ObservedChildren,
    ) -> wasmtime::Result<Result<CleanupOutput, KubeError>> {
        match self {
            ModulePre::V0_1(pre) => v0_1::cleanup_sandbox(pre, store, now, sandbox, observed).await,
            ModulePre::V0_2(pre) => v0_2::cleanup_sandbox(pre, store, now, sandbox, observed).await,
        }
    }

    pub(crate) async fn reconcile_pool(
        &self,
        store: &mut Store<HostState>,
        input: PoolInput,
    ) -> wasmtime::Result<Result<PoolOutput, KubeError>> {
        match self {
            ModulePre::V0_1(pre) => v0_1::reconcile_pool(pre, store, input).await,
            ModulePre::V0_2(pre) => v0_2::reconcile_pool(pre, store, input).await,
        }
    }

    pub(crate) async fn reap(
        &self,
        store: &mut Store<HostState>,
        now: i64,
        namespace: &str,
        sandboxes: &[ReapCandidate],
    ) -> wasmtime::Result<Vec<ReapDecision>> {
        match self {
            ModulePre::V0_1(pre) => v0_1::reap(pre, store, now, namespace, sandboxes).await,
            ModulePre::V0_2(pre) => v0_2::reap(pre, store, now, namespace, sandboxes).await,
        }
    }

    pub(crate) async fn describe(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<PolicyInfo> {
        match self {
            ModulePre::V0_1(pre) => v0_1::describe(pre, store).await,
            ModulePre::V0_2(pre) => v0_2::describe(pre, store).await,
        }
    }
}

/// An export of the contract's `policy` interface whose type was checked against `Params` and
/// `Return` once, for the component. The bindings check the type of every export at every
/// instance (`PolicyModulePre::instantiate_async`): for the two reconciles of a new sandbox that
/// was about 2% of the controller's CPU.
pub(crate) struct TypedExport<Params, Return> {
    index: ComponentExportIndex,
    types: PhantomData<fn(Params) -> Return>,
}

impl<Params, Return> TypedExport<Params, Return>
where
    Params: ComponentNamedList + Lower,
    Return: ComponentNamedList + Lift,
{
    fn new(pre: &InstancePre<HostState>, contract: Contract, name: &str) -> wasmtime::Result<Self> {
        let interface = contract.policy_interface();
        let component = pre.component();
        let (_, interface) = component
            .get_export(None, interface.as_str())
            .ok_or_else(|| wasmtime::format_err!("no exported instance named `{interface}`"))?;
        let (item, index) = component
            .get_export(Some(&interface), name)
            .ok_or_else(|| wasmtime::format_err!("no export `{name}`"))?;
        let ComponentItem::ComponentFunc(func) = item else {
            return Err(wasmtime::format_err!("export `{name}` is not a function"));
        };
        // The check the bindings make of each export (`Func::typed` at every instance makes
        // the same one), against the types the linker instantiates the component at.
        func.typecheck::<Params, Return>(&pre.instance_type())
            .map_err(|e| e.context(format!("type-checking export func `{name}`")))?;
        Ok(Self {
            index,
            types: PhantomData,
        })
    }

    /// The export in `instance`, an instance of the component this was made for.
    #[allow(unsafe_code)] // The typed export, after the same type check the bindings make.
    pub(crate) fn func(
        &self,
        store: impl AsContextMut,
        instance: &Instance,
    ) -> wasmtime::Result<TypedFunc<Params, Return>> {
        let func = instance
            .get_func(store, self.index)
            .ok_or_else(|| wasmtime::format_err!("the instance lacks a checked export"))?;
        // SAFETY: `new` checked this export's type against `Params` and `Return` for the
        // component, at the types its `InstancePre` instantiates it with; every instance of
        // that `InstancePre` has the same types (a component's types are fixed when it is
        // compiled and linked). This is the bindings' own `new_unchecked`, after the same check.
        Ok(unsafe { TypedFunc::new_unchecked(func) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frozen default policy of contract 0.1.0, pre-instantiated with that contract's
    /// linker: a component whose `reconcile-sandbox` takes 0.1's input, not 0.2's.
    fn pre_0_1() -> (PolicyEngine, InstancePre<HostState>) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/contract-0.1.0/cubepod-default-0.1.0.wasm"
        );
        let bytes = std::fs::read(path).expect("the contract 0.1.0 fixture");
        let engine = PolicyEngine::new(crate::runtime::RuntimeConfig::default()).unwrap();
        let component = Component::new(engine.engine(), &bytes).unwrap();
        let pre = engine
            .linker(Contract::V0_1)
            .instantiate_pre(&component)
            .unwrap();
        (engine, pre)
    }

    #[test]
    fn an_export_is_checked_against_the_types_it_is_called_with() {
        let (_engine, pre) = pre_0_1();
        // Its own contract's types pass.
        use bindings::v0_1;
        TypedExport::<
            (v0_1::ReconcileInput,),
            (Result<v0_1::ReconcileOutput, v0_1::KubeError>,),
        >::new(&pre, Contract::V0_1, "reconcile-sandbox")
        .expect("0.1's reconcile-sandbox has 0.1's types");
        // The current contract's input (it has the sandbox's network) does not: the call is
        // never made with a function of another type.
        let err = TypedExport::<(ReconcileInput,), (Result<ReconcileOutput, KubeError>,)>::new(
            &pre,
            Contract::V0_1,
            "reconcile-sandbox",
        )
        .err()
        .expect("0.2's input is not 0.1's");
        assert!(
            format!("{err:#}").contains("type-checking export func `reconcile-sandbox`"),
            "{err:#}"
        );
        // Nor is a function the interface does not have, or an interface it does not export.
        let err = TypedExport::<(), ()>::new(&pre, Contract::V0_1, "reconcile-everything")
            .err()
            .expect("no such export");
        assert!(format!("{err:#}").contains("no export `reconcile-everything`"));
        let err = TypedExport::<(), ()>::new(&pre, Contract::V0_2, "reconcile-sandbox")
            .err()
            .expect("no 0.2 interface");
        assert!(format!("{err:#}").contains("cubepod:controller/policy@0.2.0"));
    }
}
