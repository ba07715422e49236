//! The rustls client configuration: whom to trust (the kubeconfig's CA, else the system's
//! roots, or no one only when the kubeconfig says `insecure-skip-tls-verify: true`) and the
//! client certificate to present.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::{Pem, TlsSettings};
use super::error::RestError;

/// Builds the client configuration; ALPN is left to the connector (h2, then http/1.1).
pub fn client_config(settings: &TlsSettings) -> Result<ClientConfig, RestError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| RestError::invalid("TLS", e.to_string()))?;
    let builder = if settings.insecure_skip_verify {
        tracing::warn!(
            "insecure-skip-tls-verify: true: the API server's certificate is not verified"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipVerification(provider)))
    } else {
        builder.with_root_certificates(roots(settings.ca.as_ref())?)
    };
    match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let private = PrivateKeyDer::from_pem_slice(&key.bytes).map_err(|e| {
                RestError::invalid(
                    &key.origin,
                    format!("holds no PEM private key (PKCS#1, PKCS#8 or SEC1): {e}"),
                )
            })?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| RestError::invalid(&key.origin, format!("unusable client key: {e}")))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The CA bundle, or the system's trust store when none is configured.
fn roots(ca: Option<&Pem>) -> Result<RootCertStore, RestError> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(ca) => {
            for (index, cert) in certificates(ca)?.into_iter().enumerate() {
                store.add(cert).map_err(|e| {
                    RestError::invalid(&ca.origin, format!("certificate {index} is unusable: {e}"))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(RestError::invalid(
                    "TLS",
                    "no certificate-authority is configured and the system has no CA \
                     certificates to trust",
                ));
            }
        }
    }
    Ok(store)
}

/// Every certificate of a PEM document; at least one.
fn certificates(pem: &Pem) -> Result<Vec<CertificateDer<'static>>, RestError> {
    let chain = CertificateDer::pem_slice_iter(&pem.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RestError::invalid(&pem.origin, format!("not a PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(RestError::invalid(
            &pem.origin,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(chain)
}

/// Accepts any server certificate, as `insecure-skip-tls-verify: true` asks; the handshake's
/// signatures are still checked, so the connection is at least to the certificate's holder.
#[derive(Debug)]
struct SkipVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
