//! The SDK of cubepod-controller policies. A policy is a crate of its own (`crate-type =
//! ["cdylib"]`) that implements [`policy::Policy`] and exports it with
//! [`export_policy!`]; every decision it does not write is the default policy's, which lives
//! here (`reconcile`, `cleanup`, `pool`, `reaper`, with the manifests, names and status they
//! make), so a policy changes one decision by writing one method. The logic builds for
//! `wasm32-wasip2` and natively, where it runs against [`recording::RecordingClient`] and
//! inputs from [`fixtures`].

pub mod bindings;
pub mod cidr;
pub mod cleanup;
pub mod client;
pub mod manifest;
pub mod names;
pub mod policy;
pub mod pool;
mod quantity;
pub mod reaper;
pub mod reconcile;
pub mod shutdown;
pub mod status;
pub mod validate;

#[cfg(not(target_arch = "wasm32"))]
pub mod recording;

#[cfg(not(target_arch = "wasm32"))]
pub mod fixtures;

/// The version of the `cubepod:controller` WIT package these bindings were generated from: a
/// policy's `describe` returns it as its `contract-version`.
pub const CONTRACT_VERSION: &str = "0.2.0";
