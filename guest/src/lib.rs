//! cubepod-controller's default reconcile policy. All decisions and manifest serialization live
//! here; the crate builds as a `wasm32-wasip2` component (see `component`) and natively, where
//! the same logic runs against [`client::KubeClient`] test doubles.

pub mod bindings;
pub mod cleanup;
pub mod client;
pub mod manifest;
pub mod names;
pub mod policy;
pub mod pool;
mod quantity;
pub mod reaper;
pub mod reconcile;
pub mod status;
pub mod validate;

/// The default policy's exports; off (`default-features = false`) for a policy crate that reuses
/// this logic and exports its own component.
#[cfg(all(target_arch = "wasm32", feature = "component"))]
mod component;

#[cfg(not(target_arch = "wasm32"))]
pub mod recording;

#[cfg(not(target_arch = "wasm32"))]
pub mod fixtures;

use bindings::PolicyInfo;

/// The version of the `cubepod:controller` WIT package this policy implements.
pub const CONTRACT_VERSION: &str = "0.1.0";
pub const POLICY_NAME: &str = "cubepod-default";

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: POLICY_NAME.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        contract_version: CONTRACT_VERSION.to_string(),
    }
}
