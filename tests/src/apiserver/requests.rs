//! The log of requests served, for assertions and request counts (by verb, resource, status).

use std::sync::{Mutex, MutexGuard, PoisonError};

use cubepod_kube::Resource;
use hyper::{Method, Version};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: Method,
    /// HTTP/1.1 or HTTP/2, as negotiated.
    pub version: Version,
    /// The URL path, without the query.
    pub path: String,
    /// The resource addressed, if the path names one.
    pub resource: Option<Resource>,
    pub watch: bool,
    /// The HTTP status answered; `None` when a fault reset the connection instead.
    pub status: Option<u16>,
}

#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    records: Mutex<Vec<RequestRecord>>,
}

impl RequestLog {
    pub(crate) fn record(&self, record: RequestRecord) {
        self.lock().push(record);
    }

    pub(crate) fn snapshot(&self) -> Vec<RequestRecord> {
        self.lock().clone()
    }

    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<RequestRecord>> {
        // A push that panicked leaves a valid Vec.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
