//! Kubernetes JSON of our custom resources and of the children, turned into the contract's
//! types and back. The controller applies here the defaults an API server without our CRD
//! schema would not, and says which field is wrong when an object cannot be read.

pub mod children;
pub mod meta;
pub mod pool;
pub mod sandbox;
pub mod status;
pub mod time;

/// An object the controller cannot read, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {namespace}/{name}: {field}: {problem}")]
pub struct ModelError {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub field: String,
    pub problem: String,
}

/// Where an object lives: the work queue's key and the caches' index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
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
