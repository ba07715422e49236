//! The controller's own writes (the policy's go through `kube-client`): finalizers, status,
//! claims, pool members and Events. Each write's result goes straight into the cache, so the
//! next reconcile sees it even before the watch does and nothing is written twice.

use serde_json::{Value, json};

use super::cache::CacheWriter;
use super::claims::Offer;
use super::events::{Posting, Recorder};
use cubepod_kube::{
    ApiError, ApiErrorKind, ApiResult, Cluster, Resource, WatchEventType, fast_path,
};
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::model::sandbox::{
    self, CLAIMED_BY_LABEL, FINALIZER, SandboxObject, StatusPatch,
};
use cubepod_policy_host::runtime::bindings::{
    DesiredState, Event, EventType, Sandbox, SandboxStatus,
};

/// What a finalizer write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalizing {
    /// The sandbox is still there, with its finalizers as written.
    Present,
    /// The sandbox no longer exists.
    Gone,
}

/// The controller's own writes (finalizers, status), kept in step with the cache.
pub struct Writer<'a> {
    /// Where it writes.
    pub cluster: &'a dyn Cluster,
    /// The cache it keeps up to date with its writes, through the cache's one writer.
    pub cache: &'a CacheWriter,
    /// Where it records Events.
    pub events: &'a Recorder,
}

impl Writer<'_> {
    fn remember(&self, resource: Resource, object: &Value) {
        self.cache.apply(resource, WatchEventType::Modified, object);
    }

    /// What the object's own reconcile wrote and goes on from: its echo reconciles nothing.
    fn remember_own(&self, resource: Resource, object: &Value) {
        self.cache.apply_own(resource, object);
    }

    /// Adds `cubepod.io/cleanup`, conditional on the version read, so that no other finalizer
    /// is lost to a concurrent write. `Gone` when the sandbox was deleted meanwhile: there is
    /// nothing to create children for.
    pub(crate) async fn add_finalizer(&self, object: &SandboxObject) -> ApiResult<Finalizing> {
        let mut finalizers = object.finalizers.clone();
        finalizers.push(FINALIZER.to_string());
        self.set_finalizers(object, finalizers).await
    }

    /// Removes the controller's finalizer from the Sandbox.
    pub async fn remove_finalizer(&self, object: &SandboxObject) -> ApiResult<Finalizing> {
        let finalizers: Vec<String> = object
            .finalizers
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        self.set_finalizers(object, finalizers).await
    }

    async fn set_finalizers(
        &self,
        object: &SandboxObject,
        finalizers: Vec<String>,
    ) -> ApiResult<Finalizing> {
        let patch = json!({"metadata": {
            "resourceVersion": object.resource_version,
            "finalizers": finalizers,
        }})
        .to_string();
        match self.patch_own_sandbox(object, patch, false).await {
            Ok(updated) => {
                // The last finalizer off an object being deleted deletes it: the response is
                // its final state, and keeping it in the cache would count a gone sandbox
                // until a relist if the watch's DELETED came first.
                let meta = cubepod_policy_host::model::meta::Meta::read(&updated);
                if meta.deletion_timestamp.is_some() && meta.finalizers.is_empty() {
                    self.cache
                        .apply(Resource::Sandbox, WatchEventType::Deleted, &updated);
                    return Ok(Finalizing::Gone);
                }
                self.remember_own_sandbox(&updated, object, None).await?;
                Ok(Finalizing::Present)
            }
            // Removed while we looked: nothing left to finalize, and nothing to create.
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(Finalizing::Gone),
            Err(error) => Err(error),
        }
    }

    /// Writes a status through the `status` subresource. With `resource_version`, only over
    /// the version it was computed from: a concurrent write (the reaper's mark, another
    /// replica) makes it a Conflict, and the key is reconciled again on fresh data instead of
    /// overwriting what it did not see.
    pub(crate) async fn write_status(
        &self,
        resource: Resource,
        target: &ObjectRef,
        resource_version: Option<&str>,
        patch: Value,
    ) -> ApiResult<()> {
        self.patch_status(resource, target, resource_version, patch, true)
            .await
    }

    /// A Sandbox's status, written by its own reconcile over the version `object` holds (see
    /// [`Self::write_status`]). `status` is what the API holds once it is written (the patch
    /// read back) and `first_ready_at` the `status.firstReadyAt` the patch sets, if it sets
    /// it: the answer is then asked for as the object's metadata alone.
    pub(crate) async fn write_sandbox_status(
        &self,
        object: &SandboxObject,
        patch: &StatusPatch,
        status: &SandboxStatus,
        first_ready_at: Option<i64>,
    ) -> ApiResult<()> {
        let member_uid = patch.claimed_member_uid();
        let patch = patch.text_over(&object.resource_version).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Invalid,
                format!("cannot serialize the status: {e}"),
            )
        })?;
        match self.patch_own_sandbox(object, patch, true).await {
            Ok(updated) => {
                let written = (status, first_ready_at, member_uid);
                self.remember_own_sandbox(&updated, object, Some(written))
                    .await
            }
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The merge patch `patch` of the Sandbox `object` (of its `status`), over the version the
    /// patch names, its answer asked for as the object's metadata alone.
    async fn patch_own_sandbox(
        &self,
        object: &SandboxObject,
        patch: String,
        status: bool,
    ) -> ApiResult<Value> {
        let sandbox = &object.sandbox;
        fast_path::patch_for_metadata(
            self.cluster,
            Resource::Sandbox,
            &sandbox.namespace,
            &sandbox.name,
            patch,
            status,
        )
        .await
    }

    /// An own write's answer, the metadata of `base` once written, into the cache, as the
    /// record the write left. Where that record cannot be made from it (the server changed the
    /// spec on the way, a webhook's doing), the object is read whole instead, and taken as any
    /// change is: its echo then reconciles the sandbox again, on the spec it now has.
    async fn remember_own_sandbox(
        &self,
        answer: &Value,
        base: &SandboxObject,
        written: Option<(&SandboxStatus, Option<i64>, Option<&str>)>,
    ) -> ApiResult<()> {
        if let Some(read) = sandbox::after_own_write(answer, base, written) {
            self.cache.apply_own_sandbox(answer, read);
            return Ok(());
        }
        let (namespace, name) = (&base.sandbox.namespace, &base.sandbox.name);
        tracing::debug!(
            namespace,
            name,
            "a write's answer is not the object written over: read whole"
        );
        match self.cluster.get(Resource::Sandbox, namespace, name).await {
            Ok(whole) => {
                self.remember(Resource::Sandbox, &whole);
                Ok(())
            }
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// A status written for another reconcile to act on (the reaper's mark): its echo
    /// queues the object as any change does.
    pub(crate) async fn mark_status(
        &self,
        resource: Resource,
        target: &ObjectRef,
        resource_version: Option<&str>,
        patch: Value,
    ) -> ApiResult<()> {
        self.patch_status(resource, target, resource_version, patch, false)
            .await
    }

    async fn patch_status(
        &self,
        resource: Resource,
        target: &ObjectRef,
        resource_version: Option<&str>,
        mut patch: Value,
        own: bool,
    ) -> ApiResult<()> {
        if let (Some(version), Some(fields)) = (resource_version, patch.as_object_mut()) {
            fields.insert("metadata".to_string(), json!({"resourceVersion": version}));
        }
        match self
            .cluster
            .patch_status(resource, &target.namespace, &target.name, patch)
            .await
        {
            Ok(updated) if own => {
                self.remember_own(resource, &updated);
                Ok(())
            }
            Ok(updated) => {
                self.remember(resource, &updated);
                Ok(())
            }
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Adopts the member `offer` names for `claim`: labels it claimed and makes the claim its
    /// owner, on the member's version as offered (unclaimed), so that a member taken since,
    /// by this process or any other, is a Conflict and never changes owner.
    pub(crate) async fn claim_member(&self, claim: &Sandbox, offer: &Offer) -> ApiResult<()> {
        let patch = json!({"metadata": {
            "resourceVersion": offer.version,
            "labels": {CLAIMED_BY_LABEL: claim.name},
            "ownerReferences": [{
                "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "name": claim.name, "uid": claim.uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        }});
        let updated = self
            .cluster
            .patch(Resource::Sandbox, &claim.namespace, &offer.member, patch)
            .await?;
        self.cache
            .apply_adoption(&updated, &ObjectRef::new(&claim.namespace, &claim.name));
        Ok(())
    }

    /// Sets a Sandbox's `spec.desiredState` over the version read (a claim's, carried to its
    /// member).
    pub(crate) async fn set_desired_state(
        &self,
        object: &SandboxObject,
        state: DesiredState,
    ) -> ApiResult<()> {
        let s = &object.sandbox;
        let patch = json!({
            "metadata": {"resourceVersion": object.resource_version},
            "spec": {"desiredState": sandbox::desired_state_name(state)},
        });
        let updated = self
            .cluster
            .patch(Resource::Sandbox, &s.namespace, &s.name, patch)
            .await?;
        self.remember(Resource::Sandbox, &updated);
        Ok(())
    }

    /// Creates a pool member from the manifest the core admitted (`containment::pools::member`), and
    /// counts it the pool's until the pool's record (written with its status) holds it. A name
    /// taken already is not the pool's: whoever made it, the controller did not just now.
    /// Creates the member `object` (named `name`) of `pool`; `Ok(false)` when another Sandbox
    /// holds the name, which is then listed to the policy as taken
    /// ([`CacheWriter::occupy_member_name`](super::cache::CacheWriter::occupy_member_name)). AlreadyExists is this process's own earlier create of
    /// that name, not yet shown by the watch (the policy names members deterministically),
    /// unless neither this process nor the pool's record made it.
    pub(crate) async fn create_member(
        &self,
        pool: &ObjectRef,
        name: &str,
        object: Value,
    ) -> ApiResult<bool> {
        if self.cache.name_held_by_other(pool, name) {
            self.cache.occupy_member_name(pool, name);
            return Ok(false);
        }
        match self
            .cluster
            .create(Resource::Sandbox, &pool.namespace, object)
            .await
        {
            Ok(created) => {
                self.cache
                    .apply(Resource::Sandbox, WatchEventType::Added, &created);
                let meta = cubepod_policy_host::model::meta::Meta::read(&created);
                if !meta.uid.is_empty() {
                    self.cache.record_created(pool, &meta.name, &meta.uid);
                }
                Ok(true)
            }
            Err(error) if error.is(ApiErrorKind::AlreadyExists) => {
                let ours = self.cache.owns_member_name(pool, name);
                if !ours {
                    self.cache.occupy_member_name(pool, name);
                }
                Ok(ours)
            }
            Err(error) => Err(error),
        }
    }

    pub(crate) async fn delete_member(&self, pool: &ObjectRef, name: &str) -> ApiResult<()> {
        match self
            .cluster
            .delete(Resource::Sandbox, &pool.namespace, name)
            .await
        {
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            other => other,
        }
    }

    /// `spec.desiredState: Paused` for a sandbox whose shutdown time passed with
    /// `shutdownPolicy: Pause`, over the version the reaper's decision saw; its next
    /// reconcile pauses it. A pause is for good because nothing sets it back but the user.
    pub(crate) async fn pause_for_good(&self, target: &ObjectRef, version: &str) -> ApiResult<()> {
        let patch = json!({
            "metadata": {"resourceVersion": version},
            "spec": {"desiredState": "Paused"},
        });
        match self
            .cluster
            .patch(Resource::Sandbox, &target.namespace, &target.name, patch)
            .await
        {
            Ok(updated) => {
                self.remember(Resource::Sandbox, &updated);
                Ok(())
            }
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Deletes a sandbox whose shutdown time passed with `shutdownPolicy: Delete`, if it is
    /// still at the version the reaper's decision saw (a Conflict otherwise, as a conditional
    /// patch would answer): the finalizer's cleanup then deletes its children. The delete
    /// itself takes no precondition here, so a write between the read and the delete is the
    /// one window left; the read makes it a request's length, not a tick's.
    pub(crate) async fn delete_if_unchanged(
        &self,
        target: &ObjectRef,
        version: &str,
    ) -> ApiResult<()> {
        let current = match self
            .cluster
            .get(Resource::Sandbox, &target.namespace, &target.name)
            .await
        {
            Ok(current) => current,
            Err(error) if error.is(ApiErrorKind::NotFound) => return Ok(()),
            Err(error) => return Err(error),
        };
        let meta = cubepod_policy_host::model::meta::Meta::read(&current);
        if meta.resource_version != version {
            return Err(ApiError::new(
                ApiErrorKind::Conflict,
                format!(
                    "Sandbox {target} moved on from version {version} to {} since the reaper \
                 decided",
                    meta.resource_version
                ),
            ));
        }
        match self
            .cluster
            .delete(Resource::Sandbox, &target.namespace, &target.name)
            .await
        {
            Err(error) if error.is(ApiErrorKind::NotFound) => Ok(()),
            other => other,
        }
    }

    /// One Event of the controller's own about an object, posted whatever its type.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn post_controller_event(
        &self,
        kind: &str,
        target: &ObjectRef,
        uid: &str,
        event_type: EventType,
        reason: &str,
        message: String,
        now: i64,
    ) {
        let event = Event {
            kind: event_type,
            reason: reason.to_string(),
            message,
        };
        self.post_events(&Posting::by_controller(kind, target, uid, &[event], now))
            .await;
    }

    /// [`Recorder::post`] through this writer's cluster.
    pub(crate) async fn post_events(&self, posting: &Posting<'_>) {
        self.events.post(self.cluster, posting).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_apiserver::{MemoryCluster, MemoryClusterConfig};
    use cubepod_kube::{BoxFuture, ObjectList, Scope, WatchEvent};
    use cubepod_policy_host::model::sandbox::StatusPatch;
    use cubepod_policy_host::runtime::bindings::{Condition, ConditionStatus, SandboxPhase};

    /// The record an own write leaves in the cache, made from the answer's metadata and what
    /// was written, is the record of the object read whole: otherwise the echo, which is
    /// skipped as the write's own, would leave the cache holding something the API does not.
    #[tokio::test]
    async fn an_own_writes_record_is_the_object_read_whole() {
        let cluster = MemoryCluster::new(MemoryClusterConfig::instant());
        let cache = CacheWriter::default();
        let created = cluster
            .create(
                Resource::Sandbox,
                "ns",
                json!({
                    "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                    "metadata": {"name": "a", "namespace": "ns",
                                 "labels": {"team": "ml"},
                                 "annotations": {"cubepod.io/last-activity": "2026-01-01T00:00:00Z"}},
                    "spec": {"image": "img", "idleTimeoutSeconds": 60},
                }),
            )
            .await
            .unwrap();
        cache.apply(Resource::Sandbox, WatchEventType::Added, &created);
        let key = ObjectRef::new("ns", "a");
        let recorder = Recorder::default();
        let writer = Writer {
            cluster: &*cluster,
            cache: &cache,
            events: &recorder,
        };
        let whole = async || {
            let object = cluster.get(Resource::Sandbox, "ns", "a").await.unwrap();
            sandbox::from_json(&object).unwrap()
        };

        let fresh = cache.sandbox(&key).unwrap();
        assert_eq!(
            writer.add_finalizer(&fresh).await.unwrap(),
            Finalizing::Present
        );
        let finalized = cache.sandbox(&key).unwrap();
        assert_ne!(finalized.resource_version, fresh.resource_version);
        assert!(finalized.has_finalizer());
        assert_eq!(finalized, whole().await);

        let mut status = finalized.sandbox.status.clone();
        status.phase = SandboxPhase::Running;
        status.pod_ip = Some("10.0.0.7".into());
        status.started_at = Some(1_767_225_660);
        status.conditions.push(Condition {
            kind: "Ready".into(),
            status: ConditionStatus::True,
            reason: String::new(),
            message: "up".into(),
            last_transition_time: 1_767_225_661,
        });
        let mut patch = StatusPatch::new(&status, finalized.sandbox.generation);
        let written = patch.read_back();
        let mark = patch.mark_first_ready(1_767_225_662);
        assert_eq!(mark, Some(1_767_225_662));
        writer
            .write_sandbox_status(&finalized, &patch, &written, mark)
            .await
            .unwrap();
        let running = cache.sandbox(&key).unwrap();
        assert_eq!(running.sandbox.status, written);
        assert_eq!(running.first_ready_at, Some(1_767_225_662));
        assert_eq!(running, whole().await);

        // A later status leaves the first-ready mark where it was, as the merge patch does.
        status.phase = SandboxPhase::Paused;
        let patch = StatusPatch::new(&status, running.sandbox.generation);
        let written = patch.read_back();
        writer
            .write_sandbox_status(&running, &patch, &written, None)
            .await
            .unwrap();
        let paused = cache.sandbox(&key).unwrap();
        assert_eq!(paused.first_ready_at, Some(1_767_225_662));
        assert_eq!(paused, whole().await);

        // Written over a version the API has moved on from: a Conflict, and the cache keeps
        // what it held.
        let stale = writer
            .write_sandbox_status(&running, &StatusPatch::new(&status, 1), &written, None)
            .await
            .unwrap_err();
        assert!(stale.is(ApiErrorKind::Conflict), "{stale}");
        assert_eq!(cache.sandbox(&key).unwrap(), paused);
    }

    /// The API as seen through a mutating webhook that rewrites a Sandbox's spec on every
    /// write of it: the answer to a write is of another generation than the one written over.
    struct Rewriting(std::sync::Arc<MemoryCluster>);

    impl Cluster for Rewriting {
        fn create(&self, r: Resource, ns: &str, o: Value) -> BoxFuture<'_, ApiResult<Value>> {
            self.0.create(r, ns, o)
        }
        fn get(&self, r: Resource, ns: &str, n: &str) -> BoxFuture<'_, ApiResult<Value>> {
            self.0.get(r, ns, n)
        }
        fn delete(&self, r: Resource, ns: &str, n: &str) -> BoxFuture<'_, ApiResult<()>> {
            self.0.delete(r, ns, n)
        }
        fn patch(
            &self,
            r: Resource,
            ns: &str,
            n: &str,
            p: Value,
        ) -> BoxFuture<'_, ApiResult<Value>> {
            let (ns, n) = (ns.to_string(), n.to_string());
            Box::pin(async move {
                self.0.patch(r, &ns, &n, p).await?;
                let rewrite = json!({"spec": {"image": "rewritten"}});
                self.0.patch(r, &ns, &n, rewrite).await
            })
        }
        fn patch_status(
            &self,
            r: Resource,
            ns: &str,
            n: &str,
            p: Value,
        ) -> BoxFuture<'_, ApiResult<Value>> {
            self.0.patch_status(r, ns, n, p)
        }
        fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
            self.0.list(scope)
        }
        fn watch(
            &self,
            scope: &Scope,
            version: &str,
        ) -> BoxFuture<'_, ApiResult<tokio::sync::mpsc::Receiver<ApiResult<WatchEvent>>>> {
            self.0.watch(scope, version)
        }
    }

    /// A write whose answer says the spec was rewritten on the way: the object is read whole,
    /// and the cache holds what the API holds, the rewritten spec with it.
    #[tokio::test]
    async fn a_write_whose_spec_was_rewritten_on_the_way_is_read_whole() {
        let memory = MemoryCluster::new(MemoryClusterConfig::instant());
        let cache = CacheWriter::default();
        let created = memory
            .create(
                Resource::Sandbox,
                "ns",
                json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                       "metadata": {"name": "a", "namespace": "ns"},
                       "spec": {"image": "img"}}),
            )
            .await
            .unwrap();
        cache.apply(Resource::Sandbox, WatchEventType::Added, &created);
        let key = ObjectRef::new("ns", "a");
        let cluster = Rewriting(memory.clone());
        let recorder = Recorder::default();
        let writer = Writer {
            cluster: &cluster,
            cache: &cache,
            events: &recorder,
        };
        let fresh = cache.sandbox(&key).unwrap();
        assert_eq!(
            writer.add_finalizer(&fresh).await.unwrap(),
            Finalizing::Present
        );
        let read = cache.sandbox(&key).unwrap();
        assert_eq!(read.sandbox.spec.image, "rewritten");
        assert!(read.has_finalizer());
        let whole = memory.get(Resource::Sandbox, "ns", "a").await.unwrap();
        assert_eq!(read, sandbox::from_json(&whole).unwrap());
    }

    /// An answer whose generation is not the one written over (the server changed the spec on
    /// the way) makes no record: the writer reads the object whole instead.
    #[test]
    fn an_answer_of_another_generation_makes_no_record() {
        let object = json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 1,
                         "resourceVersion": "5"},
            "spec": {"image": "img"},
        });
        let base = sandbox::from_json(&object).unwrap();
        let answer = |generation: i64, version: &str| {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": {"name": "a", "namespace": "ns", "uid": "u",
                                "generation": generation, "resourceVersion": version,
                                "finalizers": [FINALIZER]}})
        };
        let read = sandbox::after_own_write(&answer(1, "6"), &base, None).unwrap();
        assert_eq!(read.resource_version, "6");
        assert!(read.has_finalizer());
        assert_eq!(read.sandbox.spec, base.sandbox.spec);
        assert_eq!(sandbox::after_own_write(&answer(2, "6"), &base, None), None);
    }
}
