//! A served certificate, as controller-runtime's metrics server has it: a self-signed one made
//! at start, or certificate and key files (`--metrics-cert-path`, as a cert-manager Secret is
//! mounted; the router's `--router-tls-cert` and `--router-tls-key`), read again when they
//! change so that a renewed certificate is served without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use cubepod_apiserver::serve::provider;

/// How often the files are checked for a change (controller-runtime's certwatcher polls as often).
const POLL: Duration = Duration::from_secs(10);

/// Why a served certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("making a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Pem { path: PathBuf, why: String },
    #[error("the certificate and key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Where the certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    SelfSigned,
    Files { cert: PathBuf, key: PathBuf },
}

/// The certificate served, swapped in place when its files change.
pub(crate) struct Certificate {
    source: Source,
    current: RwLock<(Arc<CertifiedKey>, Option<Stamp>)>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The files' modification times, to notice a change.
type Stamp = (Option<SystemTime>, Option<SystemTime>);

impl Certificate {
    /// Makes or reads the certificate; the files must be readable and hold a matching pair.
    pub(crate) fn new(source: Source) -> Result<Arc<Self>, CertError> {
        let (key, stamp) = match &source {
            Source::SelfSigned => (self_signed()?, None),
            Source::Files { cert, key } => {
                let stamp = stamp(cert, key);
                (read(cert, key)?, Some(stamp))
            }
        };
        Ok(Arc::new(Self {
            source,
            current: RwLock::new((Arc::new(key), stamp)),
        }))
    }

    /// A TLS server config serving this certificate, over HTTP/1.1 only: kubebuilder's scaffold
    /// turns HTTP/2 off on the metrics server (the "rapid reset" and stream floods), and a
    /// scraper needs nothing more.
    pub(crate) fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, CertError> {
        self.server_config_for(&[b"http/1.1"])
    }

    /// A TLS server config serving this certificate, offering the protocols `alpn` (in order
    /// of preference) to clients that ask.
    pub(crate) fn server_config_for(
        self: &Arc<Self>,
        alpn: &[&[u8]],
    ) -> Result<Arc<rustls::ServerConfig>, CertError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }

    /// Reads the files again whenever they change, until `shutdown`; a pair that does not load
    /// is reported and the served certificate stays.
    pub(crate) async fn watch(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        self.watch_every(POLL, shutdown).await;
    }

    async fn watch_every(self: Arc<Self>, poll: Duration, mut shutdown: watch::Receiver<bool>) {
        let Source::Files { cert, key } = &self.source else {
            return;
        };
        loop {
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = shutdown.changed() => return,
            }
            let now = stamp(cert, key);
            let seen = self.lock_read().1;
            if seen == Some(now) {
                continue;
            }
            let (cert_file, key_file) = (cert.clone(), key.clone());
            let loaded = tokio::task::spawn_blocking(move || read(&cert_file, &key_file)).await;
            match loaded {
                Ok(Ok(fresh)) => {
                    *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                        (Arc::new(fresh), Some(now));
                    tracing::info!(certificate = %cert.display(),
                        "certificate files changed, serving the new pair");
                }
                Ok(Err(error)) => {
                    // Not tried again until the files change once more.
                    self.current
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .1 = Some(now);
                    tracing::warn!(certificate = %cert.display(), %error,
                        "the changed certificate files do not load; serving the previous pair");
                }
                Err(error) => {
                    tracing::warn!(certificate = %cert.display(), %error,
                        "reading the certificate files ended abnormally")
                }
            }
        }
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, (Arc<CertifiedKey>, Option<Stamp>)> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.lock_read().0.clone())
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

/// A certificate for `localhost` and the loopback addresses, signed by its own key: what a
/// scraper that skips verification (`insecureSkipVerify`) or pins it needs.
fn self_signed() -> Result<CertifiedKey, CertError> {
    let mut params = CertificateParams::new(vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "cubepod-controller metrics");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok(CertifiedKey::from_der(
        vec![cert.der().clone()],
        key_der,
        &provider(),
    )?)
}

/// The chain of `cert` (PEM, leaf first) and the private key of `key` (PEM), which must match.
fn read(cert: &Path, key: &Path) -> Result<CertifiedKey, CertError> {
    let bytes = |path: &Path| {
        std::fs::read(path).map_err(|source| CertError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let pem = |path: &Path, why: String| CertError::Pem {
        path: path.to_path_buf(),
        why,
    };
    let chain = CertificateDer::pem_slice_iter(&bytes(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(cert, format!("not PEM certificates: {e}")))?;
    if chain.is_empty() {
        return Err(pem(cert, "no CERTIFICATE in it".to_owned()));
    }
    let private = PrivateKeyDer::from_pem_slice(&bytes(key)?)
        .map_err(|e| pem(key, format!("no PEM private key in it: {e}")))?;
    Ok(CertifiedKey::from_der(chain, private, &provider())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
        let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        (cert, key, made.cert.der().to_vec())
    }

    fn served(certificate: &Certificate) -> Vec<u8> {
        certificate.lock_read().0.cert[0].to_vec()
    }

    #[test]
    fn files_are_read_and_a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, der) = write_pair(dir.path(), "a.example");
        let certificate = Certificate::new(Source::Files {
            cert: cert.clone(),
            key: key.clone(),
        })
        .unwrap();
        assert_eq!(served(&certificate), der);

        let other = rcgen::generate_simple_self_signed(vec!["b.example".to_owned()]).unwrap();
        std::fs::write(&key, other.signing_key.serialize_pem()).unwrap();
        let error = Certificate::new(Source::Files {
            cert: cert.clone(),
            key,
        })
        .unwrap_err();
        assert!(error.to_string().contains("certificate and key"), "{error}");
        let missing = Certificate::new(Source::Files {
            cert: dir.path().join("nope.crt"),
            key: cert,
        })
        .unwrap_err();
        assert!(missing.to_string().contains("nope.crt"), "{missing}");
    }

    #[tokio::test]
    async fn changed_files_are_served_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, first) = write_pair(dir.path(), "a.example");
        let certificate = Certificate::new(Source::Files { cert, key }).unwrap();
        assert_eq!(served(&certificate), first);
        // An older stamp stands for "the files changed since they were read".
        certificate.current.write().unwrap().1 = Some((None, None));
        let (_, _, second) = write_pair(dir.path(), "b.example");
        let (stop, shutdown) = watch::channel(false);
        let poll = Duration::from_millis(20);
        let task = tokio::spawn(certificate.clone().watch_every(poll, shutdown));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while served(&certificate) != second {
            assert!(std::time::Instant::now() < deadline, "never reloaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn a_self_signed_certificate_is_made_for_loopback() {
        let certificate = Certificate::new(Source::SelfSigned).unwrap();
        assert_eq!(certificate.lock_read().0.cert.len(), 1);
        assert!(certificate.server_config().is_ok());
    }
}
