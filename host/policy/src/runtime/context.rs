//! What a policy call may reach (the cluster through the boundary, the controller's cache) and
//! what it hands back (its value, its writes, the requests it made): the types shared by the
//! call (`call.rs`) and the host functions the guest calls (`host/`).

use std::sync::Arc;
use std::time::Duration;

use super::bindings::KubeError;
pub use crate::containment::ChildHeld;
use crate::containment::rates::{Deferral, WriteBuckets};
use crate::containment::{Boundary, Rule};
use cubepod_kube::{Cluster, Resource};

/// Told of every request a guest's `kube-client` call made (or that the boundary refused),
/// so that the caller can count them.
pub type HostCallObserver = Arc<dyn Fn(HostCallRecord) + Send + Sync>;

/// One request on behalf of a guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCallRecord {
    /// `create`, `get` or `delete`.
    pub verb: &'static str,
    /// The resource it addressed.
    pub resource: Resource,
    /// Zero for a refused call.
    pub(crate) duration: Duration,
    /// `ok`, an [`ApiErrorKind::label`](cubepod_kube::ApiErrorKind::label), `timeout`, or
    /// `refused` (by the boundary: nothing was sent).
    pub result: &'static str,
    /// The boundary refused the call (`result` is `refused`).
    pub refused: bool,
    /// The rule that refused it (its `label()` is the metric's `rule`); `None` when sent.
    pub rule: Option<Rule>,
}

/// Answers from the controller's cache, without an API read, whether a delete names the
/// call's Sandbox's own child. A [`CallContext`] without one admits only deletes of what the
/// call's input shows as observed (fail closed). The cache is also told each write's answer
/// the moment it comes, before the call goes on: the watch's echo of it, on its way over the
/// same connection, is then known as one (see the controller's `controller/cache/echo.rs`).
pub trait ChildLookup: Send + Sync {
    /// Own (labelled for `sandbox`, with its controller reference to `uid`), a stranger's of
    /// its name, another sandbox's, or not held. Telling "another's" from "not held" may scan
    /// every sandbox's children: for deletes and takeovers, never for a call's every write.
    fn child(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> ChildHeld;
    /// Whether it is `sandbox`'s own child, its controller reference to `uid`: one lookup.
    fn holds(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        sandbox: &str,
        uid: &str,
    ) -> bool;
    /// The PVCs `sandbox` (of `uid`) owns: held under it, managed, with its controller
    /// reference, and not being deleted. What a fork of it may clone.
    fn owned_pvcs(&self, namespace: &str, sandbox: &str, uid: &str) -> Vec<String>;
    /// What the API answered to a write of the call (a create or a patch), or read back of an
    /// object a create found existing.
    fn written(&self, resource: Resource, object: &serde_json::Value);
    /// Whether the controller may keep what a write of `manifest` (the child `name` of
    /// `sandbox`) would leave it holding, within its bound of what policies wrote
    /// (`--max-policy-object-bytes`); `Err` says which bound, in words. The write is deferred
    /// when not.
    fn room(
        &self,
        _resource: Resource,
        _namespace: &str,
        _sandbox: &str,
        _name: &str,
        _manifest: &str,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// What a call may reach: the cluster through the boundary, and how to wait on it.
#[derive(Clone)]
pub struct CallContext {
    pub(crate) cluster: Arc<dyn Cluster>,
    /// The containment rules every request passes.
    pub boundary: Arc<Boundary>,
    /// The runtime the cluster's futures run on: a blocking call (`reconcile_sandbox`, ...)
    /// drives its future on it, so it must be made outside the runtime's threads. How long a
    /// request may wait is the engine's ([`RuntimeConfig::host_call_timeout`]).
    ///
    /// [`RuntimeConfig::host_call_timeout`]: super::RuntimeConfig::host_call_timeout
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) observer: Option<HostCallObserver>,
    /// The controller's cache, for the delete rule; `None` in tests and `policy test`.
    pub(crate) children: Option<Arc<dyn ChildLookup>>,
    /// Each Sandbox's write rate, across the calls of this context (`--max-write-bytes-per-minute`).
    pub(crate) write_rates: Arc<WriteBuckets>,
}

impl CallContext {
    /// A context with no observer and no cache.
    pub fn new(
        cluster: Arc<dyn Cluster>,
        boundary: Arc<Boundary>,
        handle: tokio::runtime::Handle,
    ) -> Self {
        Self {
            cluster,
            boundary,
            handle,
            observer: None,
            children: None,
            write_rates: Arc::default(),
        }
    }

    /// Answers the policy's reads of children from `children` (the controller's cache).
    pub fn with_children(mut self, children: Arc<dyn ChildLookup>) -> Self {
        self.children = Some(children);
        self
    }

    /// Hands each host call's record to `observer` as it ends.
    pub fn with_observer(mut self, observer: HostCallObserver) -> Self {
        self.observer = Some(observer);
        self
    }
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("boundary", &self.boundary)
            .field("observer", &self.observer.is_some())
            .field("children", &self.children.is_some())
            .finish_non_exhaustive()
    }
}

/// A child write the guest made that succeeded, for the caller's cache: the watch shows it
/// only later, and a reconcile in between must not create it again.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Created, or found existing (AlreadyExists). `object` is the object as the API returned
    /// it; for an object that already existed, the manifest (a Pod's: the object read back).
    Applied {
        /// Its resource.
        resource: Resource,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The object, as above.
        object: serde_json::Value,
    },
    /// Deleted, or found gone (NotFound).
    Deleted {
        /// Its resource.
        resource: Resource,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// One `kube-client` call as the guest made it, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeCall {
    /// The import: `ensure-pvc`, `delete-pod`, ...
    pub op: &'static str,
    /// The namespace it addressed.
    pub namespace: String,
    /// The name of the object it addressed.
    pub name: String,
    /// The manifest of an `ensure-*`, as the guest serialized it.
    pub manifest: Option<String>,
    /// `Err` with the error the guest got back.
    pub result: Result<(), KubeError>,
}

/// What an export returned, and what it did on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct GuestCall<T> {
    /// What the export returned.
    pub value: T,
    /// The host calls' effects, in order.
    pub effects: Vec<Effect>,
    /// `kube-client` calls the guest made, refused ones included.
    pub host_calls: u32,
    /// Those calls, in order.
    pub calls: Vec<KubeCall>,
    /// Writes not sent because their Sandbox was past its write rate.
    pub deferred: Option<Deferral>,
    /// Objects that bear a name of the Sandbox's children but are not its own (no controller
    /// reference to its uid), in words: each was left alone, and the guest told so
    /// ([`NAME_CONFLICT`](crate::containment::NAME_CONFLICT)).
    pub name_conflicts: Vec<String>,
}

impl<T> GuestCall<T> {
    /// A call answered without running the module (from its memo): no request, no effect.
    pub(crate) fn answered(value: T) -> Self {
        GuestCall {
            value,
            effects: Vec::new(),
            host_calls: 0,
            calls: Vec::new(),
            deferred: None,
            name_conflicts: Vec::new(),
        }
    }

    /// The same call with its value changed by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> GuestCall<U> {
        GuestCall {
            value: f(self.value),
            effects: self.effects,
            host_calls: self.host_calls,
            calls: self.calls,
            deferred: self.deferred,
            name_conflicts: self.name_conflicts,
        }
    }
}
