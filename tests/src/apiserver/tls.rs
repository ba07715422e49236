//! A client config trusting one server's CA, for tests that talk to the server themselves.

use cubepod_apiserver::serve::{TlsError, provider};
use rustls::pki_types::CertificateDer;

/// A client config that trusts only `ca` and offers `alpn` (e.g. `[b"h2", b"http/1.1"]`).
pub fn client_config(
    ca: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}
