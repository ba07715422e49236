//! `POST /apis/authentication.k8s.io/v1/tokenreviews` and
//! `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`, answered from the cluster's
//! [`AccessControl`](crate::access::AccessControl) as the API server answers them:
//! 201 with the review and its status; the request's token is not sent back.

use hyper::body::Incoming;
use hyper::{Method, Response, StatusCode};
use serde::Serialize;

use super::body::{self, Body};
use super::request_body::read_object;
use super::status::Failure;
use crate::MemoryCluster;
use cubepod_kube::review::{
    Decision, NonResourceRequest, ResourceRequest, SubjectAccessReview, SubjectAccessReviewStatus,
    TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Review {
    Token,
    SubjectAccess,
}

/// The review a path's segments name, if any.
pub(crate) fn route(segments: &[&str]) -> Option<Review> {
    match segments {
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => Some(Review::Token),
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
            Some(Review::SubjectAccess)
        }
        _ => None,
    }
}

pub(crate) async fn serve(
    cluster: &MemoryCluster,
    review: Review,
    method: &Method,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    if *method != Method::POST {
        return Err(Failure::method_not_allowed(method));
    }
    let object = read_object(body).await?;
    let bad = |e: serde_json::Error| Failure::bad_request(format!("not a {review:?}Review: {e}"));
    match review {
        Review::Token => {
            let asked: TokenReview = serde_json::from_value(object).map_err(bad)?;
            token_review(cluster, asked)
        }
        Review::SubjectAccess => {
            let asked: SubjectAccessReview = serde_json::from_value(object).map_err(bad)?;
            access_review(cluster, asked)
        }
    }
}

fn token_review(cluster: &MemoryCluster, asked: TokenReview) -> Result<Response<Body>, Failure> {
    if asked.spec.token.is_empty() {
        return Err(Failure::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = match cluster.access().authenticate(&asked.spec.token) {
        Some(user) => TokenReviewStatus {
            authenticated: true,
            user,
            audiences: asked.spec.audiences.clone(),
            error: String::new(),
        },
        None => TokenReviewStatus {
            error: "invalid bearer token".to_owned(),
            ..TokenReviewStatus::default()
        },
    };
    let answer = TokenReview {
        api_version: "authentication.k8s.io/v1".to_owned(),
        kind: "TokenReview".to_owned(),
        spec: TokenReviewSpec {
            token: String::new(),
            audiences: asked.spec.audiences,
        },
        status,
    };
    Ok(created(&answer))
}

fn access_review(
    cluster: &MemoryCluster,
    asked: SubjectAccessReview,
) -> Result<Response<Body>, Failure> {
    let spec = &asked.spec;
    if spec.user.is_empty() && spec.groups.is_empty() {
        return Err(Failure::bad_request(
            "at least one of user or group must be specified",
        ));
    }
    let user = UserInfo {
        username: spec.user.clone(),
        uid: spec.uid.clone(),
        groups: spec.groups.clone(),
        extra: spec.extra.clone(),
    };
    let decision = match (&spec.non_resource_attributes, &spec.resource_attributes) {
        (Some(attributes), None) => cluster.access().authorize(&NonResourceRequest {
            user,
            verb: attributes.verb.clone(),
            path: attributes.path.clone(),
        }),
        (None, Some(attributes)) => cluster.access().authorize_resource(&ResourceRequest {
            user,
            verb: attributes.verb.clone(),
            namespace: attributes.namespace.clone(),
            group: attributes.group.clone(),
            resource: attributes.resource.clone(),
            subresource: attributes.subresource.clone(),
            name: attributes.name.clone(),
        }),
        _ => {
            return Err(Failure::bad_request(
                "exactly one of nonResourceAttributes and resourceAttributes must be specified",
            ));
        }
    };
    let status = match decision {
        Decision::Allow => SubjectAccessReviewStatus {
            allowed: true,
            reason: "allowed by the in-memory cluster's grants".to_owned(),
            ..SubjectAccessReviewStatus::default()
        },
        Decision::Deny { reason } => SubjectAccessReviewStatus {
            reason,
            ..SubjectAccessReviewStatus::default()
        },
    };
    let answer = SubjectAccessReview { status, ..asked };
    Ok(created(&answer))
}

fn created(review: &impl Serialize) -> Response<Body> {
    let mut value = serde_json::to_value(review).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        fields.insert(
            "metadata".to_owned(),
            serde_json::json!({"creationTimestamp": null}),
        );
    }
    body::json(StatusCode::CREATED, &value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::routes::{Route, parse};

    #[test]
    fn the_review_paths_are_routed_whatever_crds_are_installed() {
        for crds in [true, false] {
            assert_eq!(
                parse("/apis/authentication.k8s.io/v1/tokenreviews", crds),
                Some(Route::Review(Review::Token))
            );
            assert_eq!(
                parse("/apis/authorization.k8s.io/v1/subjectaccessreviews", crds),
                Some(Route::Review(Review::SubjectAccess))
            );
        }
        assert_eq!(
            parse(
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                true
            ),
            None
        );
        assert_eq!(parse("/apis/authentication.k8s.io/v1", true), None);
    }
}
