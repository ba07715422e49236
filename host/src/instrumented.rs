//! A [`Cluster`] that counts and times every request, the policy's and the controller's alike.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use cubepod_kube::{
    ApiResult, BoxFuture, Cluster, EchoFilter, FastPath, ObjectList, PageRequest, Resource, Scope,
    WatchEvent, fast_path,
};

pub(crate) struct InstrumentedCluster {
    inner: Arc<dyn Cluster>,
    metrics: Arc<Metrics>,
}

impl InstrumentedCluster {
    pub(crate) fn new(inner: Arc<dyn Cluster>, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self { inner, metrics })
    }

    fn observe<'a, T: Send + 'a>(
        &'a self,
        verb: &'static str,
        resource: Resource,
        call: BoxFuture<'a, ApiResult<T>>,
    ) -> BoxFuture<'a, ApiResult<T>> {
        Box::pin(async move {
            let start = Instant::now();
            let result = call.await;
            let label = match &result {
                Ok(_) => "ok",
                Err(error) => error.kind.label(),
            };
            self.metrics
                .kube_requests
                .with_label_values(&[verb, resource.plural(), label])
                .inc();
            self.metrics
                .kube_request_duration
                .with_label_values(&[verb, resource.plural()])
                .observe(start.elapsed().as_secs_f64());
            result
        })
    }
}

impl Cluster for InstrumentedCluster {
    fn create(
        &self,
        resource: Resource,
        namespace: &str,
        object: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe(
            "create",
            resource,
            self.inner.create(resource, namespace, object),
        )
    }
    fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe("get", resource, self.inner.get(resource, namespace, name))
    }
    fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFuture<'_, ApiResult<()>> {
        self.observe(
            "delete",
            resource,
            self.inner.delete(resource, namespace, name),
        )
    }
    fn patch(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe(
            "patch",
            resource,
            self.inner.patch(resource, namespace, name, patch),
        )
    }
    fn patch_status(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe(
            "patch_status",
            resource,
            self.inner.patch_status(resource, namespace, name, patch),
        )
    }
    fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        self.observe("list", scope.resource, self.inner.list(scope))
    }
    fn list_page(&self, scope: &Scope, page: &PageRequest) -> BoxFuture<'_, ApiResult<ObjectList>> {
        self.observe("list", scope.resource, self.inner.list_page(scope, page))
    }
    fn list_page_each<'a>(
        &'a self,
        scope: &'a Scope,
        page: &'a PageRequest,
        each: &'a mut (dyn FnMut(Vec<Value>) + Send),
    ) -> BoxFuture<'a, ApiResult<ObjectList>> {
        self.observe(
            "list",
            scope.resource,
            self.inner.list_page_each(scope, page, each),
        )
    }
    fn watch(
        &self,
        scope: &Scope,
        resource_version: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        self.observe(
            "watch",
            scope.resource,
            self.inner.watch(scope, resource_version),
        )
    }
    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }
}

/// The inner cluster's fast path, counted as the calls it stands for.
impl FastPath for InstrumentedCluster {
    fn create_text(
        &self,
        resource: Resource,
        namespace: &str,
        manifest: String,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe(
            "create",
            resource,
            fast_path::create_text(&*self.inner, resource, namespace, manifest),
        )
    }
    fn patch_for_metadata(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        patch: String,
        status: bool,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe(
            if status { "patch_status" } else { "patch" },
            resource,
            fast_path::patch_for_metadata(&*self.inner, resource, namespace, name, patch, status),
        )
    }
    fn watch_skipping_echoes(
        &self,
        scope: &Scope,
        resource_version: &str,
        echoes: Arc<dyn EchoFilter>,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        self.observe(
            "watch",
            scope.resource,
            fast_path::watch_skipping_echoes(&*self.inner, scope, resource_version, echoes),
        )
    }
}

#[cfg(test)]
mod tests {
    use cubepod_kube::testing::{Reply, StubCluster};

    use super::*;

    /// Counted, the manifest still reaches the inner cluster as its text (a semantic create
    /// would be refused).
    #[tokio::test]
    async fn the_inner_fast_path_is_taken_and_counted() {
        let inner = Arc::new(StubCluster::new(Reply::Refuse("semantic")).taking_text());
        let metrics = Arc::new(Metrics::new());
        let cluster = InstrumentedCluster::new(inner.clone(), metrics.clone());
        let text = r#"{"metadata": {"name": "p"}}"#;
        fast_path::create_text(&*cluster, Resource::Pod, "ns", text.into())
            .await
            .expect("sent on the fast path");
        assert_eq!(inner.requests(), [format!("create_text pods ns {text}")]);
        let counted = metrics
            .kube_requests
            .with_label_values(&["create", "pods", "ok"])
            .get();
        assert_eq!(counted, 1);
    }
}
