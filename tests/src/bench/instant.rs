//! [`InstantCluster`]: a cluster that answers every request at once and keeps nothing, for
//! measuring a policy's decisions without an API behind them.

use serde_json::Value;
use tokio::sync::mpsc;

use cubepod_kube::{
    ApiError, ApiResult, BoxFuture, Cluster, FastPath, ObjectList, Resource, Scope, WatchEvent,
};

/// A create returns the object (one sent as text: an empty object, unread, as an API server's
/// answer costs its client the same before and after), a delete succeeds, nothing can be read
/// back, lists are empty and watches end at once.
pub struct InstantCluster;

impl Cluster for InstantCluster {
    fn create(&self, _: Resource, _: &str, object: Value) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async move { Ok(object) })
    }

    fn get(&self, resource: Resource, ns: &str, name: &str) -> BoxFuture<'_, ApiResult<Value>> {
        let missing = ApiError::not_found(resource, ns, name);
        Box::pin(async move { Err(missing) })
    }

    fn delete(&self, _: Resource, _: &str, _: &str) -> BoxFuture<'_, ApiResult<()>> {
        Box::pin(async { Ok(()) })
    }

    fn patch(&self, _: Resource, _: &str, _: &str, p: Value) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async move { Ok(p) })
    }

    fn patch_status(
        &self,
        _: Resource,
        _: &str,
        _: &str,
        p: Value,
    ) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async move { Ok(p) })
    }

    fn list(&self, _: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        Box::pin(async { Ok(ObjectList::default()) })
    }

    fn watch(
        &self,
        _: &Scope,
        _: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        // The sender is dropped here: the stream is closed from the start.
        let (_, events) = mpsc::channel(1);
        Box::pin(async move { Ok(events) })
    }

    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }
}

/// A manifest sent as text is answered unread; the other calls take their semantic path.
impl FastPath for InstantCluster {
    fn create_text(&self, _: Resource, _: &str, _: String) -> BoxFuture<'_, ApiResult<Value>> {
        Box::pin(async { Ok(Value::Object(serde_json::Map::new())) })
    }
}
