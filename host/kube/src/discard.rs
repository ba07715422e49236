//! [`Discarding`]: a cluster that answers every request at once and keeps nothing. A rollout's
//! shadow runs its candidate against one (what the candidate would write is compared, never
//! made), and the decision benchmark measures a policy against one, with no API behind it.

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{
    ApiError, ApiResult, BoxFuture, Cluster, FastPath, ObjectList, Resource, Scope, WatchEvent,
};

/// The answer to a create or a patch.
type Answer<'a> = BoxFuture<'a, ApiResult<Value>>;

/// A create or a patch is answered with what was sent, passed through [`Discarding::answering`]'s
/// function; a delete succeeds; nothing can be read back (a get is NotFound, a list is empty);
/// a watch ends at once, since nothing ever changes.
#[derive(Clone, Copy, Debug)]
pub struct Discarding {
    answer: fn(Resource, Value) -> Value,
    text_unread: bool,
}

impl Discarding {
    /// Answers a write with the object or the patch as sent.
    pub const fn new() -> Self {
        Self::answering(|_, sent| sent)
    }

    /// Answers a write with `answer` of the resource and the object or patch sent: what an API
    /// server would add to a stored object, for a caller that reads its answer.
    pub const fn answering(answer: fn(Resource, Value) -> Value) -> Self {
        Self {
            answer,
            text_unread: false,
        }
    }

    /// With a fast path that answers a manifest sent as text with an empty object, unread (as an
    /// API server's answer costs its client the same whatever was sent); without it, the text is
    /// parsed and created as any other object.
    pub const fn with_text_unread(self) -> Self {
        Self {
            text_unread: true,
            ..self
        }
    }

    fn answered(&self, resource: Resource, sent: Value) -> Answer<'_> {
        let answer = (self.answer)(resource, sent);
        Box::pin(async move { Ok(answer) })
    }
}

impl Default for Discarding {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster for Discarding {
    fn create(&self, r: Resource, _: &str, object: Value) -> Answer<'_> {
        self.answered(r, object)
    }
    fn get(&self, r: Resource, ns: &str, name: &str) -> Answer<'_> {
        let missing = ApiError::not_found(r, ns, name);
        Box::pin(async move { Err(missing) })
    }
    fn delete(&self, _: Resource, _: &str, _: &str) -> BoxFuture<'_, ApiResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn patch(&self, r: Resource, _: &str, _: &str, p: Value) -> Answer<'_> {
        self.answered(r, p)
    }
    fn patch_status(&self, r: Resource, ns: &str, n: &str, p: Value) -> Answer<'_> {
        self.patch(r, ns, n, p)
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
        self.text_unread.then_some(self as &dyn FastPath)
    }
}

/// A manifest sent as text is answered unread; the other calls take their semantic path.
impl FastPath for Discarding {
    fn create_text(&self, _: Resource, _: &str, _: String) -> Answer<'_> {
        Box::pin(async { Ok(Value::Object(Map::new())) })
    }
}
