//! What a client may do faster than [`Cluster`]'s semantics ask, with the same outcome: send a
//! manifest's text as it is, ask a patch's answer for its metadata alone, drop a watch's echoes
//! of the watcher's own writes unread. [`Cluster`] is the API's semantics only; a client with a
//! faster way implements [`FastPath`] and hands it out from [`Cluster::fast_path`].
//!
//! Callers use the free functions of this module, which take any [`Cluster`]: the fast path
//! where the cluster has one, the semantic fallback (parse, then create, patch or watch)
//! where it has not. A wrapper around another cluster (one that counts requests, one that
//! injects faults) implements [`FastPath`] by calling these functions on the cluster it wraps,
//! so that the fast path of the inner one is still taken.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::{ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, Resource, Scope, WatchEvent};

/// Tells a watch which events it may drop unread: the echo of a write whose answer the watcher
/// already holds. Asked with the event's identity and version only, before the object is
/// decoded; `true` means the watcher has taken the event as seen (it forgets the write), and
/// the watch sends a bookmark of the version instead of the object.
pub trait EchoFilter: Send + Sync + 'static {
    /// Whether the event of the object at `resource_version` is the echo of a write the
    /// watcher made; `true` also forgets that write.
    fn take_echo(&self, namespace: &str, name: &str, resource_version: &str) -> bool;
}

/// The faster forms of [`Cluster`] calls a client offers. Each method has a default, the
/// semantic fallback over the cluster's own [`Cluster`] methods: an implementation overrides
/// the ones it makes faster.
pub trait FastPath: Cluster {
    /// Creates the object whose JSON text is `manifest`. A client that sends bytes sends these
    /// as they are (a policy's manifest is checked as text and never parsed into a `Value`
    /// only to be written out again); by default the text is parsed and created.
    fn create_text(
        &self,
        resource: Resource,
        namespace: &str,
        manifest: String,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        parse_then_create(self, resource, namespace, manifest)
    }

    /// [`Cluster::patch_status`] (`status`) or [`Cluster::patch`] of the merge patch whose JSON
    /// text is `patch`, for a caller that reads nothing of the answer but its `metadata`, since
    /// it knows the rest (its write was conditional on the version it holds): a client that
    /// sends bytes sends these as they are, and may ask the server for the metadata alone. By
    /// default the text is parsed and the answer is the whole object, whose metadata is the
    /// same.
    fn patch_for_metadata(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: String,
        status: bool,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        parse_then_patch(self, resource, namespace, name, patch, status)
    }

    /// [`Cluster::watch`], dropping the events `echoes` takes before they are decoded. By
    /// default `echoes` is not asked: the watcher's own check then sees the echo, with the same
    /// outcome.
    fn watch_skipping_echoes(
        &self,
        scope: &Scope,
        resource_version: &str,
        echoes: Arc<dyn EchoFilter>,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        let _ = echoes;
        self.watch(scope, resource_version)
    }
}

/// [`FastPath::create_text`] on `cluster`'s fast path, or its semantic fallback.
pub fn create_text<'a>(
    cluster: &'a dyn Cluster,
    resource: Resource,
    namespace: &str,
    manifest: String,
) -> BoxFuture<'a, ApiResult<Value>> {
    match cluster.fast_path() {
        Some(fast) => fast.create_text(resource, namespace, manifest),
        None => parse_then_create(cluster, resource, namespace, manifest),
    }
}

/// [`FastPath::patch_for_metadata`] on `cluster`'s fast path, or its semantic fallback.
pub fn patch_for_metadata<'a>(
    cluster: &'a dyn Cluster,
    resource: Resource,
    namespace: &str,
    name: &str,
    patch: String,
    status: bool,
) -> BoxFuture<'a, ApiResult<Value>> {
    match cluster.fast_path() {
        Some(fast) => fast.patch_for_metadata(resource, namespace, name, patch, status),
        None => parse_then_patch(cluster, resource, namespace, name, patch, status),
    }
}

/// [`FastPath::watch_skipping_echoes`] on `cluster`'s fast path, or a plain watch.
pub fn watch_skipping_echoes<'a>(
    cluster: &'a dyn Cluster,
    scope: &Scope,
    resource_version: &str,
    echoes: Arc<dyn EchoFilter>,
) -> BoxFuture<'a, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
    match cluster.fast_path() {
        Some(fast) => fast.watch_skipping_echoes(scope, resource_version, echoes),
        None => cluster.watch(scope, resource_version),
    }
}

/// The semantics of [`FastPath::create_text`]: the manifest parsed, then created.
fn parse_then_create<'a, C: Cluster + ?Sized>(
    cluster: &'a C,
    resource: Resource,
    namespace: &str,
    manifest: String,
) -> BoxFuture<'a, ApiResult<Value>> {
    let namespace = namespace.to_string();
    Box::pin(async move {
        let object = serde_json::from_str(&manifest).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Invalid,
                format!("the manifest is not JSON: {e}"),
            )
        })?;
        cluster.create(resource, &namespace, object).await
    })
}

/// The semantics of [`FastPath::patch_for_metadata`]: the patch parsed, then sent, the answer
/// whole.
fn parse_then_patch<'a, C: Cluster + ?Sized>(
    cluster: &'a C,
    resource: Resource,
    namespace: &str,
    name: &str,
    patch: String,
    status: bool,
) -> BoxFuture<'a, ApiResult<Value>> {
    let (namespace, name) = (namespace.to_string(), name.to_string());
    Box::pin(async move {
        let patch = serde_json::from_str(&patch).map_err(|e| {
            ApiError::new(ApiErrorKind::Invalid, format!("the patch is not JSON: {e}"))
        })?;
        if status {
            cluster
                .patch_status(resource, &namespace, &name, patch)
                .await
        } else {
            cluster.patch(resource, &namespace, &name, patch).await
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::{Reply, StubCluster};

    #[test]
    fn a_cluster_without_a_fast_path_is_sent_the_parsed_request() {
        let cluster = StubCluster::new(Reply::Discard);
        let run = futures_util::FutureExt::now_or_never;
        let created = run(create_text(
            &cluster,
            Resource::Pod,
            "ns",
            r#"{"metadata":{"name":"p"}}"#.into(),
        ))
        .expect("ready");
        assert_eq!(
            created.expect("created"),
            json!({"metadata": {"name": "p"}})
        );
        for status in [false, true] {
            let patched = run(patch_for_metadata(
                &cluster,
                Resource::Sandbox,
                "ns",
                "a",
                r#"{"status":{}}"#.into(),
                status,
            ))
            .expect("ready");
            assert_eq!(patched.expect("patched"), json!({"status": {}}));
        }
        assert_eq!(
            cluster.requests(),
            [
                "create pods ns",
                "patch sandboxes ns/a",
                "patch_status sandboxes ns/a"
            ]
        );
        let refused = run(create_text(&cluster, Resource::Pod, "ns", "{".into()))
            .expect("ready")
            .expect_err("not JSON");
        assert_eq!(refused.kind, ApiErrorKind::Invalid);
        assert_eq!(cluster.requests().len(), 3, "nothing sent");
    }
}
