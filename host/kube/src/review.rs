//! Delegated authentication and authorization, as an API server offers them to the other servers
//! of its cluster: a bearer token reviewed (TokenReview, `authentication.k8s.io/v1`), then a
//! user's request judged (SubjectAccessReview, `authorization.k8s.io/v1`). The controller's HTTPS
//! `/metrics` asks them of the cluster it reconciles: the API server, through the REST client,
//! or the embedded cluster's own rules (`memory::access`).
//!
//! The wire types are shared by the client and the in-memory server. None of them derives
//! `Debug`: a TokenReview carries a token.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ApiResult, BoxFuture};

pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Every authenticated user is in this group, whatever else the review says.
pub const AUTHENTICATED: &str = "system:authenticated";

/// Who a token belongs to (`authentication.k8s.io/v1` UserInfo).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn named(username: &str, groups: &[&str]) -> Self {
        Self {
            username: username.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..Self::default()
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// A request for a non-resource URL (`/metrics`), by `user`: what a SubjectAccessReview asks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NonResourceRequest {
    pub user: UserInfo,
    /// Lower case, as the API server's authorizers take it: `get`.
    pub verb: String,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied, or no rule allows it: either way not allowed.
    Deny {
        reason: String,
    },
}

/// What the cluster says of a token and of a request.
pub trait Reviewer: Send + Sync + 'static {
    /// The token's user; `None` when the cluster does not authenticate it.
    fn review_token<'a>(&'a self, token: &'a str) -> BoxFuture<'a, ApiResult<Option<UserInfo>>>;

    fn review_access<'a>(
        &'a self,
        request: &'a NonResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>>;
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReview {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub spec: TokenReviewSpec,
    #[serde(default)]
    pub status: TokenReviewStatus,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReviewSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReviewStatus {
    #[serde(default)]
    pub authenticated: bool,
    #[serde(default)]
    pub user: UserInfo,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
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

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReview {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub spec: SubjectAccessReviewSpec,
    #[serde(default)]
    pub status: SubjectAccessReviewStatus,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReviewSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_resource_attributes: Option<NonResourceAttributes>,
    /// Kept as it came: only its presence matters here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<serde_json::Value>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NonResourceAttributes {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub verb: String,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReviewStatus {
    #[serde(default)]
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evaluation_error: String,
}

impl SubjectAccessReview {
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
