//! The policy host: everything between a policy component and the cluster. The wasmtime
//! runtime that loads and calls a module (`runtime`), the domain model the contract's types
//! are read into (`model`), the containment rules every output of a policy passes before
//! it reaches the cluster (`containment`), and the inputs the host's tests hand a policy
//! (`fixtures`).

// `model::names` is the SDK's own file, which names `alloc` (the SDK is `no_std`).
extern crate alloc;

pub mod containment;
pub mod fixtures;
pub mod model;
pub mod runtime;
pub mod twin;
