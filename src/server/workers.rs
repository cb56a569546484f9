//! Worker threads: where connections are served, one thread per core, each with its own
//! single-threaded runtime and its own copy of the request path (so its own pool of
//! upstream connections), like nginx's worker processes. A request then never crosses
//! threads between the client's connection and the upstream's: no cross-thread wake-ups,
//! no contended connection pool. Shared state (limits, metrics) is behind its own locks.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::proxy::{ConnInfo, Gateway};

/// An accepted connection on its way to a worker.
struct Job {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
}

/// Connection settings every worker uses.
#[derive(Clone)]
pub(crate) struct ConnSettings {
    /// HTTP/1.1 + HTTP/2 settings (timeouts, head size), built once.
    pub http: auto::Builder<TokioExecutor>,
    /// Bounds a TLS handshake like a request head: slow handshakes are slowloris too.
    pub handshake_timeout: Duration,
    /// How long open connections may finish their requests after shutdown.
    pub grace: Duration,
}

/// The worker threads and the channels feeding them.
pub(crate) struct Workers {
    senders: Vec<mpsc::UnboundedSender<Job>>,
    /// Round-robin cursor.
    next: AtomicUsize,
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Workers {
    /// Start `n` workers; `gateway` builds each one's request path on its own thread.
    pub fn start(
        n: usize,
        settings: ConnSettings,
        gateway: Arc<dyn Fn() -> Gateway + Send + Sync>,
    ) -> std::io::Result<Workers> {
        let mut senders = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n.max(1) {
            let (tx, rx) = mpsc::unbounded_channel();
            let settings = settings.clone();
            let gateway = gateway.clone();
            let thread = std::thread::Builder::new()
                .name(format!("tollgate-worker-{i}"))
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt.block_on(work(rx, settings, gateway())),
                        Err(e) => warn!(error = %e, "worker runtime failed to start"),
                    }
                })?;
            senders.push(tx);
            threads.push(thread);
        }
        Ok(Workers {
            senders,
            next: AtomicUsize::new(0),
            threads: std::sync::Mutex::new(threads),
        })
    }

    /// Hand an accepted connection to the next worker.
    pub fn dispatch(
        &self,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        tls: Option<TlsAcceptor>,
    ) {
        let _ = stream.set_nodelay(true);
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.senders.len();
        let _ = self.senders[i].send(Job { stream, peer, tls });
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

/// One worker: serve connections until the channel closes, then drain.
async fn work(mut jobs: mpsc::UnboundedReceiver<Job>, settings: ConnSettings, gateway: Gateway) {
    let graceful = GracefulShutdown::new();
    let settings = Arc::new(settings);
    while let Some(job) = jobs.recv().await {
        let watcher = graceful.watcher();
        let gateway = gateway.clone();
        let settings = settings.clone();
        tokio::spawn(async move { connection(job, gateway, &settings, watcher).await });
    }
    let open = graceful.count();
    if open > 0 {
        info!(open, "draining connections");
    }
    if tokio::time::timeout(settings.grace, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(grace = ?settings.grace, "connections still open after shutdown_grace; closing them");
    }
}

async fn connection(job: Job, gateway: Gateway, settings: &ConnSettings, watcher: Watcher) {
    let Job { stream, peer, tls } = job;
    let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
        return;
    };
    match tls {
        None => {
            serve(
                stream,
                ConnInfo::new(peer, false),
                gateway,
                &settings.http,
                watcher,
            )
            .await
        }
        Some(acceptor) => {
            match tokio::time::timeout(settings.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls_stream)) => {
                    serve(
                        tls_stream,
                        ConnInfo::new(peer, true),
                        gateway,
                        &settings.http,
                        watcher,
                    )
                    .await
                }
                Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => debug!(%peer, "TLS handshake timed out"),
            }
        }
    }
}

/// Serve one connection (HTTP/1.1 or HTTP/2, detected from its first bytes) until it closes.
async fn serve<I>(
    io: I,
    conn: ConnInfo,
    gateway: Gateway,
    http: &auto::Builder<TokioExecutor>,
    watcher: Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = conn.peer;
    let service = service_fn(move |req| {
        let gateway = gateway.clone();
        let conn = conn.clone();
        async move { Ok::<_, Infallible>(gateway.handle(req, conn).await) }
    });
    let connection = http.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(connection.into_owned()).await {
        debug!(%peer, error = %e, "connection ended with an error");
    }
}
