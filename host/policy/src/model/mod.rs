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
#[derive(Debug, Clone, PartialEq)]
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
    /// For a Sandbox that was started (it has its volumes, maybe a running Pod): the
    /// conditions its status holds, kept beside the refusal's, as are its phase and Pod IP.
    /// `None` for an object with nothing started, whose phase the refusal sets to `Failed`.
    kept: Option<Vec<status::ConditionJson>>,
}

/// The condition type under which a spec's problems are reported.
pub const SPEC_VALID: &str = "SpecValid";

/// What a refusal adds for a sandbox that was started: what becomes of what runs.
const KEPT_AS_STARTED: &str = "; the sandbox keeps its phase and its Pod as they were, and \
                               nothing else is done for it until the spec is fixed";

impl Unreadable {
    /// The unreadable `object` and why, noting whether its status already says so.
    pub fn new(error: ModelError, object: &serde_json::Value) -> Self {
        let meta = meta::Meta::read(object);
        let held = &object["status"];
        let started = held["rootfsPVC"].is_string() || held["podIP"].is_string();
        let kept = (error.kind == "Sandbox" && started).then(|| {
            serde_json::from_value::<Vec<status::ConditionJson>>(held["conditions"].clone())
                .unwrap_or_default()
        });
        let mut unreadable = Self {
            error,
            uid: meta.uid,
            resource_version: meta.resource_version,
            generation: meta.generation,
            reported: false,
            kept,
        };
        let message = unreadable.message();
        unreadable.reported = held["conditions"].as_array().is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == SPEC_VALID && c["status"] == "False" && c["message"] == message
            })
        });
        unreadable
    }

    /// As [`Self::new`], from the cache's record of an object the controller can read but
    /// will not act on (a spec past the operator's bounds): its uid, version, generation and
    /// the conditions of its status; `started` for a Sandbox that has its volumes or a Pod.
    pub fn of_record(
        error: ModelError,
        uid: &str,
        resource_version: &str,
        generation: i64,
        conditions: &[crate::runtime::bindings::Condition],
        started: bool,
    ) -> Self {
        let kept = started.then(|| {
            conditions
                .iter()
                .map(|c| status::condition_to_json(c, generation))
                .collect()
        });
        let mut unreadable = Self {
            error,
            uid: uid.to_string(),
            resource_version: resource_version.to_string(),
            generation,
            reported: false,
            kept,
        };
        let message = unreadable.message();
        unreadable.reported = conditions.iter().any(|c| {
            c.kind == SPEC_VALID
                && c.status == crate::runtime::bindings::ConditionStatus::False
                && c.message == message
        });
        unreadable
    }

    /// What the condition and the Event say: the error, and for a started sandbox that what
    /// runs is left as it is.
    pub fn message(&self) -> String {
        match self.kept {
            Some(_) => format!("{}{KEPT_AS_STARTED}", self.error),
            None => self.error.to_string(),
        }
    }

    /// The status that tells the user what to fix, as of `now`: `SpecValid=False` with why.
    /// An object with nothing started also gets `Ready=False` (and, `with_phase`, the phase
    /// `Failed`); a started sandbox keeps its phase, Pod IP and other conditions, since its
    /// Pod, if it has one, runs on.
    pub fn status_patch(&self, with_phase: bool, now: i64) -> serde_json::Value {
        let message = self.message();
        let condition = |kind: &str, since: i64| status::ConditionJson {
            kind: kind.to_string(),
            status: "False".to_string(),
            reason: "InvalidSpec".to_string(),
            message: message.clone(),
            last_transition_time: time::format(since),
            observed_generation: Some(self.generation),
        };
        let mut written = match &self.kept {
            Some(kept) => {
                // The transition is when it became False, not each time the problem changes.
                let since = kept
                    .iter()
                    .find(|c| c.kind == SPEC_VALID && c.status == "False")
                    .and_then(|c| time::parse(&c.last_transition_time).ok())
                    .unwrap_or(now);
                let mut conditions = kept.clone();
                match conditions.iter_mut().find(|c| c.kind == SPEC_VALID) {
                    Some(spec_valid) => *spec_valid = condition(SPEC_VALID, since),
                    None => conditions.push(condition(SPEC_VALID, since)),
                }
                serde_json::json!({
                    "observedGeneration": self.generation,
                    "conditions": conditions,
                })
            }
            None => serde_json::json!({
                "observedGeneration": self.generation,
                "conditions": [condition(SPEC_VALID, now), condition("Ready", now)],
            }),
        };
        if with_phase && self.kept.is_none() {
            written["phase"] = "Failed".into();
        }
        serde_json::json!({ "status": written })
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
