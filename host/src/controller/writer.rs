//! The controller's own writes (the policy's go through `kube-client`): finalizers, status,
//! claims, pool members and Events. Each write's result goes straight into the cache, so the
//! next reconcile sees it even before the watch does and nothing is written twice.

use serde_json::{Value, json};

use super::cache::Cache;
use super::events::event_object;
use crate::kube::{ApiError, ApiErrorKind, ApiResult, Cluster, Resource, WatchEventType};
use crate::model::ObjectRef;
use crate::model::sandbox::{CLAIMED_BY_LABEL, FINALIZER, SandboxObject};
use crate::runtime::bindings::{Event, EventType, Sandbox};

/// What a finalizer write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalizing {
    /// The sandbox is still there, with its finalizers as written.
    Present,
    /// The sandbox no longer exists.
    Gone,
}

pub struct Writer<'a> {
    pub cluster: &'a dyn Cluster,
    pub cache: &'a Cache,
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
    pub async fn add_finalizer(&self, object: &SandboxObject) -> ApiResult<Finalizing> {
        let mut finalizers = object.finalizers.clone();
        finalizers.push(FINALIZER.to_string());
        self.set_finalizers(object, finalizers).await
    }

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
        let sandbox = &object.sandbox;
        let patch = json!({"metadata": {
            "resourceVersion": object.resource_version,
            "finalizers": finalizers,
        }});
        match self
            .cluster
            .patch(Resource::Sandbox, &sandbox.namespace, &sandbox.name, patch)
            .await
        {
            Ok(updated) => {
                // The last finalizer off an object being deleted deletes it: the response is
                // its final state, and keeping it in the cache would count a gone sandbox
                // until a relist if the watch's DELETED came first.
                let meta = crate::model::meta::Meta::read(&updated);
                if meta.deletion_timestamp.is_some() && meta.finalizers.is_empty() {
                    self.cache
                        .apply(Resource::Sandbox, WatchEventType::Deleted, &updated);
                    return Ok(Finalizing::Gone);
                }
                self.remember_own(Resource::Sandbox, &updated);
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
    pub async fn write_status(
        &self,
        resource: Resource,
        target: &ObjectRef,
        resource_version: Option<&str>,
        patch: Value,
    ) -> ApiResult<()> {
        self.patch_status(resource, target, resource_version, patch, true)
            .await
    }

    /// A status written for another reconcile to act on (the reaper's mark): its echo
    /// queues the object as any change does.
    pub async fn mark_status(
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

    /// Adopts a pool member for `claim`: labels it claimed and makes the claim its owner, on
    /// the member's version as read, so that two claims never take the same member.
    pub async fn claim_member(&self, claim: &Sandbox, member: &SandboxObject) -> ApiResult<()> {
        let patch = json!({"metadata": {
            "resourceVersion": member.resource_version,
            "labels": {CLAIMED_BY_LABEL: claim.name},
            "ownerReferences": [{
                "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "name": claim.name, "uid": claim.uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        }});
        let updated = self
            .cluster
            .patch(
                Resource::Sandbox,
                &member.sandbox.namespace,
                &member.sandbox.name,
                patch,
            )
            .await?;
        self.remember(Resource::Sandbox, &updated);
        Ok(())
    }

    /// Creates a pool member from the manifest the core admitted (`output_rules::member`).
    pub async fn create_member(&self, pool: &ObjectRef, object: Value) -> ApiResult<()> {
        match self
            .cluster
            .create(Resource::Sandbox, &pool.namespace, object)
            .await
        {
            Ok(created) => {
                self.cache
                    .apply(Resource::Sandbox, WatchEventType::Added, &created);
                Ok(())
            }
            Err(error) if error.is(ApiErrorKind::AlreadyExists) => Ok(()),
            Err(error) => Err(error),
        }
    }

    pub async fn delete_member(&self, pool: &ObjectRef, name: &str) -> ApiResult<()> {
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
    pub async fn pause_for_good(&self, target: &ObjectRef, version: &str) -> ApiResult<()> {
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
    pub async fn delete_if_unchanged(&self, target: &ObjectRef, version: &str) -> ApiResult<()> {
        let current = match self
            .cluster
            .get(Resource::Sandbox, &target.namespace, &target.name)
            .await
        {
            Ok(current) => current,
            Err(error) if error.is(ApiErrorKind::NotFound) => return Ok(()),
            Err(error) => return Err(error),
        };
        let meta = crate::model::meta::Meta::read(&current);
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

    /// Logs every Event in plain words and posts the Warnings, and the Normal ones when
    /// `post_normal` (each is an API write, and the status conditions already record every
    /// transition). A failure to post is logged, never fails the reconcile.
    pub async fn post_events(
        &self,
        kind: &str,
        target: &ObjectRef,
        uid: &str,
        events: &[Event],
        post_normal: bool,
        now: i64,
    ) {
        for event in events {
            tracing::info!(
                kind,
                namespace = %target.namespace,
                name = %target.name,
                reason = %event.reason,
                "{}",
                event.message
            );
            if event.kind == EventType::Normal && !post_normal {
                continue;
            }
            let object = event_object(kind, &target.namespace, &target.name, uid, event, now);
            if let Err(error) = self
                .cluster
                .create(Resource::Event, &target.namespace, object)
                .await
            {
                tracing::debug!(%error, "could not record an Event");
            }
        }
    }
}
