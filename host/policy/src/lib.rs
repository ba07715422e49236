//! The policy host: everything between a policy component and the cluster. The wasmtime
//! runtime that loads and calls a module (`runtime`), the domain model the contract's types
//! are read into (`model`), and the containment rules every output of a policy passes before
//! it reaches the cluster (`containment`).

// `model::names` is the SDK's own file, which names `alloc` (the SDK is `no_std`).
extern crate alloc;

pub mod containment;
pub mod model;
pub mod runtime;
