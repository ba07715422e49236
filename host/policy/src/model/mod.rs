//! Kubernetes JSON of our custom resources and of the children, turned into the contract's
//! types and back. The controller applies here the defaults an API server without our CRD
//! schema would not, and says which field is wrong when an object cannot be read.

pub mod children;
pub mod meta;
/// The names and labels the design fixes, shared with every policy: the SDK's own file,
/// compiled into the host as well, so that there is one copy and no crate between them.
#[path = "../../../../sdk/src/names.rs"]
#[allow(missing_docs)] // The SDK's file: its items are documented there, or not, for both.
pub mod names;
pub mod network;
pub mod pool;
pub mod sandbox;
pub mod status;
pub mod time;

/// An object the controller cannot read, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {namespace}/{name}: {field}: {problem}")]
pub struct ModelError {
    /// The kind of the object: `Sandbox`, `PodWarmPool`.
    pub kind: &'static str,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The field that could not be read: `spec.size`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

/// An object of ours that could not be read: what the controller needs to say so in its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Why it could not be read.
    pub error: ModelError,
    /// The object's UID.
    pub uid: String,
    /// The object's `resourceVersion` when it was read.
    pub resource_version: String,
    pub(crate) generation: i64,
    /// Its status already carries this error, so there is nothing more to write.
    pub reported: bool,
}

/// The condition type under which a spec's problems are reported.
pub const SPEC_VALID: &str = "SpecValid";

impl Unreadable {
    /// The unreadable `object` and why, noting whether its status already says so.
    pub fn new(error: ModelError, object: &serde_json::Value) -> Self {
        let meta = meta::Meta::read(object);
        let message = error.to_string();
        let reported = object["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c["type"] == SPEC_VALID && c["status"] == "False" && c["message"] == message
                })
            });
        Self {
            error,
            uid: meta.uid,
            resource_version: meta.resource_version,
            generation: meta.generation,
            reported,
        }
    }

    /// As [`Self::new`], from the cache's record of an object the controller can read but
    /// will not act on (a spec past the operator's bounds): its uid, version, generation and
    /// the conditions of its status.
    pub fn of_record(
        error: ModelError,
        uid: &str,
        resource_version: &str,
        generation: i64,
        conditions: &[crate::runtime::bindings::Condition],
    ) -> Self {
        let message = error.to_string();
        let reported = conditions.iter().any(|c| {
            c.kind == SPEC_VALID
                && c.status == crate::runtime::bindings::ConditionStatus::False
                && c.message == message
        });
        Self {
            error,
            uid: uid.to_string(),
            resource_version: resource_version.to_string(),
            generation,
            reported,
        }
    }

    /// The status that tells the user what to fix: SpecValid and Ready false, with why, as of
    /// `now`.
    pub fn status_patch(&self, with_phase: bool, now: i64) -> serde_json::Value {
        let now = time::format(now);
        let condition = |kind: &str| {
            serde_json::json!({
                "type": kind, "status": "False", "reason": "InvalidSpec",
                "message": self.error.to_string(), "lastTransitionTime": now,
                "observedGeneration": self.generation,
            })
        };
        let mut status = serde_json::json!({
            "observedGeneration": self.generation,
            "conditions": [condition(SPEC_VALID), condition("Ready")],
        });
        if with_phase {
            status["phase"] = "Failed".into();
        }
        serde_json::json!({ "status": status })
    }
}

/// Where an object lives: the work queue's key and the caches' index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl ObjectRef {
    /// The object `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
