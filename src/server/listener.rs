//! Accept loops: each public listener accepts sockets and hands them to the worker threads,
//! round robin; the workers speak HTTP. A listener takes a place under `max_connections`
//! before it accepts, so past the cap new clients wait in the kernel's backlog instead of
//! costing a file descriptor each. On shutdown the socket is closed first, so new clients
//! are refused at once while the workers drain what is open.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use super::workers::{Job, Workers};
use crate::shutdown::Shutdown;

/// One public listener.
pub(crate) struct Listener {
    /// The bound socket.
    pub listener: TcpListener,
    /// `Some` on the TLS listener: the worker runs the handshake before HTTP is spoken.
    pub tls: Option<TlsAcceptor>,
    /// Where accepted connections are served.
    pub workers: Arc<Workers>,
    /// `max_connections` places, shared by every public listener of the process.
    pub places: Arc<Semaphore>,
}

impl Listener {
    /// Accept until `shutdown`.
    pub async fn run(self, mut shutdown: Shutdown) {
        let mut errors = AcceptErrors::new("accept failed");
        loop {
            let permit = tokio::select! {
                p = self.places.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break, // closed: never happens while we hold the Arc
                },
                () = shutdown.recv() => break,
            };
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        errors.succeeded();
                        let (tls, accepted) = (self.tls.clone(), Instant::now());
                        self.workers.dispatch(stream, |stream| Job { stream, peer, tls, accepted, permit });
                    }
                    Err(e) => if let Some(wait) = errors.failed(e) {
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = shutdown.recv() => break,
                        }
                    },
                },
                () = shutdown.recv() => break,
            }
        }
    }
}

/// What an accept loop does when `accept()` fails. Out of file descriptors (EMFILE,
/// ENFILE) or memory, every retry fails at once: each failure waits, doubling from 10 ms
/// to 1 s, and at most one line a second is logged, with the number of failures since
/// the last line.
pub(crate) struct AcceptErrors {
    what: &'static str,
    backoff: Duration,
    last_logged: Option<Instant>,
    suppressed: u64,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl AcceptErrors {
    pub fn new(what: &'static str) -> Self {
        AcceptErrors {
            what,
            backoff: FIRST_BACKOFF,
            last_logged: None,
            suppressed: 0,
        }
    }

    /// A connection was accepted: the next failure starts the backoff afresh.
    pub fn succeeded(&mut self) {
        self.backoff = FIRST_BACKOFF;
    }

    /// Log (or count) the failure; returns how long to wait before accepting again.
    pub fn failed(&mut self, e: io::Error) -> Option<Duration> {
        // The client gave up between SYN and accept: nothing is wrong with us, retry now.
        if matches!(
            e.kind(),
            io::ErrorKind::ConnectionAborted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::Interrupted
        ) {
            debug!(error = %e, "{}", self.what);
            return None;
        }
        let now = Instant::now();
        if self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            warn!(error = %e, suppressed = self.suppressed, backoff = ?self.backoff, "{}; backing off", self.what);
            self.last_logged = Some(now);
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Some(wait)
    }
}
