//! Graceful shutdown: the signal every listener and connection watches, as in mini-redis.
//!
//! One `broadcast::Sender<()>` is owned by `server::Server::try_run`; each accept
//! loop (and the membership heartbeat) holds a [`Shutdown`] and stops when the sender fires
//! (or is dropped). Connections hear it from their worker (a `watch` in
//! `server/workers.rs`) and close gracefully. [`signals`] (and the older [`signal`]) is
//! the process-level trigger: SIGTERM or SIGINT stops (a second one cuts the drain delay
//! short); SIGHUP asks for a config reload; SIGUSR1 for the access log's file to be
//! reopened (log rotation). This module imports nothing else of tollgate, so every layer
//! may hold a [`Shutdown`].

use std::future::Future;

use tokio::sync::{broadcast, mpsc, watch};

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

/// The process's signals as `tollgate serve` uses them. Every handler is installed by
/// [`signals`], not later, so that a SIGHUP or SIGUSR1 arriving while the server is still
/// binding does not kill the process (the default action of both is to terminate): it is
/// kept and acted on once serving.
#[derive(Debug)]
pub struct Signals {
    /// SIGTERMs and SIGINTs received so far.
    stops: watch::Receiver<u32>,
    /// Each SIGHUP (hangups arriving while a reload is pending make one more reload, not
    /// one each).
    pub hangups: mpsc::Receiver<()>,
    /// Each SIGUSR1, coalesced the same way: reopen the access log's file.
    pub reopens: mpsc::Receiver<()>,
}

impl Signals {
    /// Resolves at the first SIGTERM or SIGINT: stop.
    pub fn stop(&self) -> impl Future<Output = ()> + Send + use<> {
        nth_stop(self.stops.clone(), 1)
    }

    /// Resolves at the second SIGTERM or SIGINT: an operator who asks twice does not want
    /// to wait out the drain delay.
    pub fn hurry(&self) -> impl Future<Output = ()> + Send + use<> {
        nth_stop(self.stops.clone(), 2)
    }
}

async fn nth_stop(mut stops: watch::Receiver<u32>, n: u32) {
    // The sender lives as long as the runtime: a closed channel is no signal.
    if stops.wait_for(|&seen| seen >= n).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Install the handlers and start the task that counts and forwards deliveries. Call it
/// inside the runtime, early.
#[cfg(unix)]
pub fn signals() -> Signals {
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
    let mut usr1 = install(SignalKind::user_defined1(), "SIGUSR1");
    let (stopped, stops) = watch::channel(0u32);
    let (hangups, hangups_rx) = mpsc::channel(1);
    let (reopens, reopens_rx) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = next(&mut term) => stopped.send_modify(|n| *n += 1),
                () = next(&mut int) => stopped.send_modify(|n| *n += 1),
                () = next(&mut hup) => {
                    tracing::info!("SIGHUP: reloading the config");
                    let _ = hangups.try_send(());
                }
                () = next(&mut usr1) => drop(reopens.try_send(())),
            }
        }
    });
    Signals {
        stops,
        hangups: hangups_rx,
        reopens: reopens_rx,
    }
}

/// Ctrl-C stops, where Unix signals do not exist; nothing reloads or reopens.
#[cfg(not(unix))]
pub fn signals() -> Signals {
    let (stopped, stops) = watch::channel(0u32);
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            stopped.send_modify(|n| *n += 1);
        }
    });
    Signals {
        stops,
        hangups: mpsc::channel(1).1,
        reopens: mpsc::channel(1).1,
    }
}

/// [`signals`]' stop and hangups, as `tollgate serve` took them before the drain delay
/// and SIGUSR1: resolves on SIGTERM or SIGINT; each SIGHUP is sent on the receiver
/// (`Server::reload_on`). SIGUSR1 is caught and ignored. Call it inside the runtime, early;
/// poll the future.
pub fn signal() -> (
    impl Future<Output = ()> + Send + 'static,
    mpsc::Receiver<()>,
) {
    let s = signals();
    (s.stop(), s.hangups)
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
