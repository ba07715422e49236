//! cubepod-controller's native runner: it owns all I/O (configuration, the cluster, the cache
//! and work queue, timers, the HTTP server, the wasm runtime, metrics) and leaves every decision
//! to the policy component. `main.rs` only wires these together.

pub mod admission;
pub mod allocator;
pub mod app;
pub mod config;
pub mod controller;
pub mod embedded;
pub mod kube;
pub mod metrics;
pub mod model;
pub mod policy_cli;
pub mod runtime;
pub mod scenario;
pub mod server;
pub mod signing;
