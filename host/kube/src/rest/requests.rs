//! The REST client's count of its HTTP attempts, in client-go's metric.

use prometheus::IntCounterVec;

/// client-go's `rest_client_requests_total{code,method,host}`: one per HTTP attempt, `code`
/// the status or `<error>` when no response came. The registry that serves it is the caller's.
#[derive(Clone)]
pub struct RestClientRequests(IntCounterVec);

impl RestClientRequests {
    /// Counts into `counter`, whose labels are `code`, `method` and `host`, in that order.
    pub fn new(counter: IntCounterVec) -> Self {
        Self(counter)
    }

    pub(crate) fn inc(&self, code: &str, method: &str, host: &str) {
        self.0.with_label_values(&[code, method, host]).inc();
    }
}

impl std::fmt::Debug for RestClientRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RestClientRequests")
    }
}
