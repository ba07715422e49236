//! Who the in-memory cluster knows and what they may do, for the TokenReviews and
//! SubjectAccessReviews it answers (served by `serve/reviews.rs`, asked in-process by the
//! embedded controller's `/metrics`): bearer tokens mapped to users, and grants of non-resource
//! URLs (`/metrics`) to users or groups, matched as RBAC matches `nonResourceURLs`, and grants
//! of a resource's verbs in one namespace (a Role bound to a subject: the router's
//! `sandboxes/proxy`). Members of
//! `system:masters` may do anything, as in Kubernetes. Nothing is known until it is registered:
//! the embedded cluster registers its own token as [`admin`], tests their scrapers.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use cubepod_kube::review::{
    AUTHENTICATED, Decision, NonResourceRequest, ResourceRequest, Reviewer, UserInfo,
};
use cubepod_kube::{ApiResult, BoxFuture};

/// The group Kubernetes allows everything.
pub(crate) const MASTERS: &str = "system:masters";

/// The user of the embedded cluster's own token: allowed everything.
pub fn admin() -> UserInfo {
    UserInfo::named("cubepod-embedded-admin", &[MASTERS, AUTHENTICATED])
}

/// Whom a grant is for: an RBAC subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// The user of this name.
    User(String),
    /// Every member of this group.
    Group(String),
}

impl Subject {
    fn covers(&self, user: &UserInfo) -> bool {
        match self {
            Subject::User(name) => *name == user.username,
            Subject::Group(group) => user.in_group(group),
        }
    }
}

/// An RBAC rule of `nonResourceURLs`: `*` matches any verb, a URL ending in `*` any path that
/// starts with what comes before it.
#[derive(Clone, Debug)]
struct Grant {
    subject: Subject,
    verbs: Vec<String>,
    urls: Vec<String>,
}

impl Grant {
    fn allows(&self, request: &NonResourceRequest) -> bool {
        self.subject.covers(&request.user)
            && self.verbs.iter().any(|v| v == "*" || *v == request.verb)
            && self.urls.iter().any(|url| match url.strip_suffix('*') {
                Some(prefix) => request.path.starts_with(prefix),
                None => *url == request.path,
            })
    }
}

/// An RBAC rule of a Role in `namespace`, bound to `subject`: `resources` as RBAC writes them
/// (`sandboxes/proxy` for a subresource), `*` matching any verb.
#[derive(Clone, Debug)]
struct ResourceGrant {
    subject: Subject,
    namespace: String,
    group: String,
    verbs: Vec<String>,
    resources: Vec<String>,
}

impl ResourceGrant {
    fn allows(&self, request: &ResourceRequest) -> bool {
        let resource = if request.subresource.is_empty() {
            request.resource.clone()
        } else {
            format!("{}/{}", request.resource, request.subresource)
        };
        self.subject.covers(&request.user)
            && self.namespace == request.namespace
            && self.group == request.group
            && self.verbs.iter().any(|v| v == "*" || *v == request.verb)
            && self.resources.contains(&resource)
    }
}

#[derive(Default)]
struct Known {
    tokens: HashMap<String, UserInfo>,
    grants: Vec<Grant>,
    resource_grants: Vec<ResourceGrant>,
}

/// The cluster's users and grants. Tokens are compared whole; none is ever logged or shown.
#[derive(Default)]
pub struct AccessControl {
    known: RwLock<Known>,
}

impl std::fmt::Debug for AccessControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("AccessControl")
            .field("tokens", &known.tokens.len())
            .field("grants", &known.grants)
            .finish()
    }
}

impl AccessControl {
    /// `token` authenticates as `user` (who is also in `system:authenticated`).
    pub fn add_token(&self, token: &str, mut user: UserInfo) {
        if !user.in_group(AUTHENTICATED) {
            user.groups.push(AUTHENTICATED.to_owned());
        }
        self.write().tokens.insert(token.to_owned(), user);
    }

    /// `token` authenticates no more.
    pub fn remove_token(&self, token: &str) {
        self.write().tokens.remove(token);
    }

    /// `subject` may use `verbs` on the non-resource `urls`.
    pub fn allow(&self, subject: Subject, verbs: &[&str], urls: &[&str]) {
        self.write().grants.push(Grant {
            subject,
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            urls: urls.iter().map(|u| (*u).to_owned()).collect(),
        });
    }

    /// `subject` may use `verbs` on `resources` (`sandboxes/proxy`) of API group `group` in
    /// `namespace`, as a Role there bound to it allows.
    pub fn allow_in_namespace(
        &self,
        subject: Subject,
        namespace: &str,
        group: &str,
        verbs: &[&str],
        resources: &[&str],
    ) {
        self.write().resource_grants.push(ResourceGrant {
            subject,
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            resources: resources.iter().map(|r| (*r).to_owned()).collect(),
        });
    }

    /// The token's user, if it is known.
    pub(crate) fn authenticate(&self, token: &str) -> Option<UserInfo> {
        if token.is_empty() {
            return None;
        }
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known.tokens.get(token).cloned()
    }

    pub(crate) fn authorize(&self, request: &NonResourceRequest) -> Decision {
        if request.user.in_group(MASTERS) {
            return Decision::Allow;
        }
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        if known.grants.iter().any(|grant| grant.allows(request)) {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: format!(
                    "no grant allows {} {} to {:?}",
                    request.verb, request.path, request.user.username
                ),
            }
        }
    }

    /// A request for a resource: allowed to `system:masters` and by the grants of
    /// [`AccessControl::allow_in_namespace`].
    pub(crate) fn authorize_resource(&self, request: &ResourceRequest) -> Decision {
        if request.user.in_group(MASTERS) {
            return Decision::Allow;
        }
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        if known.resource_grants.iter().any(|g| g.allows(request)) {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: format!(
                    "no grant allows {} on {}/{} in namespace {} to {}",
                    request.verb,
                    request.resource,
                    request.subresource,
                    request.namespace,
                    request.user.username
                ),
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Known> {
        self.known.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Reviewer for AccessControl {
    fn review_token<'a>(&'a self, token: &'a str) -> BoxFuture<'a, ApiResult<Option<UserInfo>>> {
        Box::pin(std::future::ready(Ok(self.authenticate(token))))
    }

    fn review_access<'a>(
        &'a self,
        request: &'a NonResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>> {
        Box::pin(std::future::ready(Ok(self.authorize(request))))
    }

    fn review_resource_access<'a>(
        &'a self,
        request: &'a ResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>> {
        Box::pin(std::future::ready(Ok(self.authorize_resource(request))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(user: &UserInfo, path: &str) -> NonResourceRequest {
        NonResourceRequest {
            user: user.clone(),
            verb: "get".into(),
            path: path.into(),
        }
    }

    #[test]
    fn tokens_authenticate_as_their_users_until_removed() {
        let access = AccessControl::default();
        assert_eq!(access.authenticate("t"), None);
        access.add_token("t", UserInfo::named("alice", &[]));
        let alice = access.authenticate("t").expect("known");
        assert_eq!(alice.username, "alice");
        assert_eq!(alice.groups, [AUTHENTICATED]);
        assert_eq!(access.authenticate(""), None);
        assert_eq!(access.authenticate("T"), None);
        access.remove_token("t");
        assert_eq!(access.authenticate("t"), None);
    }

    #[test]
    fn grants_match_as_rbac_non_resource_urls_do() {
        let access = AccessControl::default();
        let alice = UserInfo::named("alice", &[AUTHENTICATED]);
        let bob = UserInfo::named("bob", &["monitoring", AUTHENTICATED]);
        let carol = UserInfo::named("carol", &[AUTHENTICATED]);
        access.allow(Subject::User("alice".into()), &["get"], &["/metrics"]);
        access.allow(Subject::Group("monitoring".into()), &["*"], &["/debug/*"]);
        assert_eq!(access.authorize(&get(&alice, "/metrics")), Decision::Allow);
        assert_ne!(
            access.authorize(&get(&alice, "/metrics/x")),
            Decision::Allow
        );
        let post = NonResourceRequest {
            verb: "post".into(),
            ..get(&alice, "/metrics")
        };
        assert_ne!(access.authorize(&post), Decision::Allow);
        assert_ne!(access.authorize(&get(&bob, "/metrics")), Decision::Allow);
        assert_eq!(
            access.authorize(&get(&bob, "/debug/pprof")),
            Decision::Allow
        );
        assert!(matches!(
            access.authorize(&get(&carol, "/metrics")),
            Decision::Deny { reason } if reason.contains("carol")
        ));
        assert_eq!(
            access.authorize(&get(&admin(), "/anything")),
            Decision::Allow
        );
        let proxy = |user: &UserInfo, namespace: &str| ResourceRequest {
            user: user.clone(),
            verb: "create".into(),
            namespace: namespace.into(),
            group: "cubepod.io".into(),
            resource: "sandboxes".into(),
            subresource: "proxy".into(),
            name: "s".into(),
        };
        assert_eq!(
            access.authorize_resource(&proxy(&admin(), "a")),
            Decision::Allow
        );
        assert_ne!(
            access.authorize_resource(&proxy(&alice, "a")),
            Decision::Allow
        );
        access.allow_in_namespace(
            Subject::User("alice".into()),
            "a",
            "cubepod.io",
            &["create"],
            &["sandboxes/proxy"],
        );
        assert_eq!(
            access.authorize_resource(&proxy(&alice, "a")),
            Decision::Allow
        );
        assert_ne!(
            access.authorize_resource(&proxy(&alice, "b")),
            Decision::Allow
        );
        assert_ne!(
            access.authorize_resource(&proxy(&bob, "a")),
            Decision::Allow
        );
    }
}
