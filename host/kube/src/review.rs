//! Delegated authentication and authorization, as an API server offers them to the other servers
//! of its cluster: a bearer token reviewed (TokenReview, `authentication.k8s.io/v1`), then a
//! user's request judged (SubjectAccessReview, `authorization.k8s.io/v1`). The controller's HTTPS
//! `/metrics` asks them of the cluster it reconciles: the API server, through the REST client,
//! or the embedded cluster's own rules (`cubepod_apiserver::access`).
//!
//! The wire types are shared by the client and the in-memory server. None of them derives
//! `Debug`: a TokenReview carries a token.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ApiResult, BoxFuture};

/// The path a TokenReview is created at.
pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
/// The path a SubjectAccessReview is created at.
pub const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Every authenticated user is in this group, whatever else the review says.
pub const AUTHENTICATED: &str = "system:authenticated";

/// Who a token belongs to (`authentication.k8s.io/v1` UserInfo).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    /// `system:serviceaccount:ns:name`, `alice`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// Unique across time, where the name may be reused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The groups the user is in; a grant to a group reaches its members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// What else the authenticator said of the user, passed on to authorization as it came.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user `username` in `groups`, with no uid or extra.
    pub fn named(username: &str, groups: &[&str]) -> Self {
        Self {
            username: username.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..Self::default()
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// A request for a non-resource URL (`/metrics`), by `user`: what a SubjectAccessReview asks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NonResourceRequest {
    /// Who asks, as the token's review named them.
    pub user: UserInfo,
    /// Lower case, as the API server's authorizers take it: `get`.
    pub verb: String,
    /// The URL's path: `/metrics`.
    pub path: String,
}

/// A request for one object of a namespaced resource, by `user`: what a SubjectAccessReview's
/// `resourceAttributes` ask (the router's `create` on `sandboxes/proxy`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceRequest {
    /// Who asks, as the token's review named them.
    pub user: UserInfo,
    /// Lower case: `create`.
    pub verb: String,
    /// The object's namespace.
    pub namespace: String,
    /// The API group: `cubepod.io`; empty for the core group.
    pub group: String,
    /// The plural: `sandboxes`.
    pub resource: String,
    /// `proxy`; empty for the object itself.
    pub subresource: String,
    /// The object's name.
    pub name: String,
}

/// A SubjectAccessReview's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A rule allows the request.
    Allow,
    /// Denied, or no rule allows it: either way not allowed.
    Deny {
        /// The authorizer's reason, for the log; may be empty.
        reason: String,
    },
}

/// What the cluster says of a token and of a request.
pub trait Reviewer: Send + Sync + 'static {
    /// The token's user; `None` when the cluster does not authenticate it.
    fn review_token<'a>(&'a self, token: &'a str) -> BoxFuture<'a, ApiResult<Option<UserInfo>>>;

    /// Whether `request` is allowed.
    fn review_access<'a>(
        &'a self,
        request: &'a NonResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>>;

    /// Whether `request`, for an object, is allowed.
    fn review_resource_access<'a>(
        &'a self,
        request: &'a ResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>>;
}

/// A TokenReview (`authentication.k8s.io/v1`): the token asked about in `spec`, the answer in
/// `status`.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReview {
    /// `authentication.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `TokenReview`.
    #[serde(default)]
    pub kind: String,
    /// The question: which token, for which audiences.
    #[serde(default)]
    pub spec: TokenReviewSpec,
    /// The answer, filled in by the server.
    #[serde(default)]
    pub status: TokenReviewStatus,
}

/// What a TokenReview asks about.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReviewSpec {
    /// The bearer token, as the client presented it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// The audiences the token must be for; empty: the API server's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
}

/// A TokenReview's answer.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReviewStatus {
    /// Whether the token is valid; only then is `user` meaningful.
    #[serde(default)]
    pub authenticated: bool,
    /// Whom the token belongs to.
    #[serde(default)]
    pub user: UserInfo,
    /// The asked audiences the token is valid for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    /// Why the token could not be checked, if the server says.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl TokenReview {
    /// The review of `token`, for the API server's default audiences.
    pub(crate) fn of(token: &str) -> Self {
        Self {
            api_version: "authentication.k8s.io/v1".to_owned(),
            kind: "TokenReview".to_owned(),
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Vec::new(),
            },
            status: TokenReviewStatus::default(),
        }
    }

    /// The reviewed token's user, if authenticated.
    pub(crate) fn user(self) -> Option<UserInfo> {
        self.status.authenticated.then_some(self.status.user)
    }
}

/// A SubjectAccessReview (`authorization.k8s.io/v1`): the request asked about in `spec`, the
/// answer in `status`.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReview {
    /// `authorization.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `SubjectAccessReview`.
    #[serde(default)]
    pub kind: String,
    /// The question: who asks to do what.
    #[serde(default)]
    pub spec: SubjectAccessReviewSpec,
    /// The answer, filled in by the server.
    #[serde(default)]
    pub status: SubjectAccessReviewStatus,
}

/// What a SubjectAccessReview asks about: a user (as [`UserInfo`]'s fields) and a request.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReviewSpec {
    /// The user's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// The user's groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The user's uid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The user's extra attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
    /// The request, when it is for a non-resource URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_resource_attributes: Option<NonResourceAttributes>,
    /// The request, when it is for an object of a resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<ResourceAttributes>,
}

/// A request for an object, as a SubjectAccessReview carries it.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAttributes {
    /// Empty: every namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Lower case: `create`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verb: String,
    /// The API group; empty: the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The plural: `sandboxes`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// `proxy`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    /// The object's name; empty: any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A request for a non-resource URL, as a SubjectAccessReview carries it.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NonResourceAttributes {
    /// The URL's path: `/metrics`.
    #[serde(default)]
    pub path: String,
    /// Lower case: `get`.
    #[serde(default)]
    pub verb: String,
}

/// A SubjectAccessReview's answer.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReviewStatus {
    /// A rule allows the request.
    #[serde(default)]
    pub allowed: bool,
    /// A rule denies it outright (without one, not allowed is "no opinion").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied: bool,
    /// Why, for the log.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// An authorizer's failure while deciding; the answer may still stand.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evaluation_error: String,
}

impl SubjectAccessReview {
    pub(crate) fn of_resource(request: &ResourceRequest) -> Self {
        let mut review = Self::of(&NonResourceRequest {
            user: request.user.clone(),
            verb: String::new(),
            path: String::new(),
        });
        review.spec.non_resource_attributes = None;
        review.spec.resource_attributes = Some(ResourceAttributes {
            namespace: request.namespace.clone(),
            verb: request.verb.clone(),
            group: request.group.clone(),
            resource: request.resource.clone(),
            subresource: request.subresource.clone(),
            name: request.name.clone(),
        });
        review
    }

    pub(crate) fn of(request: &NonResourceRequest) -> Self {
        Self {
            api_version: "authorization.k8s.io/v1".to_owned(),
            kind: "SubjectAccessReview".to_owned(),
            spec: SubjectAccessReviewSpec {
                user: request.user.username.clone(),
                groups: request.user.groups.clone(),
                uid: request.user.uid.clone(),
                extra: request.user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: request.path.clone(),
                    verb: request.verb.clone(),
                }),
                resource_attributes: None,
            },
            status: SubjectAccessReviewStatus::default(),
        }
    }

    /// The answer, as the API server's webhook authorizer reads it: allowed, else denied (an
    /// explicit denial and "no opinion" alike); both at once is no answer at all.
    pub(crate) fn decision(self) -> Result<Decision, String> {
        let status = self.status;
        match (status.allowed, status.denied) {
            (true, true) => Err("the SubjectAccessReview both allows and denies".to_owned()),
            (true, false) => Ok(Decision::Allow),
            (false, _) => Ok(Decision::Deny {
                reason: status.reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_review_is_sent_and_read_as_the_api_server_has_it() {
        let sent = serde_json::to_value(TokenReview::of("t0k")).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": "t0k"},
                "status": {"authenticated": false, "user": {}},
            })
        );
        let answer: TokenReview = serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"token": "t0k"},
            "status": {
                "authenticated": true,
                "user": {
                    "username": "system:serviceaccount:monitoring:prometheus",
                    "uid": "42",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]}
                },
                "audiences": ["https://kubernetes.default.svc"]
            }
        }))
        .unwrap();
        let user = answer.user().expect("authenticated");
        assert_eq!(user.username, "system:serviceaccount:monitoring:prometheus");
        assert!(user.in_group(AUTHENTICATED));
        let refused: TokenReview = serde_json::from_value(serde_json::json!({
            "status": {"authenticated": false, "error": "token expired"}
        }))
        .unwrap();
        assert!(refused.user().is_none());
    }

    #[test]
    fn an_access_review_asks_for_the_path_and_verb_and_reads_allow_and_deny() {
        let request = NonResourceRequest {
            user: UserInfo::named("alice", &["team", AUTHENTICATED]),
            verb: "get".into(),
            path: "/metrics".into(),
        };
        let sent = serde_json::to_value(SubjectAccessReview::of(&request)).unwrap();
        assert_eq!(sent["spec"]["user"], "alice");
        assert_eq!(sent["spec"]["groups"][1], AUTHENTICATED);
        assert_eq!(
            sent["spec"]["nonResourceAttributes"],
            serde_json::json!({"path": "/metrics", "verb": "get"})
        );
        assert!(sent["spec"].get("resourceAttributes").is_none());
        let read = |status: serde_json::Value| {
            serde_json::from_value::<SubjectAccessReview>(serde_json::json!({"status": status}))
                .unwrap()
                .decision()
        };
        assert_eq!(
            read(serde_json::json!({"allowed": true})),
            Ok(Decision::Allow)
        );
        assert_eq!(
            read(serde_json::json!({"allowed": false, "reason": "no"})),
            Ok(Decision::Deny {
                reason: "no".into()
            })
        );
        assert_eq!(
            read(serde_json::json!({"allowed": false, "denied": true})),
            Ok(Decision::Deny {
                reason: String::new()
            })
        );
        assert!(read(serde_json::json!({"allowed": true, "denied": true})).is_err());
    }
}
