//! Errors of setting the REST client up: each names the file (or variable) and the field at
//! fault, so that a broken kubeconfig is fixed from the message alone.

use std::path::PathBuf;

/// Why the REST client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// A file could not be read: `kubeconfig /x/config: No such file or directory`.
    #[error("{what} {}: {source}", path.display())]
    Read {
        /// What the file is: `kubeconfig`, `in-cluster token file`.
        what: String,
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// Something in a configuration is wrong: `origin` names where (file, field), `message` what.
    #[error("{origin}: {message}")]
    Invalid {
        /// Where: `kubeconfig /x/config: users[alice].token`.
        origin: String,
        /// What is wrong.
        message: String,
    },
}

impl RestError {
    pub(crate) fn read(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        RestError::Read {
            what: what.into(),
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(origin: impl Into<String>, message: impl Into<String>) -> Self {
        RestError::Invalid {
            origin: origin.into(),
            message: message.into(),
        }
    }
}
