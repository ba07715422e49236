//! Testing a policy without a cluster: `cubepod-controller policy test MODULE [SCENARIO...]`
//! runs scenario files (the objects in the cluster, the steps, what must hold after each)
//! through the same sandboxed runtime the controller uses, on a scratch in-memory cluster; and
//! `conformance::run` runs the built-in conformance cases that the controller requires of
//! every module.
//!
//! - [`format`](mod@format): the scenario file, parsed strictly, with errors that say where;
//! - [`scratch`]: the scratch cluster, and each step carried out as the controller would;
//! - `runner` and `expect`: one scenario, its expectations checked;
//! - `diff`: readable expected-vs-actual;
//! - `junit`: the report for CI systems;
//! - [`conformance`]: policy-agnostic invariants on built-in situations;

pub mod conformance;
pub(crate) mod diff;
mod expect;
pub mod format;
pub(crate) mod junit;
pub(crate) mod runner;
pub(crate) mod schema;
pub mod scratch;

/// One runtime and one loaded default policy for the unit tests of this module.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::OnceLock;

    use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, PolicyModule, RuntimeConfig};

    pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
        static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        RT.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap()
        })
    }

    pub(crate) fn default_policy() -> &'static PolicyModule {
        static MODULE: OnceLock<PolicyModule> = OnceLock::new();
        MODULE.get_or_init(|| {
            PolicyEngine::new(RuntimeConfig::default())
                .unwrap()
                .load(DEFAULT_POLICY)
                .unwrap()
        })
    }
}
