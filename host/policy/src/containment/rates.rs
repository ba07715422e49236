//! Rates across calls: what one object may have written for it over time. A token bucket per
//! object, whatever the call or the write: bytes of the policy's writes (`--max-write-bytes-per-minute`)
//! and the Events posted about it (`--event-burst`, in `controller/events.rs`). A write past its
//! bucket is not sent: the caller defers it to when the bucket allows, counts it, and tells
//! the object once per episode ([`Take::Deferred`]'s `first`), not once per deferred write.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::model::ObjectRef;

/// The default of `--max-write-bytes-per-minute`: a sandbox's children are a few KiB, and
/// the largest manifest a policy may send (`--max-manifest-bytes`, 512 KiB) passes twice a
/// minute; 50 sandboxes at their bound store under 1 MiB/s.
pub const DEFAULT_WRITE_BYTES_PER_MINUTE: u64 = 1 << 20;

/// The default of `--event-burst`: client-go's spam filter (`defaultSpamBurst`).
pub const DEFAULT_EVENT_BURST: u32 = 25;

/// After the burst, an object gets one Event per this (client-go's `defaultSpamQPS`).
pub const EVENT_REFILL: Duration = Duration::from_secs(300);

/// The bounds of what may be written for one object over time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rates {
    /// Bytes of manifests a policy may have written for one Sandbox in a minute (and at once).
    pub write_bytes_per_minute: u64,
    /// Events one object may get at once; then one per [`EVENT_REFILL`].
    pub event_burst: u32,
}

/// The write buckets of one controller (one call context: shared by all its calls, apart
/// from any other controller, `policy test` run or self-test), made at its first write.
pub(crate) type WriteBuckets = OnceLock<TokenBuckets<ObjectRef>>;

impl Rates {
    /// The rates of `--write-bytes-per-minute` and `--event-burst`.
    pub fn new(write_bytes_per_minute: u64, event_burst: u32) -> Self {
        Self {
            write_bytes_per_minute,
            event_burst,
        }
    }

    /// Charges a write of `bytes` for `sandbox`'s children, now, to `buckets`.
    pub(crate) fn take_write(
        &self,
        buckets: &WriteBuckets,
        sandbox: &ObjectRef,
        bytes: usize,
    ) -> Take {
        buckets
            .get_or_init(|| {
                TokenBuckets::per(self.write_bytes_per_minute as f64, Duration::from_secs(60))
            })
            .take(sandbox, bytes as f64, Instant::now())
    }
}

impl Default for Rates {
    fn default() -> Self {
        Self::new(DEFAULT_WRITE_BYTES_PER_MINUTE, DEFAULT_EVENT_BURST)
    }
}

/// A write of the policy's that a call deferred, for the reconcile core: when to look again,
/// and whether to tell the Sandbox (the first of an episode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferral {
    /// How long until the deferred writes fit the budget.
    pub wait: Duration,
    /// The first deferral of an episode: the one the Sandbox is told of.
    pub first: bool,
    /// The first write deferred, in words (`NetworkPolicy ns/a-network`).
    pub what: String,
    /// Writes deferred in the call.
    pub count: u32,
}

/// Keys kept before full buckets are forgotten: a full bucket is the same as none.
const KEYS: usize = 4096;

/// What one bucket said of a write.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Take {
    /// Within the rate: its tokens are taken.
    Taken,
    /// Past the rate: nothing taken. `wait` is when the bucket holds enough; `first` when this
    /// is the first deferral since the bucket was last full (the one to tell the object of).
    Deferred {
        /// Until the bucket holds enough.
        wait: Duration,
        /// The first deferral since the bucket was last full.
        first: bool,
    },
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// A deferral was told since the bucket was last full.
    told: bool,
}

/// One token bucket per key: `capacity` at once, refilled at `per_second`.
pub struct TokenBuckets<K> {
    capacity: f64,
    per_second: f64,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> TokenBuckets<K> {
    /// `capacity` tokens at once, refilled at `capacity` per `period`.
    pub(crate) fn per(capacity: f64, period: Duration) -> Self {
        Self::new(capacity, capacity / period.as_secs_f64().max(1e-9))
    }

    /// Buckets of `capacity` tokens each, refilled at `per_second`.
    pub fn new(capacity: f64, per_second: f64) -> Self {
        Self {
            capacity: capacity.max(1.0),
            per_second: per_second.max(1e-9),
            buckets: Mutex::default(),
        }
    }

    /// Tokens a full bucket holds.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// Takes `amount` tokens (at most the capacity: a write larger than the bucket waits for a
    /// full one) from `key`'s bucket at `now`, or says how long until it could.
    pub fn take(&self, key: &K, amount: f64, now: Instant) -> Take {
        // Each step below leaves the map consistent: a panic under the lock cannot tear it.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(key) && buckets.len() >= KEYS {
            let (capacity, per_second) = (self.capacity, self.per_second);
            buckets.retain(|_, b| refilled(b, capacity, per_second, now) < capacity);
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: self.capacity,
            at: now,
            told: false,
        });
        bucket.tokens = refilled(bucket, self.capacity, self.per_second, now);
        bucket.at = now;
        if bucket.tokens >= self.capacity {
            bucket.told = false;
        }
        let amount = amount.min(self.capacity);
        if bucket.tokens >= amount {
            bucket.tokens -= amount;
            return Take::Taken;
        }
        let wait = Duration::from_secs_f64((amount - bucket.tokens) / self.per_second);
        let first = !bucket.told;
        bucket.told = true;
        Take::Deferred { wait, first }
    }
}

fn refilled(bucket: &Bucket, capacity: f64, per_second: f64, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * per_second).min(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_takes_its_capacity_then_defers_and_tells_once_until_full_again() {
        let buckets = TokenBuckets::per(1000.0, Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(buckets.take(&"a", 600.0, t0), Take::Taken);
        // 400 left; 500 more is 100 short: 6 s at 1000 a minute.
        match buckets.take(&"a", 500.0, t0) {
            Take::Deferred { wait, first } => {
                assert!(first);
                assert!((wait.as_secs_f64() - 6.0).abs() < 0.01, "{wait:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            buckets.take(&"a", 500.0, t0 + Duration::from_secs(1)),
            Take::Deferred { first: false, .. }
        ));
        // Another object has a bucket of its own.
        assert_eq!(buckets.take(&"b", 1000.0, t0), Take::Taken);
        assert_eq!(
            buckets.take(&"a", 500.0, t0 + Duration::from_secs(7)),
            Take::Taken
        );
        // Full again after a quiet minute: the next deferral is told again.
        let later = t0 + Duration::from_secs(120);
        assert_eq!(buckets.take(&"a", 1000.0, later), Take::Taken);
        assert!(matches!(
            buckets.take(&"a", 1.0, later),
            Take::Deferred { first: true, .. }
        ));
    }

    #[test]
    fn over_a_minute_no_more_than_capacity_and_a_minutes_refill_pass() {
        let buckets = TokenBuckets::per(f64::from(1u32 << 20), Duration::from_secs(60));
        let t0 = Instant::now();
        let mut passed = 0u64;
        // 500 KiB every 100 ms for five minutes: 1.5 GiB asked.
        for i in 0..3000u64 {
            let now = t0 + Duration::from_millis(100 * i);
            if buckets.take(&"a", f64::from(500u32 << 10), now) == Take::Taken {
                passed += 500 << 10;
            }
        }
        // The burst, then one capacity a minute.
        assert!(passed <= 6 << 20, "{passed} bytes in five minutes");
        assert!(passed >= 4 << 20, "{passed} bytes in five minutes");
    }

    #[test]
    fn a_write_larger_than_the_bucket_waits_for_a_full_one() {
        let buckets = TokenBuckets::per(100.0, Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(buckets.take(&"a", 1e9, t0), Take::Taken);
        assert!(matches!(buckets.take(&"a", 1e9, t0), Take::Deferred { .. }));
    }

    #[test]
    fn only_full_buckets_are_forgotten() {
        let buckets = TokenBuckets::per(10.0, Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(buckets.take(&0usize, 10.0, t0), Take::Taken);
        for key in 1..=KEYS {
            buckets.take(&key, 0.0, t0);
        }
        // Key 0 was emptied, so it is kept: it is not handed a fresh bucket.
        assert!(matches!(buckets.take(&0, 1.0, t0), Take::Deferred { .. }));
    }
}
