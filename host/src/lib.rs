//! cubepod-controller's native runner: it owns all I/O (configuration, the cluster, the cache
//! and work queue, timers, the HTTP server, the wasm runtime, metrics) and leaves every decision
//! to the policy component. `main.rs` only wires these together.
//!
//! The public surface is what the binary, the integration tests and the benchmark use on
//! purpose: configuration and `app::run`, the cluster seam and its two implementations, the
//! runtime, the control loop and its reconcile core, the scenario runner and the `policy`
//! subcommands. Helpers of one module (the HTTP server, the embedded demo's seeding, status
//! coalescing, Event objects, metrics instrumentation of the cluster, scenario diffs and JUnit)
//! are the crate's own.

pub mod admission;
pub mod allocator;
pub mod app;
pub mod colour;
pub mod config;
pub mod controller;
pub(crate) mod embedded;
pub(crate) mod instrumented;
pub mod metrics;
pub mod policy_cli;
pub mod router;
pub mod scenario;
pub(crate) mod server;
pub mod signing;
