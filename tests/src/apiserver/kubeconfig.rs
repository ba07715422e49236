//! A kubeconfig pointing at the fake server, as a controller started with `--kubeconfig` (or
//! `KUBECONFIG`) reads it.

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

/// How the kubeconfig's user authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeconfigAuth {
    /// No credentials.
    None,
    /// `token:` inline.
    Token(String),
    /// `tokenFile:`: read by the client (and re-read, for rotation).
    TokenFile(PathBuf),
}

/// The file name written in the directory given.
pub const FILE_NAME: &str = "kubeconfig";

/// Writes `dir/kubeconfig`: one cluster, user and context named `fake`, the current one.
pub fn write(
    dir: &Path,
    server: &str,
    ca_pem: Option<&str>,
    auth: &KubeconfigAuth,
) -> io::Result<PathBuf> {
    let mut cluster = json!({ "server": server });
    if let Some(ca) = ca_pem {
        cluster["certificate-authority-data"] =
            base64::engine::general_purpose::STANDARD.encode(ca).into();
    }
    let user = match auth {
        KubeconfigAuth::None => json!({}),
        KubeconfigAuth::Token(token) => json!({ "token": token }),
        KubeconfigAuth::TokenFile(path) => json!({ "tokenFile": path.to_string_lossy() }),
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "fake", "cluster": cluster }],
        "users": [{ "name": "fake", "user": user }],
        "contexts": [{
            "name": "fake",
            "context": { "cluster": "fake", "user": "fake" },
        }],
        "current-context": "fake",
        "preferences": Value::Object(Default::default()),
    });
    let yaml = serde_yaml_ng::to_string(&config).map_err(io::Error::other)?;
    let path = dir.join(FILE_NAME);
    std::fs::write(&path, yaml)?;
    Ok(path)
}
