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

/// Bytes of messages held before their MAC is checked, on connections that have proved
/// they hold the secret (one message authenticated): taken chunk by chunk as the bytes
/// arrive, so a reader holds only what it was sent; past the budget it waits until
/// `READ_TIMEOUT`. Anyone else cannot touch it, so a host without the secret cannot starve
/// the peers' established links.
const READ_BUDGET: usize = 64 << 20;

/// The same for connections that have not proved anything yet: at least one largest
/// message. A reader past it does not wait (it would queue honest first messages behind
/// stalled ones): its message is refused and the connection closed.
const FRESH_BUDGET: usize = super::wire::MAX_MESSAGE_BYTES;

/// Bytes taken from a budget at a time while a message arrives.
const CHUNK: usize = 64 << 10;

/// Connections that have not yet proved they hold the secret, at most: a new one past
/// this closes the oldest of them (it had its `READ_TIMEOUT` to speak), so silent
/// connections from many addresses cannot keep a restarted peer out.
const MAX_FRESH: usize = MAX_CONNECTIONS / 2;

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
    /// [`FRESH_BUDGET`], one permit a byte.
    fresh_budget: Arc<Semaphore>,
    /// Connections not yet proved, oldest first: closing one is dropping its sender.
    fresh: std::sync::Mutex<std::collections::VecDeque<tokio::sync::oneshot::Sender<()>>>,
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
            fresh_budget: Arc::new(Semaphore::new(FRESH_BUDGET)),
            fresh: std::sync::Mutex::new(std::collections::VecDeque::new()),
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
        let (stream, source) = match listener.accept().await {
            Ok((stream, from)) => (stream, from.ip()),
            Err(e) => {
                // Out of descriptors and the like: do not spin.
                tracing::warn!(error = %e, "peer listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Accepted before a place is sure, and closed at once without one: a full
        // listener must not stop accepting (a blocked accept would keep out the
        // connection that could have evicted a silent one).
        let Ok(place) = places.clone().try_acquire_owned() else {
            tracing::debug!("peer listener: every connection place taken");
            continue;
        };
        let Some(source) = Source::enter(&shared, source) else {
            tracing::debug!(%source, "peer listener: too many connections from one address");
            continue;
        };
        let evicted = admit_fresh(&shared);
        let shared = shared.clone();
        conns.spawn(async move {
            let _place = (place, source);
            connection(stream, shared, evicted).await;
        });
    }
}

/// Register a new, unproved connection (closing the oldest unproved one past
/// [`MAX_FRESH`]); the receiver resolves when it is evicted.
fn admit_fresh<H>(shared: &Shared<H>) -> tokio::sync::oneshot::Receiver<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut fresh = shared.fresh.lock().unwrap_or_else(|e| e.into_inner());
    // Proved or closed connections have dropped their receivers.
    fresh.retain(|t| !t.is_closed());
    if fresh.len() >= MAX_FRESH {
        fresh.pop_front();
    }
    fresh.push_back(tx);
    rx
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
async fn connection<H: PeerHandler>(
    mut stream: TcpStream,
    shared: Arc<Shared<H>>,
    evicted: tokio::sync::oneshot::Receiver<()>,
) {
    let _ = stream.set_nodelay(true);
    // Until a message authenticates: the fresh budget, and closed when evicted.
    let mut fresh = Some(evicted);
    let mut wait = READ_TIMEOUT;
    loop {
        let deadline = tokio::time::Instant::now() + wait;
        let len = match fresh.as_mut() {
            Some(evicted) => tokio::select! {
                len = tokio::time::timeout_at(deadline, frame::read_len(&mut stream)) => len,
                _ = evicted => return,
            },
            None => tokio::time::timeout_at(deadline, frame::read_len(&mut stream)).await,
        };
        let Ok(Ok(len)) = len else {
            return;
        };
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        let budget = match fresh {
            Some(_) => Budget::Fresh(&shared.fresh_budget),
            None => Budget::Proven(&shared.budget),
        };
        let (status, reply) = match read(&mut stream, len, budget, deadline).await {
            Some((message, _held)) => serve(&shared, message).await,
            None => {
                shared.metrics.error("decode");
                (frame::MALFORMED, Bytes::new())
            }
        };
        let write = frame::write(&mut stream, Some(status), &reply);
        if !matches!(tokio::time::timeout_at(deadline, write).await, Ok(Ok(()))) {
            return;
        }
        if status != frame::OK {
            return;
        }
        // Proved: out of the unproved list (its sender sees the receiver gone).
        fresh = None;
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

/// The budget a connection's message is read from.
#[derive(Clone, Copy)]
enum Budget<'a> {
    /// An unproved connection's: taken without waiting, or the message is refused.
    Fresh(&'a Arc<Semaphore>),
    /// A proved connection's: waited for until the deadline.
    Proven(&'a Arc<Semaphore>),
}

/// A message of `len` bytes within [`MAX_MESSAGE_BYTES`] and `deadline`, its bytes taken
/// from `budget` a [`CHUNK`] at a time as they arrive (a stalled sender holds only what
/// it sent) until the returned holder is dropped; `None` when too long, too slow, broken,
/// or past an unproved connection's budget.
async fn read(
    stream: &mut TcpStream,
    len: usize,
    budget: Budget<'_>,
    deadline: tokio::time::Instant,
) -> Option<(Bytes, Held)> {
    use tokio::io::AsyncReadExt;
    if len > MAX_MESSAGE_BYTES {
        return None;
    }
    let (Budget::Fresh(sem) | Budget::Proven(sem)) = budget;
    let mut held = Held {
        budget: sem.clone(),
        bytes: 0,
    };
    let mut buf = bytes::BytesMut::with_capacity(len.min(CHUNK));
    while buf.len() < len {
        let n = (len - buf.len()).min(CHUNK);
        let permits = u32::try_from(n).ok()?;
        let permit = match budget {
            Budget::Fresh(s) => s.try_acquire_many(permits).ok()?,
            Budget::Proven(s) => tokio::time::timeout_at(deadline, s.acquire_many(permits))
                .await
                .ok()?
                .ok()?,
        };
        permit.forget();
        held.bytes += n;
        let start = buf.len();
        buf.resize(start + n, 0);
        tokio::time::timeout_at(deadline, stream.read_exact(&mut buf[start..]))
            .await
            .ok()?
            .ok()?;
    }
    Some((buf.freeze(), held))
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
