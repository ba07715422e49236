//! Who may read `/metrics`, asked of the cluster as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` asks it: the request's bearer token is reviewed
//! (a TokenReview), then the token's user is checked for the request's verb (its method, lower
//! case) on its path as a non-resource URL (a SubjectAccessReview). No token, or one the cluster
//! does not authenticate: 401. A user not allowed: 403. A review that fails: 500, and the request
//! is refused, never let through.
//!
//! Answers are kept as controller-runtime keeps them: a token's review for a minute (either
//! way), an allowed request for five minutes, a denied one for 30 seconds. A scraper asking every
//! 15 seconds then costs one review of each kind per few minutes, not two API calls per scrape.
//! Tokens are kept only as their SHA-256, and never logged.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::header::{AUTHORIZATION, HeaderMap};
use hyper::{Method, StatusCode};
use sha2::{Digest, Sha256};

use cubepod_kube::review::{
    AUTHENTICATED, Decision, NonResourceRequest, ResourceRequest, Reviewer, UserInfo,
};

/// How long a token's review is kept, authenticated or not (controller-runtime's `CacheTTL`).
pub(crate) const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How long an allowed request is kept (`AllowCacheTTL`).
pub(crate) const ALLOW_TTL: Duration = Duration::from_secs(5 * 60);
/// How long a denied request is kept (`DenyCacheTTL`).
pub(crate) const DENY_TTL: Duration = Duration::from_secs(30);
/// Bound on one review, retries included (`TokenAccessReviewTimeout`).
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Entries each cache holds at most: scrapers are few, but tokens are whatever clients send.
const CAPACITY: usize = 1024;

/// Why a request is refused: the status and the body's one line, as controller-runtime words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// The time, for the caches: the system's, or a test's.
type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The authentication and authorization of every request to the metrics server.
pub(crate) struct Gate {
    reviewer: Arc<dyn Reviewer>,
    users: TtlCache<[u8; 32], Option<UserInfo>>,
    decisions: TtlCache<NonResourceRequest, Decision>,
    resource_decisions: TtlCache<ResourceRequest, Decision>,
    clock: Clock,
}

impl Gate {
    pub(crate) fn new(reviewer: Arc<dyn Reviewer>) -> Self {
        Self::with_clock(reviewer, Arc::new(Instant::now))
    }

    fn with_clock(reviewer: Arc<dyn Reviewer>, clock: Clock) -> Self {
        Self {
            reviewer,
            users: TtlCache::default(),
            decisions: TtlCache::default(),
            resource_decisions: TtlCache::default(),
            clock,
        }
    }

    /// `Ok` when the request may be served.
    pub(crate) async fn check(
        &self,
        headers: &HeaderMap,
        method: &Method,
        path: &str,
    ) -> Result<(), Refusal> {
        let user = self.user(headers, path).await?;
        let request = NonResourceRequest {
            user,
            verb: method.as_str().to_ascii_lowercase(),
            path: path.to_owned(),
        };
        match self.authorize(&request).await? {
            Decision::Allow => Ok(()),
            Decision::Deny { reason } => {
                let user = &request.user.username;
                tracing::debug!(%user, %path, %reason, "metrics request denied");
                Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!("Authorization denied for user {user}"),
                ))
            }
        }
    }

    /// The user of the request's bearer token; 401 without one the cluster authenticates.
    async fn user(&self, headers: &HeaderMap, path: &str) -> Result<UserInfo, Refusal> {
        let unauthorized = || Refusal::new(StatusCode::UNAUTHORIZED, "Unauthorized");
        let Some(token) = bearer(headers) else {
            tracing::debug!(%path, "request without a bearer token");
            return Err(unauthorized());
        };
        let Some(mut user) = self.authenticate(token).await? else {
            tracing::debug!(%path, "request with a token the cluster does not authenticate");
            return Err(unauthorized());
        };
        if !user.in_group(AUTHENTICATED) {
            user.groups.push(AUTHENTICATED.to_owned());
        }
        Ok(user)
    }

    /// `Ok` when the request's token is of a user allowed what `request` (given the user)
    /// asks: 401 without such a token, 403 when not allowed. The refusal names the user, never
    /// whether the object exists: it is decided before anything about the object is read.
    pub(crate) async fn check_resource(
        &self,
        headers: &HeaderMap,
        path: &str,
        request: impl FnOnce(UserInfo) -> ResourceRequest,
    ) -> Result<(), Refusal> {
        let request = request(self.user(headers, path).await?);
        let cached = self.resource_decisions.get(&request, (self.clock)());
        let decision = match cached {
            Some(decision) => decision,
            None => {
                let user = request.user.username.clone();
                let failed = |why: String| {
                    tracing::warn!(%user, error = %why, "the SubjectAccessReview failed");
                    Refusal::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("Authorization for user {user} failed"),
                    )
                };
                let decision = tokio::time::timeout(
                    REVIEW_TIMEOUT,
                    self.reviewer.review_resource_access(&request),
                )
                .await
                .map_err(|_| failed(format!("no answer within {REVIEW_TIMEOUT:?}")))?
                .map_err(|error| failed(error.to_string()))?;
                let ttl = match decision {
                    Decision::Allow => ALLOW_TTL,
                    Decision::Deny { .. } => DENY_TTL,
                };
                self.resource_decisions.insert(
                    request.clone(),
                    decision.clone(),
                    (self.clock)(),
                    ttl,
                );
                decision
            }
        };
        match decision {
            Decision::Allow => Ok(()),
            Decision::Deny { reason } => {
                let user = &request.user.username;
                tracing::debug!(%user, %path, %reason, "request denied");
                Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "user {user} may not {} {}/{} in namespace {}",
                        request.verb, request.resource, request.subresource, request.namespace
                    ),
                ))
            }
        }
    }

    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(user) = self.users.get(&key, (self.clock)()) {
            return Ok(user);
        }
        let failed = |why: String| {
            tracing::warn!(error = %why, "the TokenReview failed");
            Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "Authentication failed")
        };
        let user = tokio::time::timeout(REVIEW_TIMEOUT, self.reviewer.review_token(token))
            .await
            .map_err(|_| failed(format!("no answer within {REVIEW_TIMEOUT:?}")))?
            .map_err(|error| failed(error.to_string()))?;
        self.users
            .insert(key, user.clone(), (self.clock)(), TOKEN_TTL);
        Ok(user)
    }

    async fn authorize(&self, request: &NonResourceRequest) -> Result<Decision, Refusal> {
        if let Some(decision) = self.decisions.get(request, (self.clock)()) {
            return Ok(decision);
        }
        let user = &request.user.username;
        let failed = |why: String| {
            tracing::warn!(%user, error = %why, "the SubjectAccessReview failed");
            Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Authorization for user {user} failed"),
            )
        };
        let decision = tokio::time::timeout(REVIEW_TIMEOUT, self.reviewer.review_access(request))
            .await
            .map_err(|_| failed(format!("no answer within {REVIEW_TIMEOUT:?}")))?
            .map_err(|error| failed(error.to_string()))?;
        let ttl = match decision {
            Decision::Allow => ALLOW_TTL,
            Decision::Deny { .. } => DENY_TTL,
        };
        self.decisions
            .insert(request.clone(), decision.clone(), (self.clock)(), ttl);
        Ok(decision)
    }
}

/// The token of `Authorization: Bearer <token>`, read as the API server reads it: the header
/// trimmed, the scheme in any case, the token up to the next space; an empty one is none.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Answers kept until they expire, at most [`CAPACITY`] of them.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K, V> Default for TtlCache<K, V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        match entries.get(key) {
            Some((value, expires)) if *expires > now => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&self, key: K, value: V, now: Instant, ttl: Duration) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| *expires > now);
            // Still full of live answers: the one expiring first goes.
            if entries.len() >= CAPACITY
                && let Some(first) = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&first);
            }
        }
        entries.insert(key, (value, now + ttl));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::header::HeaderValue;

    use super::*;
    use cubepod_apiserver::access::{AccessControl, Subject};
    use cubepod_kube::{ApiError, ApiErrorKind, ApiResult, BoxFuture};

    /// The in-memory cluster's rules, counting the reviews asked, or failing them all.
    struct Counting {
        access: AccessControl,
        tokens: AtomicUsize,
        accesses: AtomicUsize,
        fail: bool,
    }

    impl Reviewer for Counting {
        fn review_token<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, ApiResult<Option<UserInfo>>> {
            self.tokens.fetch_add(1, Ordering::Relaxed);
            if self.fail {
                let error = ApiError::new(ApiErrorKind::Forbidden, "tokenreviews is forbidden");
                return Box::pin(std::future::ready(Err(error)));
            }
            self.access.review_token(token)
        }

        fn review_access<'a>(
            &'a self,
            request: &'a NonResourceRequest,
        ) -> BoxFuture<'a, ApiResult<Decision>> {
            self.accesses.fetch_add(1, Ordering::Relaxed);
            self.access.review_access(request)
        }

        fn review_resource_access<'a>(
            &'a self,
            request: &'a cubepod_kube::review::ResourceRequest,
        ) -> BoxFuture<'a, ApiResult<Decision>> {
            self.accesses.fetch_add(1, Ordering::Relaxed);
            self.access.review_resource_access(request)
        }
    }

    /// A clock the test moves.
    #[derive(Clone)]
    struct Manual(Arc<Mutex<Instant>>);

    impl Manual {
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
    }

    fn setup(fail: bool) -> (Arc<Counting>, Gate, Manual) {
        let access = AccessControl::default();
        access.add_token("reader", UserInfo::named("alice", &[]));
        access.add_token("viewer", UserInfo::named("bob", &[]));
        access.allow(Subject::User("alice".into()), &["get"], &["/metrics"]);
        let reviewer = Arc::new(Counting {
            access,
            tokens: AtomicUsize::new(0),
            accesses: AtomicUsize::new(0),
            fail,
        });
        let clock = Manual(Arc::new(Mutex::new(Instant::now())));
        let now = clock.clone();
        let gate = Gate::with_clock(reviewer.clone(), Arc::new(move || *now.0.lock().unwrap()));
        (reviewer, gate, clock)
    }

    fn with(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(authorization).expect("header"),
        );
        headers
    }

    async fn status(gate: &Gate, headers: &HeaderMap, path: &str) -> Result<(), StatusCode> {
        gate.check(headers, &Method::GET, path)
            .await
            .map_err(|r| r.status)
    }

    #[tokio::test]
    async fn no_token_or_a_bad_one_is_401_a_user_not_allowed_403() {
        let (_, gate, _) = setup(false);
        let unauthorized = Err(StatusCode::UNAUTHORIZED);
        assert_eq!(
            status(&gate, &HeaderMap::new(), "/metrics").await,
            unauthorized
        );
        for header in ["Bearer nope", "Bearer ", "Basic reader", "reader", "Bearer"] {
            assert_eq!(status(&gate, &with(header), "/metrics").await, unauthorized);
        }
        assert_eq!(
            status(&gate, &with("Bearer reader"), "/metrics").await,
            Ok(())
        );
        assert_eq!(
            status(&gate, &with("bearer  reader "), "/metrics").await,
            unauthorized
        );
        assert_eq!(
            status(&gate, &with(" BEARER reader "), "/metrics").await,
            Ok(())
        );
        assert_eq!(
            status(&gate, &with("Bearer reader"), "/debug").await,
            Err(StatusCode::FORBIDDEN)
        );
        let refusal = gate
            .check(&with("Bearer viewer"), &Method::GET, "/metrics")
            .await
            .unwrap_err();
        assert_eq!(
            refusal,
            Refusal::new(StatusCode::FORBIDDEN, "Authorization denied for user bob")
        );
        // The verb is the method: alice may get, not post.
        let reader = with("Bearer reader");
        let post = gate.check(&reader, &Method::POST, "/metrics").await;
        assert_eq!(post.map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
    }

    #[tokio::test]
    async fn answers_are_kept_so_a_scrape_every_15_s_costs_a_review_per_ttl() {
        let (reviewer, gate, clock) = setup(false);
        let reader = with("Bearer reader");
        let count = || {
            (
                reviewer.tokens.load(Ordering::Relaxed),
                reviewer.accesses.load(Ordering::Relaxed),
            )
        };
        for _ in 0..4 {
            assert_eq!(status(&gate, &reader, "/metrics").await, Ok(()));
            clock.advance(Duration::from_secs(15));
        }
        // 60 s: the token's review has expired, the allowed request not.
        assert_eq!(count(), (1, 1));
        assert_eq!(status(&gate, &reader, "/metrics").await, Ok(()));
        assert_eq!(count(), (2, 1));
        clock.advance(ALLOW_TTL);
        assert_eq!(status(&gate, &reader, "/metrics").await, Ok(()));
        assert_eq!(count(), (3, 2));

        // A denial is kept 30 s; an unknown token a minute.
        let viewer = with("Bearer viewer");
        for _ in 0..3 {
            assert_eq!(
                status(&gate, &viewer, "/metrics").await,
                Err(StatusCode::FORBIDDEN)
            );
            clock.advance(Duration::from_secs(10));
        }
        assert_eq!(count(), (4, 3));
        assert_eq!(
            status(&gate, &viewer, "/metrics").await,
            Err(StatusCode::FORBIDDEN)
        );
        assert_eq!(count(), (4, 4));
        let stranger = with("Bearer stranger");
        for _ in 0..3 {
            assert_eq!(
                status(&gate, &stranger, "/metrics").await,
                Err(StatusCode::UNAUTHORIZED)
            );
        }
        assert_eq!(count(), (5, 4));
    }

    #[tokio::test]
    async fn a_failed_review_refuses_with_500_and_is_not_kept() {
        let (reviewer, gate, _) = setup(true);
        for _ in 0..2 {
            let refusal = gate
                .check(&with("Bearer reader"), &Method::GET, "/metrics")
                .await
                .unwrap_err();
            assert_eq!(
                refusal,
                Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "Authentication failed")
            );
        }
        assert_eq!(reviewer.tokens.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity() {
        let cache = TtlCache::default();
        for i in 0..CAPACITY + 10 {
            cache.insert(i, i, Instant::now(), Duration::from_secs(60));
        }
        let entries = cache.entries.lock().unwrap();
        assert_eq!(entries.len(), CAPACITY);
    }
}
