//! A scratch cluster for one scenario: an instant in-memory API server seeded with the
//! scenario's objects, a cache filled from it before every step, and each step's policy output
//! carried out as the control loop would. What is carried out mirrors
//! `controller/manager.rs` (`reconcile_sandbox`, `reconcile_pool`, `reap`) through the same
//! [`Writer`], kept to what changes the next input: finalizer, status, claim, pool members,
//! the reaper's mark. Events, metrics and requeues are reported, not acted on.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::runtime::Handle;

use super::format::{Action, PatchStep, ReapTarget, SeedObject, call_summary};
use crate::controller::cache::Cache;
use crate::controller::writer::Writer;
use crate::controller::{inputs, reflector};
use crate::kube::boundary::Boundary;
use crate::kube::memory::{MemoryCluster, MemoryClusterConfig};
use crate::kube::{ApiError, Cluster, Resource};
use crate::model::{ObjectRef, children, pool, sandbox, time};
use crate::runtime::bindings::KubeError;
use crate::runtime::{CallContext, KubeCall, PolicyModule, RuntimeError};

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
        what: String,
        #[source]
        source: ApiError,
    },
    /// The step names something the cluster does not hold, or that the controller would skip.
    #[error("{0}")]
    Skipped(String),
}

/// What one step returned and did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StepResult {
    pub calls: Vec<KubeCall>,
    /// The returned status as the controller writes it: the `status` of `status_patch`.
    pub status: Option<Value>,
    /// Reasons of the Events the policy asked for.
    pub events: Vec<String>,
    pub requeue_after_seconds: Option<u32>,
    pub claim: Option<String>,
    /// `cleanup-sandbox`'s `done`.
    pub done: Option<bool>,
    pub reaped: Vec<String>,
    pub pool_create: Vec<String>,
    pub pool_delete: Vec<String>,
}

/// A step's result, and the error that ended it early (calls made before it are kept).
#[derive(Debug, Default)]
pub struct StepOutcome {
    pub result: StepResult,
    pub error: Option<StepError>,
}

pub struct Scratch {
    cluster: Arc<MemoryCluster>,
    cache: Cache,
    context: CallContext,
    namespace: String,
    handle: Handle,
}

impl Scratch {
    /// An empty scratch cluster whose boundary admits `namespace` only. The handle runs the
    /// cluster's futures: call every method from a blocking thread, never from async code.
    pub fn new(namespace: &str, handle: &Handle) -> Self {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let context = CallContext::new(
            cluster.clone(),
            Arc::new(Boundary::new([namespace])),
            handle.clone(),
        );
        Self {
            cluster,
            cache: Cache::default(),
            context,
            namespace: namespace.to_string(),
            handle: handle.clone(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The context policy calls run in: this cluster, behind a boundary of its namespace.
    pub fn context(&self) -> &CallContext {
        &self.context
    }

    /// The cache, filled afresh from the cluster.
    pub fn refreshed(&mut self) -> Result<&Cache, StepError> {
        self.refresh()?;
        Ok(&self.cache)
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// Creates the objects as a user would have: create (which drops a given `status`), then
    /// the status through the status subresource, then a delete for those that carry
    /// `metadata.deletionTimestamp` (server-owned, so create drops it too).
    pub fn seed(&self, objects: &[SeedObject]) -> Result<(), String> {
        for (index, seed) in objects.iter().enumerate() {
            let what = format!("objects[{index}] ({}/{})", seed.resource.kind(), seed.name);
            let mut object = seed.object.clone();
            let status = object.as_object_mut().and_then(|o| o.remove("status"));
            let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
            let namespace = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(&self.namespace)
                .to_string();
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.insert("namespace".into(), namespace.clone().into());
            }
            self.cluster
                .insert(seed.resource, object)
                .map_err(|e| format!("{what}: {e}"))?;
            if let Some(status) = status {
                if seed.resource == Resource::Secret {
                    return Err(format!("{what}: a Secret has no status"));
                }
                let patch = json!({ "status": status });
                self.block_on(self.cluster.patch_status(
                    seed.resource,
                    &namespace,
                    &seed.name,
                    patch,
                ))
                .map_err(|e| format!("{what}: status: {e}"))?;
            }
            if deleting {
                self.block_on(self.cluster.delete(seed.resource, &namespace, &seed.name))
                    .map_err(|e| format!("{what}: delete: {e}"))?;
            }
        }
        Ok(())
    }

    /// Fills a fresh cache from lists, as the reflectors would after a relist.
    fn refresh(&mut self) -> Result<(), StepError> {
        let cache = Cache::default();
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
        self.cache = cache;
        Ok(())
    }

    /// An object of the cluster, if it exists.
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        self.block_on(self.cluster.get(resource, namespace, name))
            .ok()
    }

    /// `Kind/name` of every child labelled as `sandbox`'s, in any namespace.
    pub fn children_of(&self, sandbox: &str) -> Vec<(String, Value)> {
        [
            Resource::Pod,
            Resource::PersistentVolumeClaim,
            Resource::Secret,
        ]
        .into_iter()
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
        module: &PolicyModule,
        action: &Action,
        now: Option<i64>,
        max_pool_replicas: u32,
    ) -> StepOutcome {
        let mut result = StepResult::default();
        let now = now.unwrap_or(0);
        let done = self.refresh().and_then(|()| match action {
            Action::Reconcile(name) => self.reconcile(module, name, now, &mut result),
            Action::Pool(name) => self.pool(module, name, now, max_pool_replicas, &mut result),
            Action::Reap(target) => self.reap(module, target, now, &mut result),
            Action::Patch(patch) => self.patch(patch),
            Action::Delete(target) => self
                .block_on(
                    self.cluster
                        .delete(target.resource, &self.namespace, &target.name),
                )
                .map_err(|source| StepError::Api {
                    what: format!("deleting {target}"),
                    source,
                }),
        });
        StepOutcome {
            result,
            error: done.err(),
        }
    }

    fn writer(&self) -> Writer<'_> {
        Writer {
            cluster: self.cluster.as_ref(),
            cache: &self.cache,
        }
    }

    /// `ControllerManager::reconcile_sandbox`, without events and metrics.
    fn reconcile(
        &mut self,
        module: &PolicyModule,
        name: &str,
        now: i64,
        result: &mut StepResult,
    ) -> Result<(), StepError> {
        let target = ObjectRef::new(&self.namespace, name);
        let Some(mut object) = self.cache.sandbox(&target) else {
            return Err(StepError::Skipped(
                match self.cache.unreadable_sandbox(&target) {
                    Some(bad) => format!("the controller cannot read the sandbox: {}", bad.error),
                    None => format!("no Sandbox {target} in the cluster"),
                },
            ));
        };
        let api = |what: &str| {
            let what = what.to_string();
            move |source| StepError::Api { what, source }
        };
        if object.sandbox.deleting {
            if !object.has_finalizer() {
                return Err(StepError::Skipped(format!(
                    "Sandbox {target} is being deleted without the {} finalizer: the \
                     controller calls no policy for it",
                    sandbox::FINALIZER
                )));
            }
            let observed = self.cache.observed(&target);
            let call =
                module.cleanup_sandbox(&self.context, now, object.sandbox.clone(), observed)?;
            result.calls = call.calls;
            let out = call.value.map_err(|e| StepError::Guest(kube_error(&e)))?;
            result.done = Some(out.done);
            result.status = Some(
                sandbox::status_patch(&out.status, object.sandbox.generation)["status"].clone(),
            );
            let writer = self.writer();
            if out.done {
                self.block_on(writer.remove_finalizer(&object))
                    .map_err(api("removing the finalizer"))?;
            } else if out.status != object.sandbox.status {
                let patch = sandbox::status_patch(&out.status, object.sandbox.generation);
                self.block_on(writer.write_status(
                    Resource::Sandbox,
                    &target,
                    Some(&object.resource_version),
                    patch,
                ))
                .map_err(api("writing the status"))?;
            }
            return Ok(());
        }
        if !object.has_finalizer() {
            self.block_on(self.writer().add_finalizer(&object))
                .map_err(api("adding the finalizer"))?;
            if let Some(updated) = self.cache.sandbox(&target) {
                object = updated;
            }
        }
        let input =
            inputs::reconcile_input(&self.cache, &object.sandbox, now, FRESH_TOKEN.to_string());
        let call = module.reconcile_sandbox(&self.context, input)?;
        result.calls = call.calls;
        let out = call.value.map_err(|e| StepError::Guest(kube_error(&e)))?;
        result.status =
            Some(sandbox::status_patch(&out.status, object.sandbox.generation)["status"].clone());
        result.events = out.events.iter().map(|e| e.reason.clone()).collect();
        result.requeue_after_seconds = out.requeue_after_seconds;
        result.claim = out.claim.clone();
        let writer = self.writer();
        if let Some(member) = &out.claim {
            let member_ref = ObjectRef::new(&self.namespace, member);
            let member_object = self.cache.sandbox(&member_ref).ok_or_else(|| {
                StepError::Skipped(format!(
                    "the policy claimed {member_ref}, which the cache does not hold"
                ))
            })?;
            self.block_on(writer.claim_member(&object.sandbox, &member_object))
                .map_err(api("claiming the member"))?;
        }
        if out.status != object.sandbox.status {
            let patch = sandbox::status_patch(&out.status, object.sandbox.generation);
            self.block_on(writer.write_status(
                Resource::Sandbox,
                &target,
                Some(&object.resource_version),
                patch,
            ))
            .map_err(api("writing the status"))?;
        }
        Ok(())
    }

    /// `ControllerManager::reconcile_pool`, without events and metrics.
    fn pool(
        &mut self,
        module: &PolicyModule,
        name: &str,
        now: i64,
        max_replicas: u32,
        result: &mut StepResult,
    ) -> Result<(), StepError> {
        let target = ObjectRef::new(&self.namespace, name);
        let Some(object) = self.cache.pool(&target) else {
            return Err(StepError::Skipped(
                match self.cache.unreadable_pool(&target) {
                    Some(bad) => format!("the controller cannot read the pool: {}", bad.error),
                    None => format!("no PodWarmPool {target} in the cluster"),
                },
            ));
        };
        let input = inputs::pool_input(&self.cache, &object.pool, now, max_replicas);
        let call = module.reconcile_pool(&self.context, input)?;
        result.calls = call.calls;
        let out = call.value.map_err(|e| StepError::Guest(kube_error(&e)))?;
        result.status =
            Some(pool::status_patch(&out.status, object.pool.generation)["status"].clone());
        result.events = out.events.iter().map(|e| e.reason.clone()).collect();
        result.pool_create = out.create.iter().map(|m| m.name.clone()).collect();
        result.pool_delete = out.delete.clone();
        let writer = self.writer();
        for member in &out.create {
            self.block_on(writer.create_member(&target, &member.name, &member.manifest))
                .map_err(|source| StepError::Api {
                    what: format!("creating member {}", member.name),
                    source,
                })?;
        }
        let members = self.cache.pool_members(&target);
        for member in &out.delete {
            if members.iter().any(|m| &m.name == member) {
                self.block_on(writer.delete_member(&target, member))
                    .map_err(|source| StepError::Api {
                        what: format!("deleting member {member}"),
                        source,
                    })?;
            }
        }
        if out.status != object.pool.status {
            let patch = pool::status_patch(&out.status, object.pool.generation);
            self.block_on(writer.write_status(
                Resource::PodWarmPool,
                &target,
                Some(&object.resource_version),
                patch,
            ))
            .map_err(|source| StepError::Api {
                what: "writing the pool's status".to_string(),
                source,
            })?;
        }
        Ok(())
    }

    /// `ControllerManager::reap`: each decision is marked in the sandbox's status
    /// (`idlePausedAt`); the next reconcile carries it out.
    fn reap(
        &mut self,
        module: &PolicyModule,
        target: &ReapTarget,
        now: i64,
        result: &mut StepResult,
    ) -> Result<(), StepError> {
        let mut snapshot = self.cache.sandboxes();
        snapshot.sort_by(|a, b| a.sandbox.name.cmp(&b.sandbox.name));
        if let ReapTarget::Only(names) = target {
            if let Some(missing) = names
                .iter()
                .find(|n| !snapshot.iter().any(|s| &s.sandbox.name == *n))
            {
                return Err(StepError::Skipped(format!(
                    "reap: no Sandbox {missing:?} in namespace {:?}",
                    self.namespace
                )));
            }
            snapshot.retain(|s| names.contains(&s.sandbox.name));
        }
        let sandboxes: Vec<_> = snapshot
            .iter()
            .filter_map(|s| crate::model::sandbox::reap_candidate(&s.sandbox))
            .collect();
        let call = module.reap(&self.context, now, &self.namespace, &sandboxes)?;
        result.calls = call.calls;
        result.reaped = call.value.iter().map(|d| d.name.clone()).collect();
        let writer = self.writer();
        for decision in &call.value {
            let target = ObjectRef::new(&decision.namespace, &decision.name);
            let version = snapshot
                .iter()
                .find(|s| s.sandbox.namespace == target.namespace && s.sandbox.name == target.name)
                .map(|s| s.resource_version.as_str());
            let patch = json!({"status": {"idlePausedAt": time::format(now)}});
            // As the manager: a mark that cannot be written is left to the next tick.
            if let Err(error) =
                self.block_on(writer.write_status(Resource::Sandbox, &target, version, patch))
            {
                tracing::debug!(%target, %error, "scenario: reap mark not written");
            }
        }
        Ok(())
    }

    /// A user's merge patch; its `status` goes through the status subresource.
    fn patch(&self, step: &PatchStep) -> Result<(), StepError> {
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
            self.block_on(
                self.cluster
                    .patch(resource, &self.namespace, &step.name, merge),
            )
            .map_err(api)?;
        }
        if let Some(status) = status {
            self.block_on(self.cluster.patch_status(
                resource,
                &self.namespace,
                &step.name,
                json!({ "status": status }),
            ))
            .map_err(api)?;
        }
        Ok(())
    }
}

/// `kube-error` in words: `refused: ...`, `retryable after 100 ms: ...`.
pub fn kube_error(error: &KubeError) -> String {
    match error {
        KubeError::NotFound(m) => format!("not-found: {m}"),
        KubeError::Conflict(m) => format!("conflict: {m}"),
        KubeError::Refused(m) => format!("refused: {m}"),
        KubeError::Invalid(m) => format!("invalid: {m}"),
        KubeError::Retryable(r) => format!("retryable after {} ms: {}", r.delay_ms, r.message),
        KubeError::Other(m) => format!("other: {m}"),
    }
}

/// A call as `expect.calls` writes it.
pub fn summary(call: &KubeCall, namespace: &str) -> String {
    call_summary(call.op, &call.namespace, &call.name, namespace)
}
