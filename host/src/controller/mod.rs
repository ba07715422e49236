//! The control loop: a watch cache fed by reflectors, a work queue, and the manager that runs
//! the policy on each key and carries out what it returns.

pub(crate) mod action;
pub mod cache;
mod child_lookup;
pub mod claims;
pub(crate) mod coalesce;
pub mod events;
pub(crate) mod export;
pub mod health;
pub mod inputs;
pub mod leader;
pub mod manager;
pub(crate) mod membership;
mod object_bound;
pub(crate) mod policy;
pub mod policy_watch;
pub mod queue;
pub mod reconcile;
pub mod reflector;
pub mod rollout;
pub(crate) mod shadow;
pub(crate) mod small_map;
pub(crate) mod startup;
pub(crate) mod undo;
pub mod writer;

/// Which share of a canary an object is on, for tests that need both shares filled.
pub use policy::bucket as canary_bucket;
