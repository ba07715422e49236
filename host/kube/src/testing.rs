//! [`StubCluster`]: the [`Cluster`] a test configures to answer as it needs (refusing, never
//! answering, or keeping nothing), which notes every request it is sent. Behind the `testing`
//! feature, which the workspace's dev-dependencies enable.

use std::sync::{Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::discard::Discarding;
use crate::{
    ApiError, ApiErrorKind, ApiResult, BoxFuture, Cluster, FastPath, ObjectList, Resource, Scope,
    WatchEvent,
};

/// The answer to a create, a get or a patch.
type Answer<'a> = BoxFuture<'a, ApiResult<Value>>;

/// How a [`StubCluster`] answers a request it is not configured otherwise for.
#[derive(Clone, Copy, Debug)]
pub enum Reply {
    /// Fails with [`ApiErrorKind::Other`] and this message.
    Refuse(&'static str),
    /// Never answers: the future stays pending.
    Never,
    /// As [`Discarding::new`]: a write is answered with what was sent, nothing is kept.
    Discard,
}

/// A cluster for tests: each request is noted (`create pods ns`, `patch sandboxes ns/a`,
/// `create_text pods ns {manifest}`), then answered by its [`Reply`], or by what
/// [`StubCluster::listing`] and [`StubCluster::taking_text`] configure.
#[derive(Debug)]
pub struct StubCluster {
    reply: Reply,
    listed: Option<ObjectList>,
    takes_text: bool,
    requests: Mutex<Vec<String>>,
}

static DISCARDING: Discarding = Discarding::new();

impl StubCluster {
    /// A stub that answers every request by `reply`.
    pub fn new(reply: Reply) -> Self {
        Self {
            reply,
            listed: None,
            takes_text: false,
            requests: Mutex::default(),
        }
    }

    /// Lists answer `list`, and a watch ends at once (its stream closed from the start),
    /// whatever the [`Reply`].
    pub fn listing(self, list: ObjectList) -> Self {
        Self {
            listed: Some(list),
            ..self
        }
    }

    /// With a fast path whose [`FastPath::create_text`] takes the manifest (noted with its
    /// text) and answers `null`; its other calls take the semantic path.
    pub fn taking_text(self) -> Self {
        Self {
            takes_text: true,
            ..self
        }
    }

    /// Every request sent so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.noted().clone()
    }

    fn noted(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes `request`, then answers it by the [`Reply`] (`discarded`: as [`Discarding`]).
    fn reply<'a, T: Send + 'a>(
        &'a self,
        request: String,
        discarded: impl FnOnce(&'static Discarding) -> BoxFuture<'static, ApiResult<T>>,
    ) -> BoxFuture<'a, ApiResult<T>> {
        self.noted().push(request);
        match self.reply {
            Reply::Refuse(message) => {
                Box::pin(async move { Err(ApiError::new(ApiErrorKind::Other, message)) })
            }
            Reply::Never => Box::pin(std::future::pending()),
            Reply::Discard => discarded(&DISCARDING),
        }
    }
}

impl Cluster for StubCluster {
    fn create(&self, r: Resource, ns: &str, o: Value) -> Answer<'_> {
        self.reply(format!("create {r} {ns}"), |d| d.create(r, ns, o))
    }
    fn get(&self, r: Resource, ns: &str, n: &str) -> Answer<'_> {
        self.reply(format!("get {r} {ns}/{n}"), |d| d.get(r, ns, n))
    }
    fn delete(&self, r: Resource, ns: &str, n: &str) -> BoxFuture<'_, ApiResult<()>> {
        self.reply(format!("delete {r} {ns}/{n}"), |d| d.delete(r, ns, n))
    }
    fn patch(&self, r: Resource, ns: &str, n: &str, p: Value) -> Answer<'_> {
        self.reply(format!("patch {r} {ns}/{n}"), |d| d.patch(r, ns, n, p))
    }
    fn patch_status(&self, r: Resource, ns: &str, n: &str, p: Value) -> Answer<'_> {
        self.reply(format!("patch_status {r} {ns}/{n}"), |d| {
            d.patch_status(r, ns, n, p)
        })
    }
    fn list(&self, s: &Scope) -> BoxFuture<'_, ApiResult<ObjectList>> {
        let request = format!("list {} {}", s.resource, s.namespace);
        match &self.listed {
            Some(list) => {
                self.noted().push(request);
                let list = list.clone();
                Box::pin(async move { Ok(list) })
            }
            None => self.reply(request, |d| d.list(s)),
        }
    }
    fn watch(
        &self,
        s: &Scope,
        rv: &str,
    ) -> BoxFuture<'_, ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>>> {
        let request = format!("watch {} {}", s.resource, s.namespace);
        if self.listed.is_some() {
            self.noted().push(request);
            return DISCARDING.watch(s, rv);
        }
        self.reply(request, |d| d.watch(s, rv))
    }
    fn fast_path(&self) -> Option<&dyn FastPath> {
        self.takes_text.then_some(self as &dyn FastPath)
    }
}

/// [`StubCluster::taking_text`]'s fast path.
impl FastPath for StubCluster {
    fn create_text(&self, r: Resource, ns: &str, text: String) -> Answer<'_> {
        self.noted().push(format!("create_text {r} {ns} {text}"));
        Box::pin(async { Ok(Value::Null) })
    }
}
