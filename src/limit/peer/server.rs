//! The receiving side: an h2c listener that authenticates each message before its handler
//! sees it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use super::metrics::PeerMetrics;
use super::replay::ReplayGuard;
use super::wire::{self, MAX_MESSAGE_BYTES, Secret, WireError};
use super::{PeerHandler, Request};

/// Open peer connections per process: a fleet needs one per peer; the rest of the bound
/// keeps a stray client from exhausting descriptors.
const MAX_CONNECTIONS: usize = 1024;

/// Open connections per source address: a peer keeps one; the bound keeps one host that
/// does not hold the secret from taking every place above.
const MAX_PER_SOURCE: usize = 32;

/// Streams per connection: a client sends one message at a time per peer (`client.rs`).
const MAX_STREAMS: u32 = 8;

/// Longest a message body may take to arrive, and how long a new connection has to deliver
/// its first authentic message before it is closed (a client sends one as soon as it
/// connects: connections are opened for a message).
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes of message bodies held, across every connection, before their MAC is checked:
/// bodies are read in full first, so without this bound anyone who can reach the port could
/// make the process buffer 16 MiB per stream. A reader past the budget waits (its sender
/// stalls on h2 flow control) until `READ_TIMEOUT`.
const READ_BUDGET: usize = 64 << 20;

/// Idle connections are pinged this often (h2 PING), and closed when a ping is not answered
/// within `KEEP_ALIVE_TIMEOUT`: a peer that vanished without a FIN frees its place.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running peer listener; dropping it stops accepting and closes its connections.
pub struct PeerServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

struct Shared<H> {
    secret: Secret,
    /// This node's name in replies.
    me: String,
    handler: Arc<H>,
    metrics: PeerMetrics,
    replay: ReplayGuard,
    /// [`READ_BUDGET`], one permit a byte.
    budget: Arc<Semaphore>,
    /// Open connections per source address.
    sources: std::sync::Mutex<HashMap<IpAddr, usize>>,
}

impl PeerServer {
    /// Listen on `listen` (port 0 picks a free one) and serve `handler` there.
    pub async fn bind<H: PeerHandler>(
        listen: SocketAddr,
        secret: Secret,
        handler: Arc<H>,
        metrics: PeerMetrics,
    ) -> std::io::Result<PeerServer> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            secret,
            me: local_addr.to_string(),
            handler,
            metrics,
            replay: ReplayGuard::new(),
            budget: Arc::new(Semaphore::new(READ_BUDGET)),
            sources: std::sync::Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(accept(listener, shared));
        Ok(PeerServer { local_addr, task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        // The accept task owns the connections' JoinSet: aborting it aborts them all.
        self.task.abort();
    }
}

async fn accept<H: PeerHandler>(listener: TcpListener, shared: Arc<Shared<H>>) {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let Ok(place) = places.clone().acquire_owned().await else {
            return;
        };
        let (stream, source) = match listener.accept().await {
            Ok((stream, from)) => (stream, from.ip()),
            Err(e) => {
                // Out of descriptors and the like: do not spin.
                tracing::warn!(error = %e, "peer listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(source) = Source::enter(&shared, source) else {
            tracing::debug!(%source, "peer listener: too many connections from one address");
            continue;
        };
        let shared = shared.clone();
        conns.spawn(async move {
            let _place = (place, source);
            connection(stream, shared).await;
        });
    }
}

/// One connection's place among those of its source address; given back on drop.
struct Source<H> {
    shared: Arc<Shared<H>>,
    ip: IpAddr,
}

impl<H> Source<H> {
    fn enter(shared: &Arc<Shared<H>>, ip: IpAddr) -> Option<Self> {
        let mut sources = shared.sources.lock().unwrap_or_else(|e| e.into_inner());
        let open = sources.entry(ip).or_insert(0);
        if *open >= MAX_PER_SOURCE {
            return None;
        }
        *open += 1;
        Some(Source {
            shared: shared.clone(),
            ip,
        })
    }
}

impl<H> Drop for Source<H> {
    fn drop(&mut self) {
        let mut sources = self
            .shared
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(open) = sources.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                sources.remove(&self.ip);
            }
        }
    }
}

/// Serve one connection; closed after [`READ_TIMEOUT`] unless an authentic message came.
async fn connection<H: PeerHandler>(stream: TcpStream, shared: Arc<Shared<H>>) {
    let _ = stream.set_nodelay(true);
    let authentic = Arc::new(AtomicBool::new(false));
    let seen = authentic.clone();
    let service = service_fn(move |req| {
        let (shared, seen) = (shared.clone(), seen.clone());
        async move { Ok::<_, Infallible>(serve(&shared, &seen, req).await) }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = &mut conn => Some(ended),
        () = tokio::time::sleep(READ_TIMEOUT) => None,
    };
    let ended = match ended {
        Some(ended) => ended,
        // Dropping the connection closes it.
        None if !authentic.load(Ordering::Relaxed) => {
            tracing::debug!("peer connection closed: no authentic message in time");
            return;
        }
        None => conn.await,
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "peer connection ended");
    }
}

async fn serve<H: PeerHandler>(
    shared: &Shared<H>,
    authentic: &AtomicBool,
    req: http::Request<Incoming>,
) -> http::Response<Full<Bytes>> {
    if req.uri().path() != wire::PATH {
        return status(StatusCode::NOT_FOUND);
    }
    if req.method() != Method::POST {
        return status(StatusCode::METHOD_NOT_ALLOWED);
    }
    let (message, _held) = match read(req.into_body(), &shared.budget).await {
        Some(read) => read,
        None => return refuse(shared, WireError::Malformed),
    };
    let opened = match wire::open_request(&shared.secret, &message, wire::now_ms()) {
        Ok(opened) => opened,
        Err(e) => return refuse(shared, e),
    };
    if opened.to != shared.me {
        return refuse(shared, WireError::Misdirected);
    }
    // Only authenticated MACs are remembered: forgeries cannot fill the guard.
    if !shared.replay.first_time(&opened.mac) {
        return refuse(shared, WireError::Replayed);
    }
    let Ok(from) = opened.sender.parse::<SocketAddr>() else {
        return refuse(shared, WireError::Malformed);
    };
    authentic.store(true, Ordering::Relaxed);
    let asked = opened.items.len();
    let request = Request {
        items: opened.items,
    };
    let response = shared.handler.handle(from, request).await;
    if response.items.len() != asked {
        tracing::error!(
            asked,
            answered = response.items.len(),
            "peer handler answered a different number of items"
        );
        return status(StatusCode::INTERNAL_SERVER_ERROR);
    }
    let reply = wire::seal_reply(
        &shared.secret,
        &shared.me,
        wire::now_ms(),
        &opened.mac,
        &response.items,
    );
    let mut res = http::Response::new(Full::new(reply));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    res
}

/// A whole message body within [`MAX_MESSAGE_BYTES`] and [`READ_TIMEOUT`], its bytes taken
/// from the read budget until the returned holder is dropped; `None` when too long, too
/// slow or broken.
async fn read(mut body: Incoming, budget: &Arc<Semaphore>) -> Option<(Bytes, Held)> {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let mut held = Held {
        budget: budget.clone(),
        bytes: 0,
    };
    let mut buf = BytesMut::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await.ok()? {
            None => return Some((buf.freeze(), held)),
            Some(frame) => frame.ok()?,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > MAX_MESSAGE_BYTES {
            return None;
        }
        let n = u32::try_from(data.len()).ok()?;
        let permit = tokio::time::timeout_at(deadline, budget.acquire_many(n))
            .await
            .ok()?
            .ok()?;
        permit.forget();
        held.bytes += n as usize;
        buf.extend_from_slice(&data);
    }
}

/// Bytes taken from the read budget; given back on drop.
struct Held {
    budget: Arc<Semaphore>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.add_permits(self.bytes);
    }
}

/// Count a refused message and answer without a word on why.
fn refuse<H>(shared: &Shared<H>, e: WireError) -> http::Response<Full<Bytes>> {
    shared.metrics.error(e.kind());
    tracing::debug!(error = %e, "peer message refused");
    status(match e.kind() {
        "auth" => StatusCode::UNAUTHORIZED,
        _ => StatusCode::BAD_REQUEST,
    })
}

fn status(code: StatusCode) -> http::Response<Full<Bytes>> {
    let mut res = http::Response::new(Full::new(Bytes::new()));
    *res.status_mut() = code;
    res
}
