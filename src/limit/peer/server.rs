//! The receiving side: a TCP listener that reads framed messages (`frame.rs`) and
//! authenticates each before its handler sees it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use super::frame;
use super::metrics::PeerMetrics;
use super::replay::ReplayGuard;
use super::wire::{self, MAX_MESSAGE_BYTES, Secret, WireError};
use super::{PeerHandler, Request};

/// Open peer connections per process: a fleet needs one per peer and worker thread; the
/// rest of the bound keeps a stray client from exhausting descriptors.
const MAX_CONNECTIONS: usize = 1024;

/// Open connections per source address: a peer keeps one per worker thread; the bound
/// keeps one host that does not hold the secret from taking every place above.
const MAX_PER_SOURCE: usize = 32;

/// Longest a message may take to arrive once its length is read, and how long a new
/// connection has to deliver its first message (a client sends one as soon as it
/// connects: connections are opened for a message). A refused message closes its
/// connection, so a connection that stays open has proved it holds the secret.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// An authenticated connection with no message this long is closed (the client stops
/// reusing a connection after half of it, `client.rs`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Bytes of messages held, across every connection, before their MAC is checked: a
/// message's length comes first, and its bytes are taken from this budget before they are
/// allocated, so whoever can reach the port cannot make the process buffer more. A reader
/// past the budget waits until `READ_TIMEOUT`, then closes its connection.
const READ_BUDGET: usize = 64 << 20;

/// A running peer listener; dropping it stops accepting and closes its connections.
pub struct PeerServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

struct Shared<H> {
    secret: Secret,
    /// This node's peer address: requests must be addressed to it.
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

/// Serve one connection: messages one after another until it is idle, broken, or sends a
/// message that is refused.
async fn connection<H: PeerHandler>(mut stream: TcpStream, shared: Arc<Shared<H>>) {
    let _ = stream.set_nodelay(true);
    let mut wait = READ_TIMEOUT;
    loop {
        let Ok(Ok(len)) = tokio::time::timeout(wait, frame::read_len(&mut stream)).await else {
            return;
        };
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        let (status, reply) = match read(&mut stream, len, &shared.budget, deadline).await {
            Some((message, _held)) => serve(&shared, message).await,
            None => (frame::MALFORMED, Bytes::new()),
        };
        let write = frame::write(&mut stream, Some(status), &reply);
        if !matches!(tokio::time::timeout_at(deadline, write).await, Ok(Ok(()))) {
            return;
        }
        if status != frame::OK {
            return;
        }
        wait = IDLE_TIMEOUT;
    }
}

/// Authenticate one message and hand it to the handler: the reply's status and body.
async fn serve<H: PeerHandler>(shared: &Shared<H>, message: Bytes) -> (u8, Bytes) {
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
        return (frame::FAILED, Bytes::new());
    }
    let reply = wire::seal_reply(&shared.secret, wire::now_ms(), &opened.mac, &response.items);
    (frame::OK, reply)
}

/// A message of `len` bytes within [`MAX_MESSAGE_BYTES`] and `deadline`, its bytes taken
/// from the read budget until the returned holder is dropped; `None` when too long, too
/// slow or broken.
async fn read(
    stream: &mut TcpStream,
    len: usize,
    budget: &Arc<Semaphore>,
    deadline: tokio::time::Instant,
) -> Option<(Bytes, Held)> {
    if len > MAX_MESSAGE_BYTES {
        return None;
    }
    let n = u32::try_from(len).ok()?;
    let permit = tokio::time::timeout_at(deadline, budget.acquire_many(n))
        .await
        .ok()?
        .ok()?;
    permit.forget();
    let held = Held {
        budget: budget.clone(),
        bytes: len,
    };
    let message = tokio::time::timeout_at(deadline, frame::read_body(stream, len))
        .await
        .ok()?
        .ok()?;
    Some((message, held))
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
fn refuse<H>(shared: &Shared<H>, e: WireError) -> (u8, Bytes) {
    shared.metrics.error(e.kind());
    tracing::debug!(error = %e, "peer message refused");
    let status = match e.kind() {
        "auth" => frame::REFUSED,
        _ => frame::MALFORMED,
    };
    (status, Bytes::new())
}
