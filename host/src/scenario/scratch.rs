//! A scratch cluster for one scenario: an instant in-memory API server seeded with the
//! scenario's objects, a cache filled from it before every step, and each step's policy call
//! carried out by the controller's own [`Reconciler`], the code the control loop runs. Only the
//! clock (each step's `now`), the credential handed to the policy (fixed) and the cache (refilled
//! from lists before each step) are the scenario's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::runtime::Handle;

use super::format::{Action, PatchStep, ReapTarget, SeedObject, call_summary};
use crate::controller::cache::{Cache, CacheWriter};
use crate::controller::policy::PolicySlot;
use crate::controller::reconcile::{
    Carried, Clock, IMMEDIATE_PASSES, Pass, ReconcileError, Reconciler, Settings, Tokens,
};
use crate::controller::reflector;
use crate::metrics::Metrics;
use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
use cubepod_kube::resource::StatusWrites;
use cubepod_kube::{ApiError, Cluster, Resource};
use cubepod_policy_host::containment::Boundary;
use cubepod_policy_host::containment::Refusal;
use cubepod_policy_host::model::{ObjectRef, children, names};
use cubepod_policy_host::runtime::{CallContext, KubeCall, PolicyModule, RuntimeError};

pub(crate) use crate::controller::action::describe_kube_error as kube_error;

/// The credential handed to the policy: fixed, so that manifests are the same on every run.
pub const FRESH_TOKEN: &str = "scenario-token";

/// Why a step could not finish.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The policy trapped, ran out of time or memory.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
    /// The export returned a kube-error.
    #[error("the policy returned an error: {0}")]
    Guest(String),
    /// The scratch API server refused a write the controller makes for the policy's output.
    #[error("{what}: {source}")]
    Api {
        /// The write, in words.
        what: String,
        /// The API's error.
        #[source]
        source: ApiError,
    },
    /// The step names something the cluster does not hold, or that the controller would skip.
    #[error("{0}")]
    Skipped(String),
    /// The host refused the policy's output, or it was past a budget: nothing was written.
    #[error("the host refused the policy's output: {0}")]
    Refused(Refusal),
}

impl From<ReconcileError> for StepError {
    fn from(error: ReconcileError) -> Self {
        match error {
            ReconcileError::Runtime(e) => StepError::Runtime(e),
            ReconcileError::Guest(e) => StepError::Guest(kube_error(&e)),
            ReconcileError::Api { what, source } => StepError::Api { what, source },
            ReconcileError::Join(why) => {
                StepError::Skipped(format!("the policy call ended: {why}"))
            }
            ReconcileError::Refused(refusal) | ReconcileError::Budget(refusal) => {
                StepError::Refused(refusal)
            }
        }
    }
}

/// What one step returned and did: the reconcile core's report.
pub(crate) type StepResult = Carried;

/// A step's result, and the error that ended it early (calls made before it are kept).
#[derive(Debug, Default)]
pub struct StepOutcome {
    pub(crate) result: StepResult,
    pub(crate) error: Option<StepError>,
}

/// A scratch in-memory cluster with one reconciler, for running scenario steps.
pub struct Scratch {
    cluster: Arc<MemoryCluster>,
    /// The cache's writer: the scratch cluster's lists refill it before every step.
    cache: CacheWriter,
    reconciler: Reconciler,
    namespace: String,
    handle: Handle,
}

impl Scratch {
    /// An empty scratch cluster whose boundary admits `namespace` only, running `module`. The
    /// handle runs the cluster's futures: call every method from a blocking thread, never from
    /// async code.
    pub fn new(namespace: &str, module: &PolicyModule, handle: &Handle) -> Self {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        // As the controller's: the policy's deletes are checked against the cache.
        let cache = CacheWriter::default();
        let context = CallContext::new(
            cluster.clone(),
            Arc::new(Boundary::new([namespace])),
            handle.clone(),
        )
        .with_children(Arc::new(cache.clone()));
        let mut reconciler = Reconciler::new(
            cluster.clone(),
            cache.clone(),
            PolicySlot::new(module.clone(), Default::default()),
            context,
            Arc::new(Metrics::new()),
            Arc::new(Settings {
                status_coalesce: Duration::ZERO,
                clock: Clock::fixed(0),
                tokens: Tokens::Fixed(FRESH_TOKEN),
                ..Settings::default()
            }),
        );
        // A scenario's expectations may name the status written.
        reconciler.record_status = true;
        Self {
            cluster,
            cache,
            reconciler,
            namespace: namespace.to_string(),
            handle: handle.clone(),
        }
    }

    /// What the scratch controller counted: the metrics its reconcile core keeps.
    #[cfg(test)]
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.reconciler.metrics
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The context policy calls run in: this cluster, behind a boundary of its namespace.
    pub(crate) fn context(&self) -> &CallContext {
        &self.reconciler.context
    }

    /// The in-memory cluster behind the scenario.
    pub fn cluster(&self) -> &Arc<MemoryCluster> {
        &self.cluster
    }

    /// The cache, filled afresh from the cluster.
    pub(crate) fn refreshed(&mut self) -> Result<&Cache, StepError> {
        self.refresh()?;
        Ok(&self.reconciler.cache)
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// Creates the objects as a user would have (see [`seed`]).
    pub fn seed(&self, objects: &[SeedObject]) -> Result<(), String> {
        self.block_on(seed(&self.cluster, &self.namespace, objects))
    }

    /// Refills the cache from lists, as the reflectors do after a relist.
    fn refresh(&mut self) -> Result<(), StepError> {
        let cache = &self.cache;
        for scope in reflector::scopes(&self.namespace) {
            let resource = scope.resource;
            let list =
                self.block_on(self.cluster.list(&scope))
                    .map_err(|source| StepError::Api {
                        what: format!("listing {resource}"),
                        source,
                    })?;
            cache.replace(resource, &self.namespace, &list.items);
        }
        Ok(())
    }

    /// An object of the cluster, if it exists.
    pub(crate) fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        self.block_on(self.cluster.get(resource, namespace, name))
            .ok()
    }

    /// `Kind/name` of every child labelled as `sandbox`'s, in any namespace.
    pub(crate) fn children_of(&self, sandbox: &str) -> Vec<(String, Value)> {
        Resource::children()
            .flat_map(|resource| {
                self.cluster
                    .objects(resource)
                    .into_iter()
                    .filter(|o| {
                        o.pointer("/metadata/labels")
                            .and_then(|l| l.get(children::SANDBOX_LABEL))
                            .and_then(Value::as_str)
                            == Some(sandbox)
                    })
                    .map(move |o| {
                        let name = o["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        (format!("{}/{name}", resource.kind()), o)
                    })
            })
            .collect()
    }

    /// Runs one step at `now` (required by steps that call the policy; the parser ensures it).
    pub fn run(
        &mut self,
        action: &Action,
        now: Option<i64>,
        max_pool_replicas: u32,
    ) -> StepOutcome {
        // The scratch reconciler is the settings' only holder: they change in place.
        let settings = Arc::make_mut(&mut self.reconciler.settings);
        settings.clock.set(now.unwrap_or(0));
        settings.max_pool_replicas = max_pool_replicas;
        let (mut result, done) = match self.refresh() {
            Err(error) => (StepResult::default(), Err(error)),
            Ok(()) => match action {
                Action::Reconcile(name) => {
                    let target = ObjectRef::new(&self.namespace, name);
                    self.reconcile_sandbox(&target)
                }
                Action::Pool(name) => {
                    let target = ObjectRef::new(&self.namespace, name);
                    let (result, done) = self.carried(self.reconciler.pool(&target));
                    (result, done.map(|_| ()))
                }
                Action::Reap(target) => self.reap(target),
                Action::Patch(_) | Action::Delete(_) => (
                    StepResult::default(),
                    self.block_on(user_step(&self.cluster, &self.namespace, action))
                        .unwrap_or(Ok(())),
                ),
            },
        };
        // An object the controller would not hand to the policy fails the step: the scenario
        // meant something else.
        let done = done.and_then(|()| match result.skipped.take() {
            Some(why) => Err(StepError::Skipped(why)),
            None => Ok(()),
        });
        StepOutcome {
            result,
            error: done.err(),
        }
    }

    /// Reconciles a Sandbox as the control loop does: again at once, up to
    /// [`IMMEDIATE_PASSES`], while it asks to be (a claim that adopted its member reports it
    /// in its next pass). The result holds every pass's calls and Events, the first claim, and
    /// the last pass's status.
    fn reconcile_sandbox(&self, target: &ObjectRef) -> (StepResult, Result<(), StepError>) {
        let (mut result, mut action) = self.carried(self.reconciler.sandbox(target));
        for _ in 1..IMMEDIATE_PASSES {
            match &action {
                Ok(action) if action.requeue_after == Some(Duration::ZERO) => {}
                _ => break,
            }
            let (mut next, done) = self.carried(self.reconciler.sandbox(target));
            result.calls.append(&mut next.calls);
            result.events.append(&mut next.events);
            result.claim = result.claim.take().or(next.claim);
            result.status = next.status.or(result.status.take());
            result.requeue_after_seconds = next.requeue_after_seconds;
            result.skipped = next.skipped;
            action = done;
        }
        (result, action.map(|_| ()))
    }

    /// A pass run to its end: what it did, and how it ended.
    fn carried<T>(
        &self,
        pass: impl Future<Output = Pass<T>>,
    ) -> (StepResult, Result<T, StepError>) {
        let Pass { outcome, carried } = self.block_on(pass);
        (carried, outcome.map_err(StepError::from))
    }

    /// A reaper pass over the scenario's namespace, or over the sandboxes it names (each must
    /// exist: a name that does not is a mistake in the scenario, not an idle sandbox).
    fn reap(&self, target: &ReapTarget) -> (StepResult, Result<(), StepError>) {
        let only = match target {
            ReapTarget::All => None,
            ReapTarget::Only(names) => {
                if let Some(missing) = names.iter().find(|n| {
                    self.reconciler
                        .cache
                        .sandbox(&ObjectRef::new(&self.namespace, n.as_str()))
                        .is_none()
                }) {
                    let missing = StepError::Skipped(format!(
                        "reap: no Sandbox {missing:?} in namespace {:?}",
                        self.namespace
                    ));
                    return (StepResult::default(), Err(missing));
                }
                Some(names.as_slice())
            }
        };
        self.carried(self.reconciler.reap(&self.namespace, only))
    }
}

/// Creates the objects as a user would have: create (which drops a given `status`), then the
/// status through the status subresource, then a delete for those that carry
/// `metadata.deletionTimestamp` (server-owned, so create drops it too).
pub async fn seed(
    cluster: &MemoryCluster,
    namespace: &str,
    objects: &[SeedObject],
) -> Result<(), String> {
    for (index, seed) in objects.iter().enumerate() {
        let what = format!("objects[{index}] ({}/{})", seed.resource.kind(), seed.name);
        let mut object = seed.object.clone();
        let status = object.as_object_mut().and_then(|o| o.remove("status"));
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace)
            .to_string();
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("namespace".into(), namespace.clone().into());
        }
        own_child(cluster, &namespace, seed.resource, &mut object).await;
        cluster
            .insert(seed.resource, object)
            .map_err(|e| format!("{what}: {e}"))?;
        if let Some(status) = status {
            // A kind whose status is not served apart (a Service here) has none a scenario
            // could seed.
            if seed.resource.descriptor().status == StatusWrites::Object {
                return Err(format!(
                    "{what}: a {} has no status to seed; remove its status",
                    seed.resource.kind()
                ));
            }
            let patch = json!({ "status": status });
            cluster
                .patch_status(seed.resource, &namespace, &seed.name, patch)
                .await
                .map_err(|e| format!("{what}: status: {e}"))?;
        }
        if deleting {
            cluster
                .delete(seed.resource, &namespace, &seed.name)
                .await
                .map_err(|e| format!("{what}: delete: {e}"))?;
        }
    }
    record_members(cluster, namespace, objects).await
}

/// A scenario's children are the controller's own: one labelled as managed and as a seeded
/// Sandbox's gets the controller reference to that Sandbox's uid, as the controller writes it
/// (a reference the scenario gives without a uid is completed; one with a uid, or an empty
/// list, is kept: an object of a child's name that is not the Sandbox's).
async fn own_child(
    cluster: &MemoryCluster,
    namespace: &str,
    resource: Resource,
    object: &mut Value,
) {
    if !resource.is_child() {
        return;
    }
    let label = |key: &str| {
        object
            .pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if label(children::MANAGED_BY_LABEL).as_deref() != Some(children::MANAGED_BY) {
        return;
    }
    let Some(sandbox) = label(children::SANDBOX_LABEL) else {
        return;
    };
    let Ok(owner) = cluster.get(Resource::Sandbox, namespace, &sandbox).await else {
        return;
    };
    let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else {
        return;
    };
    let reference = json!({"apiVersion": names::API_VERSION, "kind": "Sandbox",
                           "name": sandbox, "uid": uid, "controller": true});
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match metadata
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    {
        None => {
            metadata.insert("ownerReferences".into(), json!([reference]));
        }
        Some(references) => {
            for r in references.iter_mut() {
                let named = r.get("kind").and_then(Value::as_str) == Some("Sandbox")
                    && r.get("name").and_then(Value::as_str) == Some(sandbox.as_str());
                if named && r.get("uid").is_none() {
                    *r = reference.clone();
                }
            }
        }
    }
}

/// A scenario's pool members are the controller's own: each pool it declares records the
/// Sandboxes it labels for that pool, as the controller did when it created them, unless the
/// pool's `status.memberUIDs` is given (a scenario about a Sandbox that only carries a pool's
/// labels gives the record without it).
async fn record_members(
    cluster: &MemoryCluster,
    namespace: &str,
    objects: &[SeedObject],
) -> Result<(), String> {
    let in_namespace = |seed: &SeedObject| {
        seed.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace)
            .to_string()
    };
    for pool in objects
        .iter()
        .filter(|s| s.resource == Resource::PodWarmPool)
    {
        if pool.object.pointer("/status/memberUIDs").is_some() {
            continue;
        }
        let pool_namespace = in_namespace(pool);
        let mut record = serde_json::Map::new();
        for member in objects.iter().filter(|s| {
            s.resource == Resource::Sandbox
                && in_namespace(s) == pool_namespace
                && s.object
                    .pointer("/metadata/labels/cubepod.io~1pool")
                    .and_then(Value::as_str)
                    == Some(pool.name.as_str())
        }) {
            if let Ok(held) = cluster
                .get(Resource::Sandbox, &pool_namespace, &member.name)
                .await
                && let Some(uid) = held.pointer("/metadata/uid").and_then(Value::as_str)
            {
                record.insert(member.name.clone(), uid.into());
            }
        }
        let patch = json!({"status": {"memberUIDs": record}});
        cluster
            .patch_status(Resource::PodWarmPool, &pool_namespace, &pool.name, patch)
            .await
            .map_err(|e| format!("PodWarmPool/{}: recording its members: {e}", pool.name))?;
    }
    Ok(())
}

/// A step that is the user's, not the controller's (`patch`, `delete`), done to `cluster`;
/// `None` for a step the controller takes. A patch's `status` goes through the status
/// subresource.
pub async fn user_step(
    cluster: &MemoryCluster,
    namespace: &str,
    action: &Action,
) -> Option<Result<(), StepError>> {
    match action {
        Action::Patch(step) => Some(user_patch(cluster, namespace, step).await),
        Action::Delete(target) => Some(
            cluster
                .delete(target.resource, namespace, &target.name)
                .await
                .map_err(|source| StepError::Api {
                    what: format!("deleting {target}"),
                    source,
                }),
        ),
        Action::Reconcile(_) | Action::Pool(_) | Action::Reap(_) => None,
    }
}

async fn user_patch(
    cluster: &MemoryCluster,
    namespace: &str,
    step: &PatchStep,
) -> Result<(), StepError> {
    let resource = step.kind.0;
    let mut merge = step.merge.clone();
    let status = merge.as_object_mut().and_then(|m| m.remove("status"));
    let what = format!("patching {}/{}", resource.kind(), step.name);
    let api = |source| StepError::Api {
        what: what.clone(),
        source,
    };
    let has_main = merge.as_object().is_some_and(|m| !m.is_empty());
    if has_main || status.is_none() {
        cluster
            .patch(resource, namespace, &step.name, merge)
            .await
            .map_err(api)?;
    }
    if let Some(status) = status {
        cluster
            .patch_status(resource, namespace, &step.name, json!({ "status": status }))
            .await
            .map_err(api)?;
    }
    Ok(())
}

/// A call as `expect.calls` writes it.
pub(crate) fn summary(call: &KubeCall, namespace: &str) -> String {
    call_summary(call.op, &call.namespace, &call.name, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded status on a kind that has none is refused with the object named: by the format
    /// where the kind's schema has no `status` (a Secret, a NetworkPolicy), by the seeding where
    /// the schema has one the API does not serve apart (a Service): the descriptor says which.
    #[tokio::test]
    async fn a_status_on_a_kind_without_one_is_refused_by_name() {
        for (kind, api_version, by_format) in [
            ("Secret", "v1", true),
            ("Service", "v1", false),
            ("NetworkPolicy", "networking.k8s.io/v1", true),
        ] {
            let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
            let seeded = SeedObject::try_from(json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": "x"},
                "status": {},
            }));
            let error = match seeded {
                Err(error) => {
                    assert!(by_format, "{kind}: {error}");
                    assert!(error.contains("unknown field \"status\""), "{error}");
                    continue;
                }
                Ok(seeded) => seed(&cluster, "default", &[seeded])
                    .await
                    .expect_err("a status it cannot have"),
            };
            assert!(!by_format, "{kind}: the format took it");
            assert!(
                error.contains(&format!(
                    "objects[0] ({kind}/x): a {kind} has no status to seed"
                )),
                "{error}"
            );
        }
    }
}
