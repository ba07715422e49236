//! A reflector keeps the cache in step with one scope of the cluster: list, then watch from the
//! list's resourceVersion; when a watch ends, resume from the last version seen; on 410 Gone,
//! list again; on errors, back off. No change is lost across any of these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::cache::Cache;
use super::queue::{Backoff, WorkQueue};
use crate::kube::{ApiErrorKind, Cluster, PageRequest, Resource, Scope, WatchEventType};
use crate::model::meta::Meta;

/// What the controller watches in one namespace: our resources, and the children of every
/// sandbox by label.
pub fn scopes(namespace: &str) -> Vec<Scope> {
    let children = Some(crate::model::children::selector());
    [
        (Resource::Sandbox, None),
        (Resource::PodWarmPool, None),
        (Resource::Pod, children.clone()),
        (Resource::PersistentVolumeClaim, children.clone()),
        (Resource::Secret, children),
    ]
    .into_iter()
    .map(|(resource, label_selector)| Scope {
        resource,
        namespace: namespace.to_string(),
        label_selector,
    })
    .collect()
}

/// Items per list page, as client-go's reflectors ask for.
pub const LIST_PAGE_SIZE: u32 = 500;

pub struct Reflector {
    pub cluster: Arc<dyn Cluster>,
    pub scope: Scope,
    pub cache: Arc<Cache>,
    pub queue: Arc<WorkQueue>,
    /// Set once the first list is in the cache.
    pub synced: Arc<AtomicBool>,
}

impl Reflector {
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let backoff = Backoff {
            base: Duration::from_millis(200),
            max: Duration::from_secs(30),
        };
        let mut failures = 0u32;
        let resource = self.scope.resource;
        let namespace = self.scope.namespace.clone();
        'relist: loop {
            if *shutdown.borrow() {
                return;
            }
            // Page by page, each applied and dropped before the next: the controller's
            // memory then peaks at one page, not at the whole list.
            let mut relist = Cache::begin_relist(resource, &namespace);
            let mut page = PageRequest {
                limit: LIST_PAGE_SIZE,
                continue_token: None,
            };
            let mut snapshot: Option<String> = None;
            loop {
                let list = match self.cluster.list_page(&self.scope, &page).await {
                    Ok(list) => list,
                    Err(error) => {
                        failures += 1;
                        let delay = backoff.delay(failures);
                        tracing::warn!(%resource, %namespace, %error, ?delay, "list failed; retrying");
                        if sleep_or_shutdown(delay, &mut shutdown).await {
                            return;
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
            self.synced.store(true, Ordering::Release);
            let mut version = snapshot.unwrap_or_default();
            loop {
                let mut events = match self.cluster.watch(&self.scope, &version).await {
                    Ok(events) => events,
                    Err(error) if error.is(ApiErrorKind::Gone) => continue 'relist,
                    Err(error) => {
                        failures += 1;
                        let delay = backoff.delay(failures);
                        tracing::warn!(%resource, %namespace, %error, ?delay, "watch failed; retrying");
                        if sleep_or_shutdown(delay, &mut shutdown).await {
                            return;
                        }
                        continue;
                    }
                };
                failures = 0;
                loop {
                    let item = tokio::select! {
                        item = events.recv() => item,
                        _ = shutdown.changed() => return,
                    };
                    match item {
                        // The server ended the watch: resume from the last version seen, or
                        // list again when there is none to resume from ("" or "0" would mean
                        // "from now" and lose what changed meanwhile).
                        None if version.is_empty() || version == "0" => continue 'relist,
                        None => break,
                        Some(Err(error)) if error.is(ApiErrorKind::Gone) => {
                            tracing::info!(%resource, %namespace, "watch expired (410 Gone); listing again");
                            continue 'relist;
                        }
                        Some(Err(error)) => {
                            tracing::warn!(%resource, %namespace, %error, "watch error; resuming");
                            break;
                        }
                        Some(Ok(event)) => {
                            let seen = Meta::read(&event.object).resource_version;
                            if !seen.is_empty() {
                                version = seen;
                            }
                            if event.kind == WatchEventType::Bookmark {
                                continue;
                            }
                            for key in self.cache.apply(resource, event.kind, &event.object) {
                                self.queue.add(key);
                            }
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
