//! Where the API server is and how to talk to it: a [`ConnectionConfig`] from a kubeconfig
//! (its current context) or from a pod's service account. Everything is read and decoded here,
//! so that a mistake is reported at start, naming the file and the field.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hyper::Uri;
use serde::Deserialize;

use super::error::RestError;

/// Where a pod finds its service account.
pub(crate) const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A PEM document (a CA bundle, a client certificate or key) and where it came from.
#[derive(Clone)]
pub struct Pem {
    /// Names the source in errors: `kubeconfig /x: users[alice].client-key-data`.
    pub(crate) origin: String,
    /// The document as read (PEM text).
    pub bytes: Vec<u8>,
}

// Keys are secrets: show where a document came from, never what it holds.
impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pem({}, {} bytes)", self.origin, self.bytes.len())
    }
}

/// A bearer token. Its Debug never shows it; only the HTTP header carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Trims the text (token files end in a newline) and refuses what an HTTP header cannot
    /// carry; `origin` names the source in that error.
    pub fn new(origin: &str, text: &str) -> Result<Self, RestError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(RestError::invalid(origin, "the token is empty"));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(RestError::invalid(
                origin,
                "the token has characters that an HTTP header cannot carry",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// How requests authenticate, besides a client certificate.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// No bearer token: anonymous, or a client certificate alone.
    None,
    /// A token given once (a kubeconfig's `token`).
    Token(Token),
    /// A token re-read from this file (bound service-account tokens rotate).
    TokenFile {
        /// The token file.
        path: PathBuf,
        /// Names the source in messages: `in-cluster token file`.
        origin: String,
    },
}

/// How the client checks the server and proves itself over TLS.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// CA bundle to trust; `None`: the system's roots.
    pub ca: Option<Pem>,
    /// The client certificate chain, for mutual TLS (with `client_key`).
    pub client_cert: Option<Pem>,
    /// The client certificate's private key.
    pub client_key: Option<Pem>,
    /// Only ever set by an explicit `insecure-skip-tls-verify: true`.
    pub insecure_skip_verify: bool,
    /// The name to verify the server's certificate against, when not the server's host.
    pub server_name: Option<String>,
}

/// Everything needed to reach one API server.
#[derive(Clone, Debug)]
pub struct ConnectionConfig {
    /// `https://host:port`, or `http://` (kubectl proxy); a path prefix is kept, no trailing `/`.
    pub server: String,
    /// How the server is checked and the client certificate, if any.
    pub tls: TlsSettings,
    /// The bearer token, if any.
    pub credentials: Credentials,
    /// The context's (or service account's) namespace, if it names one.
    pub namespace: Option<String>,
    /// Where this came from, for logs: `kubeconfig /x/config, context "prod"`.
    pub(crate) source: String,
}

impl ConnectionConfig {
    /// A server with no credentials and the system's trust roots; fill in the rest by field.
    pub fn new(server: &str) -> Result<Self, RestError> {
        Ok(Self {
            server: normalize_server("server", server)?,
            tls: TlsSettings::default(),
            credentials: Credentials::None,
            namespace: None,
            source: format!("server {server}"),
        })
    }

    /// Finds the cluster's configuration as controller-runtime does: `$KUBECONFIG` (the first
    /// file of a colon-separated list; the rest are not merged), else the in-cluster service
    /// account when `KUBERNETES_SERVICE_HOST` is set, else `~/.kube/config`. `None` when there
    /// is none of these; the second value describes the source, for logs.
    pub fn load() -> Result<Option<(Self, String)>, RestError> {
        Self::load_with(SERVICE_ACCOUNT_DIR.as_ref(), |name| {
            std::env::var(name).ok()
        })
    }

    /// [`Self::load`] with the environment and the service-account folder given.
    pub fn load_with(
        service_account: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<(Self, String)>, RestError> {
        let set = |name: &str| env(name).filter(|value| !value.is_empty());
        let config = if let Some(list) = set("KUBECONFIG") {
            let first = list.split(':').find(|path| !path.is_empty()).unwrap_or("");
            Self::from_kubeconfig_file(Path::new(first))?
        } else if set("KUBERNETES_SERVICE_HOST").is_some() {
            Self::from_in_cluster(service_account, &env)?
        } else {
            let Some(home) = set("HOME") else {
                return Ok(None);
            };
            let default = Path::new(&home).join(".kube").join("config");
            if !default.exists() {
                return Ok(None);
            }
            Self::from_kubeconfig_file(&default)?
        };
        let described = format!("{}, server {}", config.source, config.server);
        Ok(Some((config, described)))
    }

    /// The current context of a kubeconfig file.
    pub fn from_kubeconfig_file(path: &Path) -> Result<Self, RestError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| RestError::read("kubeconfig", path, e))?;
        let origin = format!("kubeconfig {}", path.display());
        let file: KubeconfigFile = serde_yaml_ng::from_str(&text)
            .map_err(|e| RestError::invalid(&origin, format!("not a valid kubeconfig: {e}")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Kubeconfig { origin, base, file }.current()
    }

    /// A pod's service account: `root` holds `token`, `ca.crt` and `namespace` (in a pod,
    /// `/var/run/secrets/kubernetes.io/serviceaccount`, where [`Self::load`] reads them); `env`
    /// gives `KUBERNETES_SERVICE_HOST` and `_PORT`.
    pub fn from_in_cluster(
        root: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, RestError> {
        let var = |name: &str| {
            env(name).filter(|value| !value.is_empty()).ok_or_else(|| {
                RestError::invalid("in-cluster configuration", format!("{name} is not set"))
            })
        };
        let host = var("KUBERNETES_SERVICE_HOST")?;
        let port = var("KUBERNETES_SERVICE_PORT")?;
        // An IPv6 service address needs brackets in a URL.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let server = normalize_server("in-cluster server", &format!("https://{host}:{port}"))?;

        let token_path = root.join("token");
        let token_origin = "in-cluster token file".to_owned();
        let text = std::fs::read_to_string(&token_path)
            .map_err(|e| RestError::read(&token_origin, &token_path, e))?;
        Token::new(&format!("{token_origin} {}", token_path.display()), &text)?;

        let ca_path = root.join("ca.crt");
        let ca = std::fs::read(&ca_path)
            .map_err(|e| RestError::read("in-cluster CA file", &ca_path, e))?;
        // The namespace file is there in every pod, but a missing one is no reason to stop.
        let namespace = std::fs::read_to_string(root.join("namespace"))
            .ok()
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty());
        Ok(Self {
            server,
            tls: TlsSettings {
                ca: Some(Pem {
                    origin: format!("in-cluster CA file {}", ca_path.display()),
                    bytes: ca,
                }),
                ..TlsSettings::default()
            },
            credentials: Credentials::TokenFile {
                path: token_path,
                origin: token_origin,
            },
            namespace,
            source: format!("in-cluster service account {}", root.display()),
        })
    }
}

/// Checks a server URL and drops a trailing `/`, so that API paths append to it.
fn normalize_server(origin: &str, server: &str) -> Result<String, RestError> {
    let uri: Uri = server
        .parse()
        .map_err(|e| RestError::invalid(origin, format!("{server:?} is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("https" | "http") => {}
        Some(other) => {
            return Err(RestError::invalid(
                origin,
                format!("{server:?}: the scheme must be https or http, not {other}"),
            ));
        }
        None => {
            return Err(RestError::invalid(
                origin,
                format!("{server:?} needs a scheme (https:// or http://)"),
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(RestError::invalid(
            origin,
            format!("{server:?} names no host"),
        ));
    }
    if uri.query().is_some() {
        return Err(RestError::invalid(
            origin,
            format!("{server:?} must not have a query"),
        ));
    }
    Ok(server.trim_end_matches('/').to_owned())
}

// The kubeconfig format (clientcmd/api/v1), the fields this client uses; others are ignored.

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct KubeconfigFile {
    current_context: String,
    contexts: Vec<Named<ContextEntry>>,
    clusters: Vec<Named<ClusterEntry>>,
    users: Vec<Named<UserEntry>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Named<T: Default> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: T,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ContextEntry {
    cluster: String,
    user: String,
    namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct ClusterEntry {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct UserEntry {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<serde_yaml_ng::Value>,
    auth_provider: Option<serde_yaml_ng::Value>,
}

// By hand: a derived Debug would print the token and the key.
impl fmt::Debug for UserEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserEntry").finish_non_exhaustive()
    }
}

struct Kubeconfig<'a> {
    /// `kubeconfig /x/config`
    origin: String,
    /// Relative paths in the file are relative to its folder.
    base: &'a Path,
    file: KubeconfigFile,
}

impl Kubeconfig<'_> {
    fn invalid(&self, message: impl Into<String>) -> RestError {
        RestError::invalid(&self.origin, message)
    }

    fn current(self) -> Result<ConnectionConfig, RestError> {
        let name = &self.file.current_context;
        if name.is_empty() {
            return Err(self.invalid("current-context is not set"));
        }
        let context = find(&self.file.contexts, name)
            .ok_or_else(|| self.invalid(format!("current-context {name:?} names no context")))?;
        let cluster = find(&self.file.clusters, &context.cluster).ok_or_else(|| {
            self.invalid(format!(
                "contexts[{name}].context.cluster {:?} names no cluster",
                context.cluster
            ))
        })?;
        let user = if context.user.is_empty() {
            None
        } else {
            Some(find(&self.file.users, &context.user).ok_or_else(|| {
                self.invalid(format!(
                    "contexts[{name}].context.user {:?} names no user",
                    context.user
                ))
            })?)
        };

        let cluster_field = |field: &str| format!("clusters[{}].{field}", context.cluster);
        if cluster.server.is_empty() {
            return Err(self.invalid(format!("{} is not set", cluster_field("server"))));
        }
        if cluster.proxy_url.is_some() {
            return Err(self.invalid(format!("{} is not supported", cluster_field("proxy-url"))));
        }
        let server = normalize_server(
            &format!("{}: {}", self.origin, cluster_field("server")),
            &cluster.server,
        )?;
        let ca = self.pem(
            &cluster_field("certificate-authority"),
            cluster.certificate_authority.as_deref(),
            cluster.certificate_authority_data.as_deref(),
        )?;

        // As kubectl: trusting a CA and trusting anyone at once is a mistake, not a choice.
        if cluster.insecure_skip_tls_verify && ca.is_some() {
            return Err(self.invalid(format!(
                "{} is true and a certificate-authority is set; only one is allowed",
                cluster_field("insecure-skip-tls-verify")
            )));
        }
        let mut tls = TlsSettings {
            ca,
            insecure_skip_verify: cluster.insecure_skip_tls_verify,
            server_name: cluster.tls_server_name.clone().filter(|s| !s.is_empty()),
            ..TlsSettings::default()
        };
        let mut credentials = Credentials::None;
        if let Some(user) = user {
            (credentials, tls.client_cert, tls.client_key) = self.user(&context.user, user)?;
        }
        Ok(ConnectionConfig {
            server,
            tls,
            credentials,
            namespace: context.namespace.clone().filter(|ns| !ns.is_empty()),
            source: format!("{}, context {name:?}", self.origin),
        })
    }

    fn user(
        &self,
        name: &str,
        user: &UserEntry,
    ) -> Result<(Credentials, Option<Pem>, Option<Pem>), RestError> {
        let field = |field: &str| format!("users[{name}].{field}");
        let unsupported = |what: &str, why: &str| self.invalid(format!("{} {why}", field(what)));
        if user.exec.is_some() {
            return Err(unsupported(
                "exec",
                "(a credential plugin) is not supported; use a token, tokenFile or client certificate",
            ));
        }
        if user.auth_provider.is_some() {
            return Err(unsupported(
                "auth-provider",
                "is not supported; use a token, tokenFile or client certificate",
            ));
        }
        if user.username.is_some() || user.password.is_some() {
            return Err(unsupported(
                "username",
                "(basic authentication) is not supported",
            ));
        }

        // As client-go: a token file, when given, wins over an inline token.
        let credentials = match (&user.token_file, &user.token) {
            (Some(file), _) if !file.is_empty() => {
                let what = format!("{}: {}", self.origin, field("tokenFile"));
                let path = self.resolve(file);
                let text =
                    std::fs::read_to_string(&path).map_err(|e| RestError::read(&what, &path, e))?;
                Token::new(&format!("{what} {}", path.display()), &text)?;
                Credentials::TokenFile { path, origin: what }
            }
            (_, Some(token)) if !token.is_empty() => Credentials::Token(Token::new(
                &format!("{}: {}", self.origin, field("token")),
                token,
            )?),
            _ => Credentials::None,
        };
        let cert = self.pem(
            &field("client-certificate"),
            user.client_certificate.as_deref(),
            user.client_certificate_data.as_deref(),
        )?;
        let key = self.pem(
            &field("client-key"),
            user.client_key.as_deref(),
            user.client_key_data.as_deref(),
        )?;
        match (&cert, &key) {
            (Some(_), None) => {
                return Err(self.invalid(format!(
                    "{} is set but neither client-key nor client-key-data",
                    field("client-certificate")
                )));
            }
            (None, Some(_)) => {
                return Err(self.invalid(format!(
                    "{} is set but neither client-certificate nor client-certificate-data",
                    field("client-key")
                )));
            }
            _ => {}
        }
        Ok((credentials, cert, key))
    }

    /// A PEM document given inline (`<field>-data`, base64, preferred as in kubectl) or as a
    /// file (`<field>`).
    fn pem(
        &self,
        field: &str,
        file: Option<&str>,
        data: Option<&str>,
    ) -> Result<Option<Pem>, RestError> {
        if let Some(data) = data.filter(|d| !d.is_empty()) {
            let compact: String = data.chars().filter(|c| !c.is_whitespace()).collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|e| self.invalid(format!("{field}-data is not valid base64: {e}")))?;
            return Ok(Some(Pem {
                origin: format!("{}: {field}-data", self.origin),
                bytes,
            }));
        }
        let Some(file) = file.filter(|f| !f.is_empty()) else {
            return Ok(None);
        };
        let path = self.resolve(file);
        let what = format!("{}: {field}", self.origin);
        let bytes = std::fs::read(&path).map_err(|e| RestError::read(&what, &path, e))?;
        Ok(Some(Pem {
            origin: format!("{what} {}", path.display()),
            bytes,
        }))
    }

    fn resolve(&self, file: &str) -> PathBuf {
        let path = Path::new(file);
        if path.is_absolute() {
            path.to_owned()
        } else {
            self.base.join(path)
        }
    }
}

/// The entry named `name`; the first wins, as when kubectl merges files.
fn find<'a, T: Default>(entries: &'a [Named<T>], name: &str) -> Option<&'a T> {
    entries
        .iter()
        .find(|entry| entry.name == name)
        .map(|entry| &entry.value)
}
