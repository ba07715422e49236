//! A controller's `/metrics` read as Prometheus reads it through `deploy/monitoring/`'s
//! ServiceMonitor: over HTTPS, with a bearer token, the server's certificate not verified
//! (`insecureSkipVerify`: each replica makes its own at start). The handshake's signature is
//! still checked, by rustls.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use cubepod_kube::rest::{self, TlsSettings};
use rustls::pki_types::ServerName;

/// The REST client's configuration with `insecure-skip-tls-verify`, speaking HTTP/1.1.
fn client_config() -> std::io::Result<Arc<rustls::ClientConfig>> {
    let settings = TlsSettings {
        insecure_skip_verify: true,
        ..TlsSettings::default()
    };
    let mut config = rest::client_config(&settings).map_err(std::io::Error::other)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// GETs `path` over HTTPS from `addr`, with `token` as the bearer if given: (status, body).
pub fn https_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let name = ServerName::from(addr.ip());
    let connection =
        rustls::ClientConnection::new(client_config()?, name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    tcp.set_read_timeout(Some(Duration::from_secs(15)))?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    match tls.read_to_end(&mut response) {
        Ok(_) => {}
        // A server that closes without close_notify: what came before is the response.
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {
        }
        Err(error) => return Err(error),
    }
    Ok(crate::parse_response(&String::from_utf8_lossy(&response)))
}
