//! Accept loops: each public listener turns sockets into hyper connections served by the
//! gateway service, and drains them on shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::shutdown::Shutdown;
use crate::proxy::{ConnInfo, Gateway};

/// What an accept loop needs besides its socket.
pub(crate) struct Listener {
    /// The bound socket; dropped first on shutdown so new clients are refused at once.
    pub listener: TcpListener,
    /// `Some` on the TLS listener: the handshake runs before HTTP is spoken.
    pub tls: Option<TlsAcceptor>,
    /// The request path shared by every connection.
    pub gateway: Gateway,
    /// HTTP/1.1 + HTTP/2 connection settings (timeouts, head size), built once.
    pub http: Arc<auto::Builder<TokioExecutor>>,
    /// Bounds a TLS handshake like a request head: slow handshakes are slowloris too.
    pub handshake_timeout: Duration,
    /// How long open connections may finish their requests after shutdown.
    pub grace: Duration,
}

impl Listener {
    /// Accept until `shutdown`, then drain open connections for at most `grace`.
    pub async fn run(self, mut shutdown: Shutdown) {
        let graceful = GracefulShutdown::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        self.spawn_connection(stream, peer, &graceful);
                    }
                    // EMFILE and friends: back off briefly rather than spin.
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = shutdown.recv() => break,
            }
        }
        drop(self.listener);
        let open = graceful.count();
        if open > 0 {
            info!(open, "draining connections");
        }
        if tokio::time::timeout(self.grace, graceful.shutdown())
            .await
            .is_err()
        {
            warn!(grace = ?self.grace, "connections still open after shutdown_grace; closing them");
        }
    }

    fn spawn_connection(
        &self,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        graceful: &GracefulShutdown,
    ) {
        let watcher = graceful.watcher();
        let gateway = self.gateway.clone();
        let http = self.http.clone();
        let tls = self.tls.clone();
        let handshake_timeout = self.handshake_timeout;
        tokio::spawn(async move {
            match tls {
                None => {
                    serve(
                        stream,
                        ConnInfo { peer, tls: false },
                        gateway,
                        &http,
                        watcher,
                    )
                    .await
                }
                Some(acceptor) => {
                    match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(tls_stream)) => {
                            serve(
                                tls_stream,
                                ConnInfo { peer, tls: true },
                                gateway,
                                &http,
                                watcher,
                            )
                            .await
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serve one connection (HTTP/1.1 or HTTP/2, detected from its first bytes) until it closes.
async fn serve<I>(
    io: I,
    conn: ConnInfo,
    gateway: Gateway,
    http: &auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(gateway.handle(req, conn).await) }
    });
    let connection = http.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(connection.into_owned()).await {
        debug!(peer = %conn.peer, error = %e, "connection ended with an error");
    }
}
