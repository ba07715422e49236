//! The server's PKI: a fresh CA per server and a server certificate it signs for `localhost` and
//! `127.0.0.1`, so that clients (kubectl, the controller, tests) verify the server exactly as
//! they would a real one. Nothing is written to disk but the CA, in the kubeconfig.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why the server's TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Making the CA or the server certificate failed.
    #[error("generating the API server's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("configuring TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    pub(crate) ca_der: CertificateDer<'static>,
    pub(crate) server_config: Arc<rustls::ServerConfig>,
}

/// The crypto provider of every config here: explicit, so that no process-wide default (or
/// a second provider another crate enables) is needed.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A new CA, and a server config offering h2 and http/1.1 with a certificate it signed.
pub(crate) fn generate() -> Result<Pki, TlsError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "cubepod embedded apiserver CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut params = CertificateParams::new(vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "kubernetes.default.svc".to_owned(),
    ])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &*ca)?;

    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let chain = vec![cert.der().clone(), ca.der().clone()];
    let mut server_config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)?;
    server_config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        server_config: Arc::new(server_config),
    })
}
