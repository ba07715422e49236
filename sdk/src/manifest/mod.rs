//! Kubernetes JSON for every object the policy writes. Lean structs for exactly the fields we
//! emit keep the component small; the strict schema check in CI keeps them honest.

mod meta;
mod network_policy;
mod pod;
mod pvc;
mod sandbox;
mod secret;
mod service;

pub use meta::Owner;
pub use network_policy::{BLOCKED_FOR_INTERNET, Rendered, network_policy, spec_hash};
pub use pod::pod;
pub use pvc::{VolumeRole, pvc};
pub use sandbox::pool_member;
pub use secret::secret;
pub use service::{fqdn, service};

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Serializing these plain structs (strings, integers, maps with string keys) cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}
