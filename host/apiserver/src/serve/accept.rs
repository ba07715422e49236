//! The accept loop: each connection on its own task, TLS (ALPN h2 / http/1.1) when configured,
//! then hyper's auto server, which speaks HTTP/1.1 or HTTP/2 as the client does.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use super::handlers::{self, Shared};

/// A handshake that takes longer is a stuck client: drop it.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                tokio::spawn(connection(stream, tls.clone(), Arc::clone(&shared)));
            }
            // E.g. out of file descriptors: wait a little rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn connection(stream: TcpStream, tls: Option<TlsAcceptor>, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| handlers::handle(Arc::clone(&shared), request));
    let builder = auto::Builder::new(TokioExecutor::new());
    // Connection errors (a client gone, a fault's reset) end only this connection.
    match tls {
        Some(acceptor) => {
            let Ok(Ok(stream)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            else {
                return;
            };
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
        None => {
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    }
}
