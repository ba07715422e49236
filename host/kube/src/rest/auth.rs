//! The bearer token of each request. Bound service-account tokens rotate (hourly by default),
//! so a token file is re-read once its copy is older than the refresh interval and at once
//! after a 401; a failed read keeps the last good token rather than sending none.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;

use super::config::{Credentials, Token};

pub(crate) struct Bearer {
    source: Source,
    refresh: Duration,
    cached: Mutex<Cached>,
}

enum Source {
    None,
    /// A fixed token's header, made once.
    Static(Option<HeaderValue>),
    File {
        path: PathBuf,
        origin: String,
    },
}

#[derive(Default)]
struct Cached {
    token: Option<Token>,
    /// `token`'s header, made when it was read rather than at every request.
    header: Option<HeaderValue>,
    read_at: Option<Instant>,
}

/// `Bearer <token>`, kept out of HTTP/2 header compression tables.
fn header_of(token: &Token) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

impl Bearer {
    pub(crate) fn new(credentials: &Credentials, refresh: Duration) -> Self {
        let source = match credentials {
            Credentials::None => Source::None,
            Credentials::Token(token) => Source::Static(header_of(token)),
            Credentials::TokenFile { path, origin } => Source::File {
                path: path.clone(),
                origin: origin.clone(),
            },
        };
        Self {
            source,
            refresh,
            cached: Mutex::new(Cached::default()),
        }
    }

    /// The `Authorization` header, if the credentials have a token.
    pub(crate) fn header(&self) -> Option<HeaderValue> {
        match &self.source {
            Source::None => None,
            Source::Static(header) => header.clone(),
            Source::File { .. } => {
                let mut cached = self.lock();
                let stale = cached.read_at.is_none_or(|at| at.elapsed() >= self.refresh);
                if stale {
                    self.read_file(&mut cached);
                }
                cached.header.clone()
            }
        }
    }

    /// After a 401: re-reads a token file now. True when that may help, i.e. the token comes
    /// from a file (a fixed token would be refused again).
    pub(crate) fn reload(&self) -> bool {
        if !matches!(self.source, Source::File { .. }) {
            return false;
        }
        let mut cached = self.lock();
        self.read_file(&mut cached);
        true
    }

    fn read_file(&self, cached: &mut Cached) {
        let Source::File { path, origin } = &self.source else {
            return;
        };
        // Set before reading: a broken file is retried at the next interval, not every request.
        cached.read_at = Some(Instant::now());
        // A small local file, read rarely: a blocking read is cheaper than a blocking-pool hop.
        let read = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| Token::new(origin, &text).map_err(|e| e.to_string()));
        match read {
            Ok(token) => {
                if cached.token.as_ref().is_some_and(|old| *old != token) {
                    tracing::debug!(path = %path.display(), "bearer token file changed; using the new token");
                }
                cached.header = header_of(&token);
                cached.token = Some(token);
            }
            Err(error) => tracing::warn!(
                path = %path.display(),
                %error,
                kept_previous = cached.token.is_some(),
                "cannot re-read the bearer token file"
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        // The cache is whole at every step: a panic elsewhere leaves nothing half-written.
        self.cached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
