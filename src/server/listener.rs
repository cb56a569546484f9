//! Accept loops: each public listener accepts sockets and hands them to the worker threads,
//! round robin; the workers speak HTTP. On shutdown the socket is closed first, so new
//! clients are refused at once while the workers drain what is open.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::warn;

use super::shutdown::Shutdown;
use super::workers::Workers;

/// One public listener.
pub(crate) struct Listener {
    /// The bound socket.
    pub listener: TcpListener,
    /// `Some` on the TLS listener: the worker runs the handshake before HTTP is spoken.
    pub tls: Option<TlsAcceptor>,
    /// Where accepted connections are served.
    pub workers: Arc<Workers>,
}

impl Listener {
    /// Accept until `shutdown`.
    pub async fn run(self, mut shutdown: Shutdown) {
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => self.workers.dispatch(stream, peer, self.tls.clone()),
                    // EMFILE and friends: back off briefly rather than spin.
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = shutdown.recv() => break,
            }
        }
    }
}
