//! A kubeconfig pointing at a served cluster, as kubectl and the controller (`KUBECONFIG`) read
//! it. Written with mode 0600 from the start: it may hold the bearer token.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

/// How the kubeconfig's user authenticates.
#[derive(Clone, PartialEq, Eq)]
pub enum KubeconfigAuth {
    /// No credentials.
    None,
    /// `token:` inline.
    Token(String),
    /// `tokenFile:`: read by the client (and re-read, for rotation).
    TokenFile(PathBuf),
}

// By hand: a derived Debug would print the token.
impl std::fmt::Debug for KubeconfigAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KubeconfigAuth::None => f.write_str("None"),
            KubeconfigAuth::Token(_) => f.write_str("Token(..)"),
            KubeconfigAuth::TokenFile(path) => f.debug_tuple("TokenFile").field(path).finish(),
        }
    }
}

/// What goes into the file.
#[derive(Debug)]
pub struct Kubeconfig<'a> {
    /// The name of the cluster, user and context (the current one).
    pub(crate) name: &'a str,
    pub(crate) server: &'a str,
    /// The CA the server's certificate chains to, PEM; `None` for plain http.
    pub(crate) ca_pem: Option<&'a str>,
    pub(crate) auth: &'a KubeconfigAuth,
}

impl Kubeconfig<'_> {
    /// The YAML text.
    pub(crate) fn to_yaml(&self) -> io::Result<String> {
        let mut cluster = json!({ "server": self.server });
        if let Some(ca) = self.ca_pem {
            cluster["certificate-authority-data"] =
                base64::engine::general_purpose::STANDARD.encode(ca).into();
        }
        let user = match self.auth {
            KubeconfigAuth::None => json!({}),
            KubeconfigAuth::Token(token) => json!({ "token": token }),
            KubeconfigAuth::TokenFile(path) => json!({ "tokenFile": path.to_string_lossy() }),
        };
        let name = self.name;
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": name, "cluster": cluster }],
            "users": [{ "name": name, "user": user }],
            "contexts": [{
                "name": name,
                "context": { "cluster": name, "user": name },
            }],
            "current-context": name,
            "preferences": Value::Object(Default::default()),
        });
        serde_yaml_ng::to_string(&config).map_err(io::Error::other)
    }

    /// Writes the file at `path` (its folder created if missing), replacing what was there.
    /// Mode 0600 before a byte is written; an existing file is replaced by a rename, so that
    /// a file someone else made readable is not reused.
    pub fn write(&self, path: &Path) -> io::Result<PathBuf> {
        let yaml = self.to_yaml()?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let staged = path.with_extension(format!("tmp.{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let _ = std::fs::remove_file(&staged);
        let mut file = options.open(&staged)?;
        file.write_all(yaml.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&staged, path)?;
        Ok(path.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_private_with_the_ca_and_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/kubeconfig");
        let auth = KubeconfigAuth::Token("s3cret".into());
        let config = Kubeconfig {
            name: "embedded",
            server: "https://127.0.0.1:1",
            ca_pem: Some("PEM"),
            auth: &auth,
        };
        config.write(&path).unwrap();
        config.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(value["current-context"], "embedded");
        assert_eq!(value["users"][0]["user"]["token"], "s3cret");
        assert_eq!(
            value["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!format!("{auth:?}").contains("s3cret"));
    }
}
