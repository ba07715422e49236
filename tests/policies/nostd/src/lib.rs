//! A `no_std` policy on the SDK's `no_std_runtime!`, built as the default policy is, so that
//! the host's tests can check what such a component reports when it fails: without std, its
//! panic handler and allocator are the SDK's. It delegates to the default policy except in
//! `reconcile-sandbox` for sandboxes whose name starts with:
//!
//! - `panic-`: panics with a message that names the sandbox;
//! - `long-panic-`: panics with a message of 4 KiB, more than the runtime writes to stderr;
//! - `oom-`: allocates without bound, so that an allocation fails under the host's memory
//!   limit and panics in the allocator, into the runtime's handler.
//!
//! Built by `host/tests/runtime.rs` (`nostd_module`, through
//! `wasm_build::build_policy_component`).

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::string::ToString;
use alloc::vec::Vec;

use cubepod_policy_sdk::bindings::{KubeError, PolicyInfo, ReconcileInput, ReconcileOutput};
use cubepod_policy_sdk::client::KubeClient;

cubepod_policy_sdk::no_std_runtime!();

pub const POLICY_NAME: &str = "cubepod-nostd";

/// The length of the `long-panic-` message.
pub const LONG_MESSAGE_BYTES: usize = 4096;

/// The failure a sandbox's name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Panic,
    LongPanic,
    Oom,
}

impl Fault {
    pub fn of(sandbox_name: &str) -> Option<Fault> {
        [
            ("panic-", Fault::Panic),
            ("long-panic-", Fault::LongPanic),
            ("oom-", Fault::Oom),
        ]
        .into_iter()
        .find(|(prefix, _)| sandbox_name.starts_with(prefix))
        .map(|(_, fault)| fault)
    }
}

/// `reconcile-sandbox`: the default logic, or the failure the sandbox's name asks for.
pub fn reconcile(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
) -> Result<ReconcileOutput, KubeError> {
    let name = &input.sandbox.name;
    match Fault::of(name) {
        None => cubepod_policy_sdk::reconcile::reconcile(client, input),
        Some(Fault::Panic) => panic!("nostd policy: panic requested by {name}"),
        Some(Fault::LongPanic) => {
            // A message that starts with what names it and goes on past any buffer.
            let filler = "y".repeat(LONG_MESSAGE_BYTES);
            panic!("nostd policy: long panic requested by {name}: {filler}")
        }
        Some(Fault::Oom) => hog_memory(),
    }
}

fn hog_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Ones, not zeros: every page is written, so nothing can be left lazily unallocated.
        hoard.push(core::hint::black_box(alloc::vec![1u8; 1 << 20]));
        core::hint::black_box(&hoard);
    }
}

pub struct NoStd;

impl cubepod_policy_sdk::policy::Policy for NoStd {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            name: POLICY_NAME.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            contract_version: cubepod_policy_sdk::CONTRACT_VERSION.to_string(),
        }
    }

    fn reconcile_sandbox(
        client: &mut impl KubeClient,
        input: ReconcileInput,
    ) -> Result<ReconcileOutput, KubeError> {
        reconcile(client, &input)
    }
}

cubepod_policy_sdk::export_policy!(NoStd);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pick_the_fault() {
        assert_eq!(Fault::of("panic-x"), Some(Fault::Panic));
        assert_eq!(Fault::of("long-panic-x"), Some(Fault::LongPanic));
        assert_eq!(Fault::of("oom-x"), Some(Fault::Oom));
        assert_eq!(Fault::of("dev-alice"), None);
    }
}
