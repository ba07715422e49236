#![forbid(unsafe_code)]
//! [`MemoryCluster`]: an in-memory Kubernetes API server with a simulated kubelet, garbage
//! collector and volume binder. It is the cluster of the embedded demo and of most tests, so it
//! keeps the API's semantics: resourceVersions, generation, status subresources, finalizers,
//! ownerReference cascades, label selectors and resumable watches that can be Gone.
//!
//! One lock guards all state, held only for the synchronous part of a call; delayed kubelet
//! work runs on tokio tasks that hold a weak reference, so dropping the cluster ends them.

pub mod access;
mod api;
mod crds;
mod errors;
mod field;
mod gc;
mod kubelet;
mod managed_fields;
mod merge;
mod meta;
mod namespaces;
mod pod_lifecycle;
mod pod_network;
mod schema;
mod selector;
pub mod serve;
mod shape;
mod state;
mod store;
mod strategic;
mod strategy;
mod watch;
mod writes;

use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

pub use self::writes::{WriteRecord, WriteVerb};

use self::access::AccessControl;
use self::api::{Change, Owner, Subresource};
use self::kubelet::{Kubelet, Work};
use self::managed_fields::Manager;
use self::namespaces::Namespaces;
use self::state::State;
use self::store::ObjectKey;
use self::watch::WatchHub;
use self::writes::WriteLog;
use cubepod_kube::{
    ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, ObjectList, PageRequest, Resource,
    Scope, WatchEvent,
};

/// The simulated kubelet's delays, the watch bounds and the namespaces of a [`MemoryCluster`].
#[derive(Clone, Debug)]
pub struct MemoryClusterConfig {
    /// From a Pod's creation until it is Running with an IP (zero: within the create call).
    pub pod_start_delay: Duration,
    /// From a Pod's deletion until it is gone (zero: deleted at once, like any object).
    pub pod_stop_delay: Duration,
    /// Changes kept for resuming watches; a watch from before them is Gone.
    pub watch_history: usize,
    /// Events a watch may have pending beyond its replayed backlog before it is closed.
    pub watch_buffer: usize,
    /// The namespaces that exist; a create in any other is NotFound. `None`: every namespace
    /// exists.
    pub namespaces: Option<BTreeSet<String>>,
    /// The first address of the /16 that Pod IPs are handed out from (10.244.0.0). A loopback
    /// range (127.x.0.0) makes each Pod reachable at its own IP on this machine once
    /// [`MemoryCluster::serve_pod_ip`] serves it: what a router in another process dials.
    pub pod_network: Ipv4Addr,
}

impl Default for MemoryClusterConfig {
    fn default() -> Self {
        Self {
            pod_start_delay: Duration::from_millis(200),
            pod_stop_delay: Duration::from_millis(100),
            watch_history: 10_000,
            watch_buffer: 4_096,
            namespaces: None,
            pod_network: Ipv4Addr::new(10, 244, 0, 0),
        }
    }
}

impl MemoryClusterConfig {
    /// No kubelet delays: pods run as soon as they are created and go as soon as deleted.
    pub fn instant() -> Self {
        Self {
            pod_start_delay: Duration::ZERO,
            pod_stop_delay: Duration::ZERO,
            ..Self::default()
        }
    }

    /// Only the namespaces every cluster has (`default`, `kube-system`, ...), those already set
    /// and `names` exist.
    pub fn with_namespaces<S: Into<String>>(self, names: impl IntoIterator<Item = S>) -> Self {
        let mut namespaces: BTreeSet<String> = namespaces::BUILT_IN
            .iter()
            .map(|n| (*n).to_owned())
            .collect();
        namespaces.extend(self.namespaces.iter().flatten().cloned());
        namespaces.extend(names.into_iter().map(Into::into));
        Self {
            namespaces: Some(namespaces),
            ..self
        }
    }
}

/// The in-memory API server: a [`Cluster`] whose objects live in this process, with the API's
/// semantics (see the crate's documentation).
pub struct MemoryCluster {
    /// Itself, for the delayed kubelet tasks: they must not keep a dropped cluster alive.
    this: Weak<MemoryCluster>,
    state: Mutex<State>,
    writes: WriteLog,
    /// Who the cluster authenticates, and what they may do (`access.rs`).
    access: Arc<AccessControl>,
    /// Loopback stand-ins for Pod IPs (`pod_network.rs`).
    pod_network: pod_network::PodNetwork,
}

impl fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryCluster")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl MemoryCluster {
    /// A new, empty cluster; in an `Arc`, since its delayed kubelet work holds a weak
    /// reference to it.
    pub fn new(config: MemoryClusterConfig) -> Arc<Self> {
        let hub = WatchHub::new(config.watch_history, config.watch_buffer);
        let kubelet = Kubelet::new(
            config.pod_start_delay,
            config.pod_stop_delay,
            config.pod_network,
        );
        Arc::new_cyclic(|this| Self {
            this: this.clone(),
            state: Mutex::new(State::new(hub, kubelet, Namespaces::new(config.namespaces))),
            writes: WriteLog::default(),
            access: Arc::default(),
            pod_network: pod_network::PodNetwork::default(),
        })
    }

    /// The cluster's tokens and grants: what its TokenReviews and SubjectAccessReviews answer.
    pub fn access(&self) -> &Arc<AccessControl> {
        &self.access
    }

    /// Creates `object` in its `metadata.namespace` (`default` if unset), as `create` would,
    /// without logging a client write: for seeding. A `metadata.uid` it gives is kept (unless
    /// another object has it), so that a seed's ownerReferences can name its objects.
    pub fn insert(&self, resource: Resource, object: Value) -> ApiResult<Value> {
        let namespace = meta::namespace(&object).unwrap_or("default").to_owned();
        let uid = meta::uid(&object)
            .filter(|uid| !uid.is_empty())
            .map(str::to_owned);
        self.with_state(|state| {
            if let Some(uid) = uid.as_deref().filter(|uid| state.store.contains_uid(uid)) {
                return Err(ApiError::new(
                    ApiErrorKind::AlreadyExists,
                    format!("an object with uid {uid:?} already exists"),
                ));
            }
            state.create_as(resource, &namespace, object, uid)
        })
        .map(|stored| (*stored).clone())
    }

    /// Every object of `resource`, in all namespaces, by namespace and name.
    pub fn objects(&self, resource: Resource) -> Vec<Value> {
        self.lock()
            .store
            .scan(resource, "")
            .map(|object| (**object).clone())
            .collect()
    }

    /// The cluster's namespaces, as Namespace objects, by name.
    pub(crate) fn namespaces(&self) -> Vec<Value> {
        let mut state = self.lock();
        let names = state.namespaces.names(&state.store);
        names
            .iter()
            .filter_map(|name| state.namespaces.get(name).ok())
            .collect()
    }

    /// The Namespace object of `name`, or NotFound.
    pub(crate) fn namespace(&self, name: &str) -> ApiResult<Value> {
        self.lock().namespaces.get(name)
    }

    /// How many objects of `resource` there are, in all namespaces.
    pub fn count(&self, resource: Resource) -> usize {
        self.lock().store.count(resource)
    }

    /// The cluster's current resourceVersion.
    pub fn resource_version(&self) -> String {
        self.lock().store.resource_version().to_string()
    }

    /// The write requests clients made, in order.
    pub fn writes(&self) -> Vec<WriteRecord> {
        self.writes.snapshot()
    }

    /// Forgets the writes logged so far: [`Self::writes`] starts again from here.
    pub fn clear_writes(&self) {
        self.writes.clear();
    }

    /// Ends every open watch stream, as an API server's watch timeout does.
    pub fn end_watches(&self) {
        self.lock().hub.end_all();
    }

    /// Drops the watch history: a watch resumed from any earlier version gets Gone.
    pub fn compact(&self) {
        self.lock().hub.compact();
    }

    /// Watch streams still open.
    pub fn open_watches(&self) -> usize {
        self.lock().hub.open_watches()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every write commits in one step after its checks, so state a panic left is whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` under the lock, then the kubelet work it made due: now, or on a timer.
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (result, later) = {
            let mut state = self.lock();
            let result = f(&mut state);
            (result, state.settle())
        };
        for (delay, work) in later {
            self.schedule(delay, work);
        }
        result
    }

    fn schedule(&self, delay: Duration, work: Work) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Outside tokio there is no timer: better at once than never.
            self.with_state(|state| state.run_kubelet(work));
            return;
        };
        let this = self.this.clone();
        runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(cluster) = this.upgrade() {
                cluster.with_state(|state| state.run_kubelet(work));
            }
        });
    }

    fn write<T>(&self, verb: WriteVerb, key: &ObjectKey, result: ApiResult<T>) -> ApiResult<T> {
        self.writes.record(WriteRecord {
            verb,
            resource: key.resource,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            error: result.as_ref().err().map(|e| e.kind),
        });
        result
    }

    /// A client's create, its fields recorded as `manager`'s.
    pub(crate) fn create_by(
        &self,
        resource: Resource,
        namespace: &str,
        object: Value,
        manager: &Manager,
    ) -> ApiResult<Value> {
        let name = meta::name(&object).unwrap_or_default().to_owned();
        let result = self
            .with_state(|state| state.create(resource, namespace, object, Owner::Manager(manager)))
            .map(|stored| (*stored).clone());
        let key = ObjectKey::new(resource, namespace, &name);
        self.write(WriteVerb::Create, &key, result)
    }

    /// A client's patch, PUT or server-side apply, its fields recorded as `manager`'s.
    pub(crate) fn write_by(
        &self,
        key: ObjectKey,
        change: Change<'_>,
        subresource: Subresource,
        manager: &Manager,
    ) -> ApiResult<Value> {
        let verb = match (change, subresource) {
            (Change::Apply { .. }, _) => WriteVerb::Apply,
            (Change::Replace(_), _) => WriteVerb::Update,
            (_, Subresource::Status) => WriteVerb::PatchStatus,
            (_, Subresource::Main) => WriteVerb::Patch,
        };
        let result = self
            .with_state(|state| state.write(&key, change, subresource, Some(manager)))
            .map(|stored| (*stored).clone());
        self.write(verb, &key, result)
    }

    fn patch_now(
        &self,
        verb: WriteVerb,
        key: ObjectKey,
        patch: &Value,
        subresource: Subresource,
    ) -> ApiResult<Value> {
        let result = self
            .with_state(|state| state.patch(&key, patch, subresource))
            .map(|stored| (*stored).clone());
        self.write(verb, &key, result)
    }
}

impl Cluster for MemoryCluster {
    fn create(
        &self,
        resource: Resource,
        namespace: &str,
        object: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let namespace = namespace.to_owned();
        Box::pin(async move {
            let name = meta::name(&object).unwrap_or_default().to_owned();
            let result = self
                .with_state(|state| state.create(resource, &namespace, object, Owner::Untracked))
                .map(|stored| (*stored).clone());
            let key = ObjectKey::new(resource, &namespace, &name);
            self.write(WriteVerb::Create, &key, result)
        })
    }

    fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let key = ObjectKey::new(resource, namespace, name);
        Box::pin(async move { self.lock().get(&key).map(|stored| (*stored).clone()) })
    }

    fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<()>> {
        let key = ObjectKey::new(resource, namespace, name);
        Box::pin(async move {
            let result = self.with_state(|state| state.delete(&key));
            self.write(WriteVerb::Delete, &key, result)
        })
    }

    fn patch(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let key = ObjectKey::new(resource, namespace, name);
        Box::pin(async move { self.patch_now(WriteVerb::Patch, key, &patch, Subresource::Main) })
    }

    fn patch_status(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        let key = ObjectKey::new(resource, namespace, name);
        Box::pin(
            async move { self.patch_now(WriteVerb::PatchStatus, key, &patch, Subresource::Status) },
        )
    }

    fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        let scope = scope.clone();
        Box::pin(async move { self.lock().list(&scope) })
    }

    fn list_page(&self, scope: &Scope, page: &PageRequest) -> BoxFuture<'_, ApiResult<ObjectList>> {
        let (scope, page) = (scope.clone(), page.clone());
        Box::pin(async move { self.lock().list_page(&scope, &page) })
    }

    fn watch(
        &self,
        scope: &Scope,
        resource_version: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        let scope = scope.clone();
        let resource_version = resource_version.to_owned();
        Box::pin(async move { self.lock().watch(&scope, &resource_version) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shares_across_threads_and_behind_the_seam() {
        fn shareable<T: Send + Sync>() {}
        shareable::<MemoryCluster>();
        let _seam: Arc<dyn Cluster> = MemoryCluster::new(MemoryClusterConfig::default());
    }

    #[test]
    fn without_tokio_delayed_kubelet_work_runs_at_once() {
        let cluster = MemoryCluster::new(MemoryClusterConfig::default());
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}});
        cluster.insert(Resource::Pod, pod).unwrap();
        assert_eq!(
            cluster.objects(Resource::Pod)[0]["status"]["phase"],
            "Running"
        );
    }

    #[tokio::test]
    async fn a_seed_keeps_the_uid_it_gives_and_a_create_never_does() {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let secret = |name: &str| json!({"metadata": {"name": name, "namespace": "ns", "uid": "seeded-uid"}});
        let seeded = cluster.insert(Resource::Secret, secret("a")).unwrap();
        assert_eq!(seeded["metadata"]["uid"], "seeded-uid");
        // Another object may not take it.
        let taken = cluster.insert(Resource::Secret, secret("b")).unwrap_err();
        assert_eq!(taken.kind, ApiErrorKind::AlreadyExists);
        // A client's create gets a uid of the server's.
        let created = cluster
            .create(Resource::Secret, "ns", secret("c"))
            .await
            .unwrap();
        assert_ne!(created["metadata"]["uid"], "seeded-uid");
        let fresh = cluster
            .insert(
                Resource::Secret,
                json!({"metadata": {"name": "d", "namespace": "ns"}}),
            )
            .unwrap();
        assert!(!fresh["metadata"]["uid"].as_str().unwrap_or("").is_empty());
    }

    #[tokio::test]
    async fn a_cluster_with_namespaces_has_those_and_the_built_in_ones_only() {
        let config = MemoryClusterConfig::instant().with_namespaces(["team-a"]);
        let cluster = MemoryCluster::new(config);
        let secret = json!({"metadata": {"name": "s"}});
        for namespace in ["team-a", "default", "kube-system"] {
            cluster
                .create(Resource::Secret, namespace, secret.clone())
                .await
                .unwrap();
        }
        let missing = cluster
            .create(Resource::Secret, "nope", secret.clone())
            .await
            .unwrap_err();
        assert_eq!(missing.kind, cubepod_kube::ApiErrorKind::NotFound);
        assert_eq!(missing.message, "namespaces \"nope\" not found");
        let names: Vec<Value> = cluster
            .namespaces()
            .iter()
            .map(|n| n["metadata"]["name"].clone())
            .collect();
        assert_eq!(
            names,
            [
                "default",
                "kube-node-lease",
                "kube-public",
                "kube-system",
                "team-a"
            ]
        );
        assert!(cluster.namespace("nope").is_err());

        // Without a set, every namespace exists, as the tests that seed anywhere expect.
        let open = MemoryCluster::new(MemoryClusterConfig::instant());
        open.create(Resource::Secret, "anywhere", secret)
            .await
            .unwrap();
        assert!(open.namespace("elsewhere").is_ok());
    }

    #[tokio::test]
    async fn a_sandbox_is_defaulted_and_an_invalid_write_refused_with_its_causes() {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let sandbox = json!({"metadata": {"name": "a"}, "spec": {"image": "i"}});
        let created = cluster
            .create(Resource::Sandbox, "ns", sandbox)
            .await
            .unwrap();
        assert_eq!(created["spec"]["desiredState"], "Running");
        assert_eq!(created["spec"]["rootfsGeneration"], 1);

        let patch = json!({"spec": {"idleTimeoutSeconds": -5}});
        let refused = cluster
            .patch(Resource::Sandbox, "ns", "a", patch)
            .await
            .unwrap_err();
        assert_eq!(
            refused.message,
            "Sandbox.cubepod.io \"a\" is invalid: spec.idleTimeoutSeconds: Invalid value: -5: \
             spec.idleTimeoutSeconds in body should be greater than or equal to 0"
        );
        assert_eq!(refused.causes[0].reason, "FieldValueInvalid");
        assert_eq!(refused.causes[0].field, "spec.idleTimeoutSeconds");

        let status = json!({"status": {"phase": "Sleeping"}});
        let refused = cluster
            .patch_status(Resource::Sandbox, "ns", "a", status)
            .await
            .unwrap_err();
        assert_eq!(refused.causes[0].field, "status.phase");
        assert_eq!(refused.causes[0].reason, "FieldValueNotSupported");
        let unchanged = cluster.get(Resource::Sandbox, "ns", "a").await.unwrap();
        assert_eq!(
            unchanged["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
    }
}
