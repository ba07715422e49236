//! A reflector keeps the cache in step with one scope of the cluster: list, then watch from the
//! list's resourceVersion; when a watch ends, resume from the last version seen; on 410 Gone,
//! list again; on errors, back off. No change is lost across any of these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::cache::{CacheWriter, Echoes};
use super::queue::{Backoff, WorkQueue};
use cubepod_kube::{
    ApiErrorKind, Cluster, PageRequest, Resource, Scope, WatchEventType, fast_path,
};
use cubepod_policy_host::model::meta::MetaView;

/// What the controller watches in one namespace: our resources, and the children of every
/// sandbox by label.
pub fn scopes(namespace: &str) -> Vec<Scope> {
    let children = cubepod_policy_host::model::children::selector();
    [(Resource::Sandbox, None), (Resource::PodWarmPool, None)]
        .into_iter()
        .chain(Resource::children().map(|child| (child, Some(children.clone()))))
        .map(|(resource, label_selector)| Scope {
            resource,
            namespace: namespace.to_string(),
            label_selector,
        })
        .collect()
}

/// Items per list page, as client-go's reflectors ask for.
pub(crate) const LIST_PAGE_SIZE: u32 = 500;

/// A watch that ends sooner than this without an event is taken as refused, not as done.
const QUICK_END: Duration = Duration::from_secs(1);

pub(crate) struct Reflector {
    pub(crate) cluster: Arc<dyn Cluster>,
    pub(crate) scope: Scope,
    pub(crate) cache: CacheWriter,
    pub(crate) queue: Arc<WorkQueue>,
    /// Set once the first list is in the cache.
    pub(crate) synced: Arc<AtomicBool>,
}

/// Why a watch phase ended.
enum WatchEnd {
    /// The watch cannot be resumed (410 Gone, or no version to resume from): list again.
    Relist,
    Shutdown,
}

const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(200),
    max: Duration::from_secs(30),
};

impl Reflector {
    /// Lists, then watches from the list's version, until shutdown; lists again whenever the
    /// watch cannot be resumed.
    pub(crate) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut failures = 0u32;
        loop {
            let Some(version) = self.list(&mut failures, &mut shutdown).await else {
                return;
            };
            self.synced.store(true, Ordering::Release);
            match self.watch(version, &mut failures, &mut shutdown).await {
                WatchEnd::Relist => continue,
                WatchEnd::Shutdown => return,
            }
        }
    }

    /// The list phase: every page into the cache, retried with backoff until it succeeds.
    /// Returns the version to watch from, or `None` on shutdown.
    async fn list(
        &self,
        failures: &mut u32,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<String> {
        let resource = self.scope.resource;
        let namespace = self.scope.namespace.as_str();
        'relist: loop {
            if *shutdown.borrow() {
                return None;
            }
            // Page by page, each applied and dropped before the next: the controller's
            // memory then peaks at one page, not at the whole list.
            let mut relist = CacheWriter::begin_relist(resource, namespace);
            let mut page = PageRequest {
                limit: LIST_PAGE_SIZE,
                continue_token: None,
            };
            let mut snapshot: Option<String> = None;
            loop {
                // Each batch of items into the cache as it is read: a server that ignores
                // `limit` sends the whole list as one page, which is then never held whole.
                let (cache, queue) = (&self.cache, &self.queue);
                let relisting = &mut relist;
                let mut each = |items: Vec<serde_json::Value>| {
                    for key in cache.relist_page(relisting, &items) {
                        queue.add(key);
                    }
                };
                let listed = self
                    .cluster
                    .list_page_each(&self.scope, &page, &mut each)
                    .await;
                let list = match listed {
                    Ok(list) => list,
                    Err(error) => {
                        *failures += 1;
                        let delay = BACKOFF.delay(*failures);
                        tracing::warn!(%resource, %namespace, %error, ?delay, "list failed; retrying");
                        if sleep_or_shutdown(delay, shutdown).await {
                            return None;
                        }
                        continue 'relist;
                    }
                };
                // Every page is of the first page's snapshot: watch from its version.
                snapshot.get_or_insert(list.resource_version);
                for key in self.cache.relist_page(&mut relist, &list.items) {
                    self.queue.add(key);
                }
                match list.continue_token {
                    Some(token) => page.continue_token = Some(token),
                    None => break,
                }
            }
            for key in self.cache.finish_relist(relist) {
                self.queue.add(key);
            }
            return Some(snapshot.unwrap_or_default());
        }
    }

    /// The watch phase: from `version`, resumed from the last version seen whenever a watch
    /// ends, until it cannot be resumed.
    async fn watch(
        &self,
        mut version: String,
        failures: &mut u32,
        shutdown: &mut watch::Receiver<bool>,
    ) -> WatchEnd {
        let resource = self.scope.resource;
        let namespace = self.scope.namespace.as_str();
        loop {
            let echoes = Arc::new(Echoes {
                resource,
                cache: self.cache.clone(),
                queue: self.queue.clone(),
            });
            let watching =
                fast_path::watch_skipping_echoes(&*self.cluster, &self.scope, &version, echoes);
            let mut events = match watching.await {
                Ok(events) => events,
                Err(error) if error.is(ApiErrorKind::Gone) => return WatchEnd::Relist,
                Err(error) => {
                    *failures += 1;
                    let delay = BACKOFF.delay(*failures);
                    tracing::warn!(%resource, %namespace, %error, ?delay, "watch failed; retrying");
                    if sleep_or_shutdown(delay, shutdown).await {
                        return WatchEnd::Shutdown;
                    }
                    continue;
                }
            };
            *failures = 0;
            let opened = Instant::now();
            let mut delivered = false;
            loop {
                let item = tokio::select! {
                    item = events.recv() => item,
                    _ = shutdown.changed() => return WatchEnd::Shutdown,
                };
                if item.is_none() && !delivered && opened.elapsed() < QUICK_END {
                    // A watch that ends at once with nothing in it, over and over, would be a
                    // storm of requests: pause before the next one.
                    if sleep_or_shutdown(BACKOFF.base, shutdown).await {
                        return WatchEnd::Shutdown;
                    }
                }
                match item {
                    // The server ended the watch: resume from the last version seen, or list
                    // again when there is none to resume from ("" or "0" would mean "from now"
                    // and lose what changed meanwhile).
                    None if version.is_empty() || version == "0" => return WatchEnd::Relist,
                    None => break,
                    Some(Err(error)) if error.is(ApiErrorKind::Gone) => {
                        tracing::info!(%resource, %namespace, "watch expired (410 Gone); listing again");
                        return WatchEnd::Relist;
                    }
                    Some(Err(error)) => {
                        tracing::warn!(%resource, %namespace, %error, "watch error; resuming");
                        break;
                    }
                    Some(Ok(event)) => {
                        delivered = true;
                        let seen = MetaView::of(&event.object).resource_version;
                        if !seen.is_empty() {
                            version = seen.to_string();
                        }
                        if event.kind == WatchEventType::Bookmark {
                            continue;
                        }
                        for key in self.cache.apply(resource, event.kind, &event.object) {
                            self.queue.add_woken(key);
                        }
                    }
                }
            }
        }
    }
}

/// Sleeps; true when shutdown came first.
async fn sleep_or_shutdown(delay: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_kube::ObjectList;
    use cubepod_kube::testing::{Reply, StubCluster};

    #[tokio::test]
    async fn a_watch_that_ends_at_once_is_not_reopened_in_a_loop() {
        // A server whose watches end at once with nothing in them. It serves nothing else: a
        // reflector only lists and watches.
        let cluster = Arc::new(
            StubCluster::new(Reply::Refuse("not served")).listing(ObjectList {
                resource_version: "7".into(),
                ..ObjectList::default()
            }),
        );
        let reflector = Reflector {
            cluster: cluster.clone(),
            scope: scopes("ns").remove(0),
            cache: CacheWriter::default(),
            queue: WorkQueue::new(Backoff::default(), Arc::new(crate::metrics::Metrics::new())),
            synced: Arc::new(AtomicBool::new(false)),
        };
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(reflector.run(shutdown));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = stop.send(true);
        let _ = task.await;
        let requests = cluster.requests().len();
        // One list, then a watch every pause (200 ms): a handful, not thousands.
        assert!(
            (2..=12).contains(&requests),
            "{requests} requests in a second"
        );
    }
}
