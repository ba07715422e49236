//! The API server's error messages, so that logs and tests read the same against either backend.

use super::field::{self, FieldError};
use cubepod_kube::{ApiError, ApiErrorKind, Resource};

/// `pods` for the core group, `sandboxes.cubepod.io` for ours, as the API server names them.
pub(crate) fn qualified(resource: Resource) -> String {
    match resource.descriptor().group {
        "" => resource.plural().to_owned(),
        group => format!("{}.{group}", resource.plural()),
    }
}

/// `sandboxes.cubepod.io "a" not found`.
pub(crate) fn not_found(resource: Resource, name: &str) -> ApiError {
    ApiError::new(
        ApiErrorKind::NotFound,
        format!("{} \"{name}\" not found", qualified(resource)),
    )
}

pub(crate) fn already_exists(resource: Resource, name: &str) -> ApiError {
    ApiError::new(
        ApiErrorKind::AlreadyExists,
        format!("{} \"{name}\" already exists", qualified(resource)),
    )
}

pub(crate) fn conflict(resource: Resource, name: &str) -> ApiError {
    ApiError::new(
        ApiErrorKind::Conflict,
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
             please apply your changes to the latest version and try again",
            qualified(resource)
        ),
    )
}

pub(crate) fn uid_precondition(expected: &str, actual: &str) -> ApiError {
    ApiError::new(
        ApiErrorKind::Conflict,
        format!(
            "Precondition failed: UID in precondition: {expected}, UID in object meta: {actual}"
        ),
    )
}

/// A 422 Invalid naming each field's error.
pub(crate) fn invalid(resource: Resource, name: &str, errors: &[FieldError]) -> ApiError {
    field::invalid(resource, name, errors)
}

/// A 400 Bad Request; the seam has no kind of its own for it.
pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(ApiErrorKind::Invalid, message)
}

/// 404 for a subresource the kind does not have.
pub(crate) fn no_such_subresource() -> ApiError {
    ApiError::new(
        ApiErrorKind::NotFound,
        "the server could not find the requested resource",
    )
}

pub(crate) fn gone(requested: u64, oldest: u64) -> ApiError {
    ApiError::new(
        ApiErrorKind::Gone,
        format!("too old resource version: {requested} ({oldest})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_group_qualified() {
        assert_eq!(qualified(Resource::Pod), "pods");
        assert_eq!(qualified(Resource::Sandbox), "sandboxes.cubepod.io");
        assert_eq!(
            already_exists(Resource::Pod, "a").message,
            "pods \"a\" already exists"
        );
        assert_eq!(
            not_found(Resource::Sandbox, "nope").message,
            "sandboxes.cubepod.io \"nope\" not found"
        );
    }
}
