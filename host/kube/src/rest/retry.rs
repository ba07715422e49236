//! When to try a failed request again. Transient failures (429, 5xx, connection errors,
//! timeouts) are retried with capped exponential backoff and jitter, or after the server's
//! Retry-After.
//!
//! Every verb is retried, POST included: a create whose first attempt did reach the server
//! comes back AlreadyExists, a delete NotFound, and the controller treats both as done, so a
//! repeat never duplicates an object. Merge patches are idempotent by definition.

use std::time::Duration;

use hyper::StatusCode;
use hyper::header::{HeaderMap, RETRY_AFTER};
use rand::Rng as _;

/// The longest Retry-After honoured: a server asking for more is asked again sooner.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub(crate) base: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The wait before retry number `attempt` (0 for the first): `base * 2^attempt`, capped at
    /// `max`, then drawn from its upper half so that clients that failed together spread out.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let exponential = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt.min(30)))
            .min(self.max);
        let half = exponential / 2;
        half + half.mul_f64(rand::rng().random_range(0.0..=1.0))
    }
}

/// Whether a response status is worth retrying.
pub(crate) fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED)
}

/// Retry-After in seconds, as the API server sends it (HTTP dates are not used by it).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_are_capped() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let first = backoff.delay(0);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = backoff.delay(2);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            assert!(backoff.delay(40) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn retry_after_is_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "2".parse().expect("header"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(RETRY_AFTER, "3600".parse().expect("header"));
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(RETRY_AFTER, "soon".parse().expect("header"));
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn transient_statuses() {
        assert!(is_transient(StatusCode::TOO_MANY_REQUESTS));
        assert!(is_transient(StatusCode::SERVICE_UNAVAILABLE));
        assert!(is_transient(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(!is_transient(StatusCode::NOT_IMPLEMENTED));
        assert!(!is_transient(StatusCode::CONFLICT));
    }
}
