//! A [`Cluster`] that counts and times every request, the policy's and the controller's alike.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use cubepod_kube::{
    ApiResult, BoxFuture, Cluster, EchoFilter, ObjectList, PageRequest, Resource, Scope, WatchEvent,
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
    fn create_text(
        &self,
        resource: Resource,
        namespace: &str,
        manifest: String,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        self.observe(
            "create",
            resource,
            self.inner.create_text(resource, namespace, manifest),
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
            self.inner
                .patch_for_metadata(resource, namespace, name, patch, status),
        )
    }
    fn list(&self, scope: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        self.observe("list", scope.resource, self.inner.list(scope))
    }
    fn list_page(&self, scope: &Scope, page: &PageRequest) -> BoxFuture<'_, ApiResult<ObjectList>> {
        self.observe("list", scope.resource, self.inner.list_page(scope, page))
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
    fn watch_skipping_echoes(
        &self,
        scope: &Scope,
        resource_version: &str,
        echoes: Arc<dyn EchoFilter>,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        self.observe(
            "watch",
            scope.resource,
            self.inner
                .watch_skipping_echoes(scope, resource_version, echoes),
        )
    }
}
