//! The bounds of a store besides time: memory growth, instances, tables and memories.

use std::sync::Arc;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use crate::runtime::budget::{Charge, GUEST_MEMORY_CHARGE, MemoryBudget};

/// Instances, tables and memories a store may create: a component built by cargo has a few
/// core instances; these only stop a pathological one.
const MAX_INSTANCES: usize = 64;
const MAX_TABLES: usize = 64;
const MAX_MEMORIES: usize = 16;

/// [`StoreLimits`] that also remember when they refused a memory growth, so that the trap it
/// causes is reported as [`RuntimeError::MemoryExhausted`](crate::runtime::RuntimeError::MemoryExhausted),
/// and that charge each growth to the budget of all calls in flight
/// ([`RuntimeError::MemoryBudget`](crate::runtime::RuntimeError::MemoryBudget) when it cannot).
pub(crate) struct Limits {
    inner: StoreLimits,
    pub(crate) memory_refused: bool,
    /// The call's share of the calls' budget, given back when the store is dropped.
    pub(crate) charge: Charge,
    pub(crate) budget_refused: bool,
}

impl Limits {
    pub(super) fn new(memory_limit: usize, budget: Arc<MemoryBudget>) -> Self {
        Self {
            inner: StoreLimitsBuilder::new()
                .memory_size(memory_limit)
                .instances(MAX_INSTANCES)
                .tables(MAX_TABLES)
                .memories(MAX_MEMORIES)
                // A refused growth traps instead of handing the guest a null pointer.
                .trap_on_grow_failure(true)
                .build(),
            memory_refused: false,
            charge: Charge::new(budget),
            budget_refused: false,
        }
    }
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let verdict = self.inner.memory_growing(current, desired, maximum);
        if !matches!(verdict, Ok(true)) {
            self.memory_refused = true;
            return verdict;
        }
        // Also called for a memory's initial size (from 0), so that the whole of it is charged.
        let grown = desired.saturating_sub(current);
        if !self.charge.grow(grown.saturating_mul(GUEST_MEMORY_CHARGE)) {
            self.budget_refused = true;
            return Err(wasmtime::format_err!(
                "the policy calls' memory budget of {} bytes cannot cover {grown} more bytes",
                self.charge.budget().limit()
            ));
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_refused = true;
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
