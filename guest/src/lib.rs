//! cubepod-controller's default policy: every decision as the SDK's [`Policy`] makes it. The
//! host embeds this component (`host/build.rs`); its decisions are tested in the SDK
//! (`sdk/tests/`) and by the scenarios of `tests/scenarios/`.

// `no_std` in the component: Rust's std on `wasm32-wasip2` would make it import thirteen WASI
// interfaces (for a panic's message, the environment, exit), which every call's fresh instance
// lowers; without std it imports the contract and stderr, and the SDK's `no_std_runtime!` gives
// what std did (the arena allocator, the panic's message). Natively (the tests) std is there as
// usual, with the system allocator.
#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::string::ToString;

use cubepod_policy_sdk::bindings::PolicyInfo;
use cubepod_policy_sdk::policy::Policy;

cubepod_policy_sdk::no_std_runtime!();

pub const POLICY_NAME: &str = "cubepod-default";

pub struct DefaultPolicy;

impl Policy for DefaultPolicy {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: POLICY_NAME.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            contract_version: cubepod_policy_sdk::CONTRACT_VERSION.to_string(),
        }
    }
}

cubepod_policy_sdk::export_policy!(DefaultPolicy);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_names_the_default_policy_and_the_contract() {
        let info = DefaultPolicy::describe();
        assert_eq!(info.name, "cubepod-default");
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(info.contract_version, cubepod_policy_sdk::CONTRACT_VERSION);
    }
}
