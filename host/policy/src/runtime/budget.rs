//! The memory budget of all policy calls in flight together (`--calls-memory-budget`): each
//! call is bounded on its own, but many calls at their bounds at once would take the
//! controller past its container's memory limit. A call charges the budget as its guest memory
//! grows and as the host parses what it passes, and gives its charge back when it ends; what
//! the budget cannot cover fails the call (reason `memory`), to be retried soon: the cause
//! is the other calls, not the sandbox's (the controller's `ReconcileError::retry_after`).
//! See docs/architecture.md, "Host memory across calls", for the formula.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The default budget, in MiB: with the controller's own memory and the instance pool's
/// pages kept resident between calls, it keeps the Deployment's 512Mi limit with margin.
pub(crate) const DEFAULT_CALLS_MEMORY_BUDGET_MIB: u32 = 256;

/// Bytes charged per byte of guest memory: the guest's page, and one copy of it on the host's
/// heap, which is what lifting an output or a `kube-client` argument (a string, a list) makes
/// of what the guest holds.
pub const GUEST_MEMORY_CHARGE: usize = 2;

/// Bytes charged per byte of a manifest the host parses, while it holds the parsed value: a
/// `serde_json::Value` of a Kubernetes object takes up to about this many times its text.
pub(crate) const MANIFEST_PARSE_CHARGE: usize = 8;

/// One budget shared by every call of an engine. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    charged: AtomicUsize,
    /// `cubepod_calls_memory_charged_bytes`, once the controller's metrics are set up.
    gauge: OnceLock<prometheus::IntGauge>,
}

impl MemoryBudget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            charged: AtomicUsize::new(0),
            gauge: OnceLock::new(),
        })
    }

    /// The most all calls may hold at once, in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// What the calls in flight hold now, in bytes.
    pub fn charged(&self) -> usize {
        self.charged.load(Ordering::Relaxed)
    }

    /// Shows the charged bytes on `gauge` from now on.
    pub fn report_to(&self, gauge: prometheus::IntGauge) {
        gauge.set(i64::try_from(self.charged()).unwrap_or(i64::MAX));
        let _ = self.gauge.set(gauge);
    }

    /// Adds `bytes` if they fit under the limit; nothing when they do not.
    fn try_charge(&self, bytes: usize) -> bool {
        let fitted = self
            .charged
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |charged| {
                charged.checked_add(bytes).filter(|&sum| sum <= self.limit)
            });
        if let Ok(before) = fitted {
            self.show(before + bytes);
        }
        fitted.is_ok()
    }

    fn release(&self, bytes: usize) {
        let before = self.charged.fetch_sub(bytes, Ordering::AcqRel);
        self.show(before - bytes);
    }

    fn show(&self, charged: usize) {
        if let Some(gauge) = self.gauge.get() {
            gauge.set(i64::try_from(charged).unwrap_or(i64::MAX));
        }
    }
}

/// What one call (or one host call's parse) holds of the budget: given back when dropped, so
/// that a call that traps, times out or is cancelled returns its share too.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Charge {
    /// A charge of nothing yet against `budget`.
    pub fn new(budget: Arc<MemoryBudget>) -> Self {
        Self { budget, bytes: 0 }
    }

    /// Charges `bytes` more; `false` (and nothing charged) when the budget cannot cover them.
    pub fn grow(&mut self, bytes: usize) -> bool {
        if bytes == 0 {
            return true;
        }
        let fitted = self.budget.try_charge(bytes);
        if fitted {
            self.bytes += bytes;
        }
        fitted
    }

    /// The bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_held_until_dropped() {
        let budget = MemoryBudget::new(100);
        let mut a = Charge::new(budget.clone());
        assert!(a.grow(60));
        assert_eq!(budget.charged(), 60);
        let mut b = Charge::new(budget.clone());
        assert!(b.grow(40));
        assert_eq!(budget.charged(), 100);
        drop(a);
        assert_eq!(budget.charged(), 40);
        drop(b);
        assert_eq!(budget.charged(), 0);
    }

    #[test]
    fn growth_past_the_limit_is_refused_and_charges_nothing() {
        let budget = MemoryBudget::new(100);
        let mut a = Charge::new(budget.clone());
        assert!(a.grow(70));
        let mut b = Charge::new(budget.clone());
        assert!(!b.grow(31));
        assert_eq!(b.bytes(), 0);
        assert_eq!(budget.charged(), 70);
        // What is left still fits.
        assert!(b.grow(30));
        assert!(!a.grow(1));
        drop(b);
        assert!(a.grow(30));
        assert_eq!(budget.charged(), 100);
        // No overflow past usize either.
        assert!(!a.grow(usize::MAX));
    }

    #[test]
    fn the_gauge_follows_the_charges() {
        let budget = MemoryBudget::new(1 << 20);
        let gauge = prometheus::IntGauge::new("charged", "charged").unwrap();
        budget.report_to(gauge.clone());
        let mut a = Charge::new(budget.clone());
        assert!(a.grow(4096));
        assert_eq!(gauge.get(), 4096);
        drop(a);
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn concurrent_calls_never_hold_more_than_the_limit() {
        const LIMIT: usize = 1000;
        let budget = MemoryBudget::new(LIMIT);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let mut granted = 0;
                    for _ in 0..2000 {
                        let mut charge = Charge::new(budget.clone());
                        for _ in 0..5 {
                            if charge.grow(64) {
                                granted += 1;
                            }
                            assert!(budget.charged() <= LIMIT);
                        }
                    }
                    granted
                })
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(granted > 0);
        assert_eq!(budget.charged(), 0);
    }
}
