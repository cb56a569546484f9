//! Graceful shutdown: the signal every listener and connection watches, as in mini-redis.
//!
//! One `broadcast::Sender<()>` is owned by `server::Server::try_run`; each accept
//! loop (and the membership heartbeat) holds a [`Shutdown`] and stops when the sender fires
//! (or is dropped). Connections hear it from their worker (a `watch` in
//! `server/workers.rs`) and close gracefully. [`signal`] is the process-level trigger:
//! SIGTERM or SIGINT; SIGHUP asks for a config reload. This module imports nothing else of tollgate, so
//! every layer may hold a [`Shutdown`].

use std::future::Future;

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

/// What `tollgate serve` hands to `server::Server::run`: resolves on SIGTERM or SIGINT;
/// each SIGHUP is sent on the receiver (`Server::reload_on`; hangups arriving while a
/// reload is pending make one more reload, not one each). Every handler is installed by
/// this call, not at the first poll, so that a SIGHUP arriving while the server is still
/// binding does not kill the process (the default action of SIGHUP is to terminate): it
/// is kept and reloads once serving. Call it inside the runtime, early; poll the future.
#[cfg(unix)]
pub fn signal() -> (
    impl Future<Output = ()> + Send + 'static,
    tokio::sync::mpsc::Receiver<()>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch {name}");
            None
        }
    };
    let mut term = install(SignalKind::terminate(), "SIGTERM");
    let mut int = install(SignalKind::interrupt(), "SIGINT");
    let mut hup = install(SignalKind::hangup(), "SIGHUP");
    let (hangups, rx) = tokio::sync::mpsc::channel(1);
    let stop = async move {
        loop {
            tokio::select! {
                () = next(&mut term) => return,
                () = next(&mut int) => return,
                () = next(&mut hup) => {
                    tracing::info!("SIGHUP: reloading the config");
                    let _ = hangups.try_send(());
                }
            }
        }
    };
    (stop, rx)
}

/// The next delivery of a watched signal; never, if it could not be watched.
#[cfg(unix)]
async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Resolves on Ctrl-C, where Unix signals do not exist.
#[cfg(not(unix))]
pub fn signal() -> (
    impl Future<Output = ()> + Send + 'static,
    tokio::sync::mpsc::Receiver<()>,
) {
    let (_, rx) = tokio::sync::mpsc::channel(1);
    (
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
        rx,
    )
}
