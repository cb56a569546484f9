//! The calling side: one TCP connection per peer and one message in flight per peer, with
//! the calls that arrive meanwhile queued for the next message — per calling thread. The
//! gateway's workers each run a runtime on their own thread; a worker's asks queue, leave,
//! and are answered on its own connection, driven on its own thread, so an ask never wakes
//! another thread (each cross-thread wake-up cost the asker microseconds: BENCHMARKS.md).
//! Coalescing is per thread: a fleet of N workers per node holds N connections per peer.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use hashbrown::HashMap;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::frame;
use super::metrics::PeerMetrics;
use super::waiters::{Answer, BatchItems, Reply, Waiter, deliver, drop_gone, take_batch};
use super::wire::{self, MAX_MESSAGE_BYTES, Op, Secret, WireError};

/// Items per message; calls beyond it wait for the next message (a single larger call
/// still goes whole).
pub const MAX_BATCH_ITEMS: usize = 4096;

/// Item bytes per message, the same way: a quarter of what a receiver reads, so headers,
/// per-item framing and one large call on top stay within [`MAX_MESSAGE_BYTES`].
pub const MAX_BATCH_BYTES: usize = MAX_MESSAGE_BYTES / 4;

/// Why a call failed. Cloned to every call a failed message carried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// No answer within the client's timeout.
    #[error("peer call timed out")]
    Timeout,
    /// The peer could not be reached.
    #[error("cannot connect to peer: {0}")]
    Connect(String),
    /// The connection failed while the message was on it.
    #[error("peer connection failed: {0}")]
    Send(String),
    /// The peer refused the message (401: it does not share our secret, or our clock is off).
    #[error("peer answered {0}")]
    Status(u16),
    /// The reply's MAC is wrong: not from a peer holding the secret, or not for this request.
    #[error("peer reply failed authentication")]
    Auth,
    /// The reply is authentic but not shaped as this request's answer.
    #[error("peer reply malformed")]
    Decode,
}

impl PeerError {
    /// The `kind` label of `tollgate_peer_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerError::Timeout => "timeout",
            PeerError::Connect(_) => "connect",
            PeerError::Send(_) => "send",
            PeerError::Status(_) => "status",
            PeerError::Auth => "auth",
            PeerError::Decode => "decode",
        }
    }
}

/// Calls other peers; cheap to clone, one per process.
#[derive(Clone)]
pub struct PeerClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// This node's peer address, as it signs its messages.
    me: String,
    secret: Secret,
    timeout: Duration,
    metrics: PeerMetrics,
    nonce: AtomicU64,
    /// This client's id among the process's (the thread-local links are keyed by it).
    id: u64,
    /// Told once per message whether the peer answered it (not once per call: the calls a
    /// failed message carried are one failure of the peer, not many).
    observer: Option<Observer>,
}

/// Hears `(peer, answered)` once per message.
pub type Observer = Box<dyn Fn(SocketAddr, bool) + Send + Sync>;

/// Everything about one peer.
struct Link {
    addr: SocketAddr,
    /// `addr` as messages name their recipient (made once).
    to: String,
    queue: Mutex<Queue>,
    /// The open connection between messages, and when it last carried one; only the
    /// flushing task uses it, taking it out for a message (a message cut short by a timeout
    /// so drops its connection: the next reply read can never be another message's).
    conn: Mutex<Option<(TcpStream, Instant)>>,
}

/// A connection idle this long is not reused (the server closes idle connections after
/// twice as long, so a reused one is never closed under a message).
const REUSE_IDLE: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    /// A flushing task runs for this peer (so a message is in flight or about to be).
    in_flight: bool,
}

impl PeerClient {
    /// `me` is this node's own peer address (its `peer_listen`); `timeout` bounds each call
    /// (and each message, connecting included). Calls must be made inside a runtime: each
    /// calling thread's messages are sent and its connections driven on it.
    pub fn new(me: SocketAddr, secret: Secret, timeout: Duration, metrics: PeerMetrics) -> Self {
        Self::observed(me, secret, timeout, metrics, None)
    }

    /// [`PeerClient::new`] with an observer of every message's outcome.
    pub fn observed(
        me: SocketAddr,
        secret: Secret,
        timeout: Duration,
        metrics: PeerMetrics,
        observer: Option<Observer>,
    ) -> Self {
        PeerClient {
            inner: Arc::new(Inner {
                me: me.to_string(),
                secret,
                timeout,
                metrics,
                // A random start: a restarted node does not repeat its earlier nonces.
                nonce: AtomicU64::new(RandomState::new().hash_one(Instant::now())),
                id: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
                observer,
            }),
        }
    }

    /// The bound of each call.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Send `items` to `peer` for `op` and wait for one reply per item, in order. Calls to
    /// the same peer made while a message to it is in flight share the next message.
    pub async fn call(&self, peer: SocketAddr, op: Op, items: Vec<Bytes>) -> Answer {
        let inner = &self.inner;
        inner.metrics.call(op);
        let started = Instant::now();
        let (tx, rx) = oneshot::channel();
        self.enqueue(peer, op, items, Reply::Wait(tx));
        let answer = match tokio::time::timeout(inner.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            // The flushing task ended without answering (the runtime is shutting down).
            Ok(Err(_)) => Err(PeerError::Send("peer client stopped".into())),
            Err(_) => Err(PeerError::Timeout),
        };
        match &answer {
            Ok(_) => inner.metrics.latency(started.elapsed()),
            Err(e) => inner.metrics.error(e.kind()),
        }
        answer
    }

    /// [`PeerClient::call`] with no caller waiting: `then` hears the answer (`Timeout` if
    /// the call is still unsent `timeout` from now) from the task that sends the message,
    /// on this thread. For pushes: a task per call to await it cost a spawn, a timer and a
    /// channel per peer message, a third of what a gossip push cost its sender under
    /// callgrind (BENCHMARKS.md, issue 12). `then` must not block.
    pub fn send(
        &self,
        peer: SocketAddr,
        op: Op,
        items: Vec<Bytes>,
        then: impl FnOnce(Answer) + Send + Sync + 'static,
    ) {
        self.inner.metrics.call(op);
        let started = Instant::now();
        let f = Box::new(then);
        self.enqueue(peer, op, items, Reply::Then { started, f });
    }

    /// Queue a call for `peer`, and start its flushing task if none runs.
    fn enqueue(&self, peer: SocketAddr, op: Op, items: Vec<Bytes>, reply: Reply) {
        let link = self.inner.link(peer);
        let wait_first = matches!(reply, Reply::Wait(_));
        let start_flush = {
            let mut q = lock(&link.queue);
            q.waiting.push_back(Waiter { op, items, reply });
            !std::mem::replace(&mut q.in_flight, true)
        };
        if start_flush {
            tokio::spawn(flush(self.inner.clone(), link, wait_first));
        }
    }
}

/// Client ids.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's links, by client id and peer. Hashed with hashbrown's foldhash rather
    /// than SipHash: one lookup per call, and the keys are the fleet's own addresses.
    static LINKS: RefCell<HashMap<(u64, SocketAddr), Arc<Link>>> = RefCell::new(HashMap::new());
}

impl Inner {
    /// This thread's link to `peer`.
    fn link(&self, peer: SocketAddr) -> Arc<Link> {
        LINKS.with_borrow_mut(|links| {
            links
                .entry((self.id, peer))
                .or_insert_with(|| {
                    Arc::new(Link {
                        addr: peer,
                        to: peer.to_string(),
                        queue: Mutex::new(Queue::default()),
                        conn: Mutex::new(None),
                    })
                })
                .clone()
        })
    }
}

/// Send what is queued for `link`, one message at a time, until the queue is empty.
/// `wait_first`: whether the first message waits for the thread's other ready tasks too (a
/// call's; not a push's, sent from a loop that has no requests to coalesce with).
async fn flush(inner: Arc<Inner>, link: Arc<Link>, wait_first: bool) {
    let mut wait = wait_first;
    loop {
        // Let the other tasks of this thread that are ready run first: the requests among
        // them that ask the same peer join this message (fewer, larger messages; no timer).
        if std::mem::replace(&mut wait, true) {
            // After a message, with nothing queued, stop rather than wait first: a call
            // made later starts a flush of its own, which waits for its thread's tasks.
            {
                let mut q = lock(&link.queue);
                if q.waiting.is_empty() {
                    q.in_flight = false;
                    return;
                }
            }
            tokio::task::yield_now().await;
        }
        let (batch, expired) = {
            let mut q = lock(&link.queue);
            let expired = drop_gone(&mut q.waiting, inner.timeout);
            if q.waiting.is_empty() {
                q.in_flight = false;
                (None, expired)
            } else {
                (Some(take_batch(&mut q.waiting)), expired)
            }
        };
        // Callbacks run outside the queue's lock (one may queue another call).
        for w in expired {
            deliver(&inner.metrics, w, Err(PeerError::Timeout));
        }
        let Some(batch) = batch else {
            return;
        };
        let items = BatchItems::new(&batch);
        let answer = tokio::time::timeout(inner.timeout, exchange(&inner, &link, items))
            .await
            .unwrap_or(Err(PeerError::Timeout));
        if let Some(observe) = &inner.observer {
            observe(link.addr, answer.is_ok());
        }
        match answer {
            Ok(replies) => {
                let mut replies = replies.into_iter();
                for w in batch {
                    let mine = replies.by_ref().take(w.items.len()).collect();
                    deliver(&inner.metrics, w, Ok(mine));
                }
            }
            Err(e) => {
                for w in batch {
                    deliver(&inner.metrics, w, Err(e.clone()));
                }
            }
        }
    }
}

/// One message and its reply, on the link's connection (opened if there is none).
async fn exchange(inner: &Inner, link: &Link, items: BatchItems<'_>) -> Answer {
    let reuse = lock(&link.conn)
        .take()
        .filter(|(_, used)| used.elapsed() < REUSE_IDLE);
    let mut stream = match reuse {
        Some((stream, _)) => stream,
        None => {
            let stream = TcpStream::connect(link.addr)
                .await
                .map_err(|e| PeerError::Connect(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            stream
        }
    };
    let nonce = inner.nonce.fetch_add(1, Ordering::Relaxed);
    let count = items.clone().count();
    let (mac, message) = wire::seal_items(
        &inner.secret,
        &inner.me,
        &link.to,
        wire::now_ms(),
        nonce,
        items,
    );
    let send = |e: std::io::Error| PeerError::Send(e.to_string());
    frame::write(&mut stream, None, &message)
        .await
        .map_err(send)?;
    // Room after the reply for the request's MAC, which the reply's MAC covers last.
    let mut reply = frame::read_reply(&mut stream, MAX_MESSAGE_BYTES + 1, wire::MAC_LEN)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => PeerError::Decode,
            _ => send(e),
        })?;
    if reply[0] != frame::OK {
        return Err(PeerError::Status(frame::status_code(reply[0])));
    }
    reply.advance(1);
    let replies = wire::open_reply(&inner.secret, reply, &mac).map_err(|e| match e {
        WireError::Malformed => PeerError::Decode,
        WireError::Stale | WireError::BadMac | WireError::Replayed | WireError::Misdirected => {
            PeerError::Auth
        }
    })?;
    if replies.len() != count {
        return Err(PeerError::Decode);
    }
    *lock(&link.conn) = Some((stream, Instant::now()));
    Ok(replies)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
