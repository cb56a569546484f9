//! Worker threads: where connections are served, one thread per core, each with its own
//! single-threaded runtime and its own copy of the request path (so its own pool of
//! upstream connections), like nginx's worker processes. A request then never crosses
//! threads between the client's connection and the upstream's: no cross-thread wake-ups,
//! no contended connection pool. Shared state (limits, metrics) is behind its own locks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper_util::server::conn::auto;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::activity::{Activity, Timeouts};
use super::conn::{self, Ended};
use super::cuts::{Cut, Cuts};
use super::reload::{Live, WorkerGateway};
use super::stall::StreamExec;
use crate::proxy::ConnInfo;

/// An accepted connection on its way to a worker.
pub(crate) struct Job {
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub tls: Option<TlsAcceptor>,
    /// When the listener accepted it: `header_timeout` runs from here, queueing included.
    pub accepted: Instant,
    /// Its place under `max_connections`, given back when the connection ends.
    pub permit: OwnedSemaphorePermit,
}

/// Connection settings every worker uses.
#[derive(Clone)]
pub(crate) struct ConnSettings {
    /// HTTP/1.1 + HTTP/2 settings (head size, HTTP/2 timer), built once.
    pub http: auto::Builder<StreamExec>,
    /// Head and idle bounds, enforced by the connection driver.
    pub timeouts: Timeouts,
    /// How long open connections may finish their requests after shutdown.
    pub grace: Duration,
    /// Where a connection cut for a broken time bound is counted.
    pub cuts: Cuts,
}

/// The worker threads and the channels feeding them.
pub(crate) struct Workers {
    senders: Vec<mpsc::UnboundedSender<Job>>,
    /// Round-robin cursor.
    next: AtomicUsize,
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Workers {
    /// Start `n` workers; each builds its request path from `live` on its own thread (and
    /// again after every reload).
    /// Returns once every worker has its runtime, or with the first failure reported (no
    /// thread, or no runtime: each needs its own descriptors) after stopping the others: a
    /// worker that died at start would silently drop every connection sent to it.
    ///
    ///
    /// Each worker then warms its own store connection (`Limiter::warm`: dialled and the
    /// scripts loaded on the worker's runtime, which drives it) and says so on `warmed`,
    /// before it takes its first connection: the caller waits for those (asynchronously:
    /// the store may be reached through its own runtime) before it says ready, so the first
    /// requests do not spend their store timeout on a dial.
    pub fn start(
        n: usize,
        settings: ConnSettings,
        live: Arc<Live>,
        limiter: Arc<crate::limit::Limiter>,
        warmed: mpsc::UnboundedSender<()>,
    ) -> std::io::Result<Workers> {
        let n = n.max(1);
        let mut senders = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        let (ready_tx, ready) = std::sync::mpsc::channel::<std::io::Result<()>>();
        let failed = move |what: &str, i: usize, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("worker {} of {n}: {what}: {e}", i + 1))
        };
        let mut outcome = Ok(());
        for i in 0..n {
            let (tx, rx) = mpsc::unbounded_channel();
            let settings = settings.clone();
            let live = live.clone();
            let limiter = limiter.clone();
            let warmed = warmed.clone();
            let ready_tx = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("tollgate-worker-{i}"))
                .spawn(move || {
                    crate::limit::store::bind_worker(i);
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    match rt {
                        Ok(rt) => {
                            let _ = ready_tx.send(Ok(()));
                            drop(ready_tx);
                            if let Err(e) = rt.block_on(limiter.warm()) {
                                warn!(worker = i, error = %e, "store connection not made before serving; the first requests make it");
                            }
                            drop(limiter);
                            let _ = warmed.send(());
                            drop(warmed);
                            rt.block_on(work(rx, settings, live.worker()));
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(failed("async runtime", i, e)));
                        }
                    }
                });
            match spawned {
                Ok(thread) => {
                    senders.push(tx);
                    threads.push(thread);
                }
                Err(e) => {
                    outcome = Err(failed("thread", i, e));
                    break;
                }
            }
        }
        drop(ready_tx);
        // One report per spawned thread (a thread that died before reporting ends the
        // channel early: that is a failure too).
        for _ in 0..threads.len() {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    outcome = outcome.and(Err(e));
                }
                Err(_) => {
                    outcome = outcome.and(Err(std::io::Error::other(
                        "a worker thread exited before its runtime started",
                    )));
                    break;
                }
            }
        }
        let workers = Workers {
            senders,
            next: AtomicUsize::new(0),
            threads: std::sync::Mutex::new(threads),
        };
        match outcome {
            Ok(()) => Ok(workers),
            Err(e) => {
                // The started workers see their channel close and end at once.
                workers.shutdown();
                Err(e)
            }
        }
    }

    /// Hand an accepted connection to the next worker.
    pub fn dispatch(
        &self,
        stream: tokio::net::TcpStream,
        job: impl FnOnce(std::net::TcpStream) -> Job,
    ) {
        let _ = stream.set_nodelay(true);
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.senders.len();
        let _ = self.senders[i].send(job(stream));
    }

    /// Stop feeding the workers and wait until each has drained (within its grace).
    pub fn shutdown(self) {
        drop(self.senders);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// One worker: serve connections until the channel closes, then drain. Every connection
/// holds a receiver of `stop`, so `stop.closed()` is "every connection has ended"; those
/// still open after the grace are dropped with the runtime when this returns.
async fn work(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    settings: ConnSettings,
    gateway: WorkerGateway,
) {
    let (stop, _) = watch::channel(false);
    let settings = Arc::new(settings);
    while let Some(job) = jobs.recv().await {
        let (gateway, settings, stop) = (gateway.clone(), settings.clone(), stop.subscribe());
        tokio::spawn(connection(job, gateway, settings, stop));
    }
    let _ = stop.send(true);
    let open = stop.receiver_count();
    if open > 0 {
        info!(open, "draining connections");
    }
    if tokio::time::timeout(settings.grace, stop.closed())
        .await
        .is_err()
    {
        warn!(grace = ?settings.grace, open = stop.receiver_count(), "connections still open after shutdown_grace; closing them");
    }
}

/// One connection from accept to close: the TLS handshake (within the first head's
/// deadline), then HTTP through the driver.
async fn connection(
    job: Job,
    gateway: WorkerGateway,
    settings: Arc<ConnSettings>,
    mut stop: watch::Receiver<bool>,
) {
    let Job {
        stream,
        peer,
        tls,
        accepted,
        permit: _permit,
    } = job;
    let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
        return;
    };
    let activity = Activity::new(accepted);
    let t = &settings.timeouts;
    let ended = match tls {
        None => {
            serve(
                stream, false, peer, &gateway, &settings, activity, &mut stop,
            )
            .await
        }
        Some(acceptor) => {
            let deadline = activity.first_head_deadline(t);
            let tls_stream = tokio::select! {
                r = acceptor.accept(stream) => match r {
                    Ok(s) => s,
                    Err(e) => return debug!(%peer, error = %e, "TLS handshake failed"),
                },
                () = tokio::time::sleep_until(deadline.into()) => {
                    settings.cuts.count(Cut::Handshake);
                    return debug!(%peer, why = Cut::Handshake.why(), "connection closed");
                }
                () = conn::stopped(&mut stop) => return,
            };
            serve(
                tls_stream, true, peer, &gateway, &settings, activity, &mut stop,
            )
            .await
        }
    };
    match ended {
        Ended::Done => {}
        Ended::TimedOut(cut) => {
            settings.cuts.count(cut);
            debug!(%peer, why = cut.why(), "connection closed");
        }
        Ended::Failed(e) => {
            if let Some(status) = conn::refused_status(&*e) {
                gateway.current().record_refused(status, peer.ip());
            }
            debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// Serve HTTP on `io` (plain, or TLS after its handshake) with the request path.
async fn serve<I>(
    io: I,
    tls: bool,
    peer: SocketAddr,
    gateway: &WorkerGateway,
    settings: &ConnSettings,
    activity: Arc<Activity>,
    stop: &mut watch::Receiver<bool>,
) -> Ended
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (gateway, info) = (gateway.clone(), ConnInfo::new(peer, tls));
    let handler = move |req| {
        // The running config's request path: a reload applies from the next request on,
        // on this connection too; a request in flight keeps the one it started with.
        let (gateway, info) = (gateway.current(), info.clone());
        // Boxed here, once, with no `async` wrapper (which would copy it again when first
        // polled): the request's future is kilobytes (limit step, upstream call, timers),
        // and hyper moves the service's future into its slot by value, so unboxed it was
        // copied three times a request (callgrind: ~18 % of the proxy's instructions were
        // that memcpy). A box moves as a pointer.
        Box::pin(gateway.handle(req, info))
    };
    let t = &settings.timeouts;
    conn::drive(io, &settings.http, activity, t, handler, stop).await
}
