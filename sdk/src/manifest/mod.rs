//! Kubernetes JSON for every object the policy writes. Lean structs for exactly the fields we
//! emit keep the component small; the strict schema check in CI keeps them honest.

use crate::prelude::*;

mod meta;
mod network_policy;
mod planned;
mod pod;
mod pvc;
mod sandbox;
mod secret;
mod service;
mod writer;

pub use meta::Owner;
pub use network_policy::{
    BLOCKED_FOR_INTERNET, network_policy, plan_network_policy, plan_network_policy_of,
};
pub use planned::{Planned, Rendered, spec_hash};
pub use pod::pod;
pub use pvc::{VolumeRole, pvc};
pub use sandbox::{pool_member, template_hash};
pub use secret::secret;
pub use service::{fqdn, plan_service, service};

/// 64-bit FNV-1a of `json`, as 16 hex digits (a label value): the digests by which a policy
/// tells from the cache alone whether an object it wrote is still what it would write now. A
/// digest to tell specs apart, not a security boundary.
pub fn digest(json: &str) -> String {
    let hash = json.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Serializing these plain structs (strings, integers, maps with string keys) cannot fail.
    writer::to_string(value).unwrap_or_default()
}
