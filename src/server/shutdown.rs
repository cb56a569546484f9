//! Graceful shutdown: the signal every listener and connection watches, as in mini-redis.
//!
//! One `broadcast::Sender<()>` is owned by [`super::Server::run`]; each accept loop holds a
//! [`Shutdown`] and stops accepting when the sender fires (or is dropped).

use tokio::sync::broadcast;

/// Listens for the server's shutdown signal.
#[derive(Debug)]
pub struct Shutdown {
    /// True once the signal was received, so later calls return at once.
    is_shutdown: bool,
    /// The receiving half; only one value is ever sent.
    notify: broadcast::Receiver<()>,
}

impl Shutdown {
    pub fn new(notify: broadcast::Receiver<()>) -> Self {
        Shutdown {
            is_shutdown: false,
            notify,
        }
    }

    pub fn is_shutdown(&self) -> bool {
        self.is_shutdown
    }

    /// Wait for the signal; a dropped sender counts as a signal.
    pub async fn recv(&mut self) {
        if self.is_shutdown {
            return;
        }
        let _ = self.notify.recv().await;
        self.is_shutdown = true;
    }
}

/// Resolves on SIGTERM or SIGINT: what `tollgate serve` hands to [`super::Server::run`].
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
