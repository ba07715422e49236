//! Why a CRD's schema could not be read: a keyword this API server does not enforce, or a
//! schema (or one of its rules) that is not valid.

#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaError {
    #[error("{path}: `{keyword}` is not enforced by the in-memory API server")]
    Unsupported { path: String, keyword: String },
    #[error("{path}: {why}")]
    Invalid { path: String, why: String },
}
