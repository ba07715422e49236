//! The log of API writes that clients made, for tests and the benchmark's writes-per-sandbox.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use cubepod_kube::{ApiErrorKind, Resource};

/// Which [`cubepod_kube::Cluster`] write a client made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteVerb {
    /// `create` (and `FastPath::create_text`'s fallback to it).
    Create,
    /// A patch of the object (JSON merge or strategic merge).
    Patch,
    /// A patch of its `status`.
    PatchStatus,
    /// A PUT of the object or of its `status`: the whole replaced.
    Update,
    /// A server-side apply.
    Apply,
    /// `delete`.
    Delete,
}

impl WriteVerb {
    /// The verb as tests and reports name it: `create`, `patch`, `patch_status`, `update`,
    /// `apply`, `delete`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WriteVerb::Create => "create",
            WriteVerb::Patch => "patch",
            WriteVerb::PatchStatus => "patch_status",
            WriteVerb::Update => "update",
            WriteVerb::Apply => "apply",
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
    /// Which write.
    pub verb: WriteVerb,
    /// The kind of object written.
    pub resource: Resource,
    /// Its namespace.
    pub namespace: String,
    /// Its name (empty for a create whose object had none).
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
