//! TokenReviews and SubjectAccessReviews POSTed to the API server: the delegated authentication
//! and authorization of the controller's `/metrics`. The answer is read whole; the token goes
//! only into the request's body, never into a message or a log.

use hyper::Method;

use super::transport::Call;
use super::{JSON, RestCluster};
use crate::review::{
    Decision, NonResourceRequest, ResourceRequest, Reviewer, SUBJECT_ACCESS_REVIEWS,
    SubjectAccessReview, TOKEN_REVIEWS, TokenReview, UserInfo,
};
use crate::{ApiError, ApiErrorKind, ApiResult, BoxFuture};

impl RestCluster {
    /// POSTs `review` to `path` and reads the answer as the same kind.
    async fn review<T>(&self, path: &str, review: &T) -> ApiResult<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let body = serde_json::to_vec(review).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Invalid,
                format!("cannot serialize the review: {e}"),
            )
        })?;
        let call = Call::new(Method::POST, path.to_owned()).with_body(body, JSON);
        let answer = self.transport.send(&call).await?;
        serde_json::from_slice(&answer).map_err(|e| {
            ApiError::new(
                ApiErrorKind::Other,
                format!("POST {path}: the answer is not a review: {e}"),
            )
        })
    }
}

impl Reviewer for RestCluster {
    fn review_token<'a>(&'a self, token: &'a str) -> BoxFuture<'a, ApiResult<Option<UserInfo>>> {
        Box::pin(async move {
            let answer = self.review(TOKEN_REVIEWS, &TokenReview::of(token)).await?;
            Ok(answer.user())
        })
    }

    fn review_access<'a>(
        &'a self,
        request: &'a NonResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>> {
        Box::pin(async move { self.access_review(SubjectAccessReview::of(request)).await })
    }

    fn review_resource_access<'a>(
        &'a self,
        request: &'a ResourceRequest,
    ) -> BoxFuture<'a, ApiResult<Decision>> {
        Box::pin(async move {
            self.access_review(SubjectAccessReview::of_resource(request))
                .await
        })
    }
}

impl RestCluster {
    async fn access_review(&self, review: SubjectAccessReview) -> ApiResult<Decision> {
        let answer = self.review(SUBJECT_ACCESS_REVIEWS, &review).await?;
        answer.decision().map_err(|why| {
            ApiError::new(
                ApiErrorKind::Other,
                format!("POST {SUBJECT_ACCESS_REVIEWS}: {why}"),
            )
        })
    }
}
