//! The log of API writes that clients made, for tests and the benchmark's writes-per-sandbox.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use cubepod_kube::{ApiErrorKind, Resource};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteVerb {
    Create,
    Patch,
    PatchStatus,
    Delete,
}

impl WriteVerb {
    pub const fn as_str(self) -> &'static str {
        match self {
            WriteVerb::Create => "create",
            WriteVerb::Patch => "patch",
            WriteVerb::PatchStatus => "patch_status",
            WriteVerb::Delete => "delete",
        }
    }
}

impl fmt::Display for WriteVerb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// So that `record.verb == "create"` reads as the API's verb.
impl PartialEq<&str> for WriteVerb {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One write request made through [`cubepod_kube::Cluster`], whether or not it succeeded.
/// Writes of the simulated kubelet and garbage collector are not clients' and not logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    pub verb: WriteVerb,
    pub resource: Resource,
    pub namespace: String,
    pub name: String,
    /// Why it failed, if it did.
    pub error: Option<ApiErrorKind>,
}

#[derive(Default)]
pub(crate) struct WriteLog {
    records: Mutex<Vec<WriteRecord>>,
}

impl WriteLog {
    pub(crate) fn record(&self, record: WriteRecord) {
        self.lock().push(record);
    }

    pub(crate) fn snapshot(&self) -> Vec<WriteRecord> {
        self.lock().clone()
    }

    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WriteRecord>> {
        // A panic while pushing leaves a valid Vec: keep using it.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
