//! The SDK of cubepod-controller policies. A policy is a crate of its own (`crate-type =
//! ["cdylib"]`) that implements [`policy::Policy`] and exports it with
//! [`export_policy!`]; every decision it does not write is the default policy's, which lives
//! here (`reconcile`, `cleanup`, `pool`, `reaper`, with the manifests, names and status they
//! make), so a policy changes one decision by writing one method. The logic builds for
//! `wasm32-wasip2` and natively, where it runs against [`recording::RecordingClient`] and
//! inputs from [`fixtures`].
//!
//! The SDK is `no_std` (it needs only `alloc`): a policy crate that is `no_std` as well, as the
//! default policy is, makes a component that imports the contract and only the WASI it names
//! itself; [`no_std_runtime!`] gives it what std would (an allocator, a panic handler). Rust's
//! std on `wasm32-wasip2` imports thirteen WASI interfaces (for its panic message, environment
//! and exit), and every call's fresh instance lowers each of them.

#![no_std]

extern crate alloc;
// Natively (the test doubles, the tests): std as usual.
#[cfg(not(target_arch = "wasm32"))]
extern crate std;

/// What std's prelude holds and `core`'s does not, for the SDK's modules.
mod prelude {
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
    pub(crate) use alloc::{format, vec};
}

/// The `alloc` types [`export_policy!`]'s expansion names, so that it builds in a `no_std`
/// policy crate that has not named `alloc` itself.
#[doc(hidden)]
pub mod __private {
    pub use alloc::string::String;
    pub use alloc::vec::Vec;
}

pub mod applied;
pub mod bare;
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
