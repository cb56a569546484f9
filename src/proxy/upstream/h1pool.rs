//! Per-worker keep-alive connections to plain `http://` HTTP/1.1 upstream URLs, on hyper's
//! connection API rather than hyper-util's pooled `Client`.
//!
//! Why: a worker's request never leaves its thread, so its upstream connections need no
//! shared pool. The legacy `Client` paid, per request, a pool mutex, a `HashMap` keyed by
//! scheme and authority (SipHash over the authority one byte at a time), a checkout future
//! racing a connect future, and a move of its large request future; callgrind put the
//! pool's share at about a sixth of the proxy's user-space instructions. Here a request
//! takes the most recent idle connection of its URL from a small stack and puts it back
//! when the connection is ready again. Each connection still has its own task (hyper's
//! `Connection` future, which reads the response body while the client is sent it); that
//! task runs on the worker's own runtime, so waking it is no system call.
//!
//! What the legacy client did and this keeps: connect within the upstream timeout, with
//! `TCP_NODELAY`; at most `max_connections` idle connections per URL, none older than
//! [`IDLE_FOR`]; a `Host` header from the URL when the request has none; a request that a
//! reused connection closed before sending is sent again on another connection; a
//! connection whose response body is still streaming goes back to the stack only once the
//! body is done; WebSocket upgrades (the connection runs `with_upgrades`). HTTPS and
//! HTTP/2 upstreams stay on the legacy client (TLS, ALPN, multiplexing).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::uri::Authority;
use http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::forward::UpstreamBody;

/// Longest an idle connection is kept for reuse (the legacy client's pool idle timeout).
pub(super) const IDLE_FOR: Duration = Duration::from_secs(90);

/// Why a request could not be sent on this pool.
#[derive(Debug)]
pub(super) enum H1Error {
    /// No connection to the URL (refused, unreachable, timed out, no such host): the URL
    /// is left out of the rotation for a while.
    Connect(std::io::Error),
    /// The connection failed while the request was sent or the answer read.
    Http(hyper::Error),
}

impl std::fmt::Display for H1Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H1Error::Connect(e) => write!(f, "tcp connect error: {e}"),
            H1Error::Http(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for H1Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            H1Error::Connect(_) => None,
            H1Error::Http(e) => e.source(),
        }
    }
}

/// One idle connection.
struct Idle {
    sender: SendRequest<UpstreamBody>,
    since: Instant,
}

/// The idle connections of one upstream's URLs, on one worker.
pub(super) struct H1Pool {
    /// Per URL of the upstream (its targets, in order): idle connections, newest last.
    idle: Box<[Mutex<Vec<Idle>>]>,
    /// Most idle connections kept per URL (the upstream's `max_connections`).
    max_idle: usize,
    /// Longest wait for a TCP connection (the upstream timeout, as before).
    connect_timeout: Duration,
}

impl H1Pool {
    pub fn new(urls: usize, max_idle: usize, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(H1Pool {
            idle: (0..urls).map(|_| Mutex::new(Vec::new())).collect(),
            max_idle,
            connect_timeout,
        })
    }

    /// Send `req` (origin-form URI) to URL `target` at `authority`: on an idle connection
    /// when there is one, else on a new one. When no connection could be made the request,
    /// never sent, comes back with the error, so its body can go to another URL.
    pub async fn send(
        self: &Arc<Self>,
        target: usize,
        authority: &Authority,
        mut req: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, (H1Error, Option<Request<UpstreamBody>>)> {
        if !req.headers().contains_key(header::HOST) {
            req.headers_mut()
                .insert(header::HOST, host_value(authority));
        }
        // One clock read for both ends of the idle check: the connection goes back a
        // little older than it is, which only ever retires it sooner.
        let now = Instant::now();
        loop {
            let (mut sender, reused) = match self.take(target, now) {
                Some(sender) => (sender, true),
                // Boxed: connecting is rare, and its future (address lookup, timer,
                // handshake) would otherwise make every request's future, which is moved
                // by value into its box, several kilobytes larger.
                None => match Box::pin(self.connect(authority)).await {
                    Ok(sender) => (sender, false),
                    Err(e @ H1Error::Connect(_)) => return Err((e, Some(req))),
                    Err(e) => return Err((e, None)),
                },
            };
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    self.recycle(target, sender, now);
                    return Ok(resp);
                }
                // The connection closed before the request left (the upstream ended an
                // idle keep-alive connection): nothing was sent, so it may go again.
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => req = unsent,
                    _ => return Err((H1Error::Http(e.into_error()), None)),
                },
            }
        }
    }

    /// The newest idle connection of `target` that is still open and fresh; the others
    /// met on the way are dropped (which closes them).
    fn take(&self, target: usize, now: Instant) -> Option<SendRequest<UpstreamBody>> {
        let mut idle = self.idle[target].lock().unwrap_or_else(|e| e.into_inner());
        while let Some(c) = idle.pop() {
            if c.sender.is_ready() && now.saturating_duration_since(c.since) < IDLE_FOR {
                return Some(c.sender);
            }
        }
        None
    }

    /// A connection back on the stack: now when it is ready for the next request (the
    /// whole answer was read with its head), else once its response body is done, from a
    /// task that waits for that (as the legacy client did). A connection that closed, or
    /// was taken by an upgrade, never becomes ready and is dropped.
    fn recycle(
        self: &Arc<Self>,
        target: usize,
        mut sender: SendRequest<UpstreamBody>,
        now: Instant,
    ) {
        if sender.is_ready() {
            self.put(target, sender, now);
            return;
        }
        let pool = self.clone();
        tokio::spawn(async move {
            if sender.ready().await.is_ok() {
                pool.put(target, sender, Instant::now());
            }
        });
    }

    fn put(&self, target: usize, sender: SendRequest<UpstreamBody>, since: Instant) {
        let mut idle = self.idle[target].lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle { sender, since });
        }
    }

    /// A new connection to `authority`, its task spawned on this worker's runtime.
    async fn connect(&self, authority: &Authority) -> Result<SendRequest<UpstreamBody>, H1Error> {
        let host = authority.host();
        // An IPv6 literal is bracketed in a URL, not in an address.
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = authority.port_u16().unwrap_or(80);
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| {
                H1Error::Connect(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connection timed out",
                ))
            })?
            .map_err(H1Error::Connect)?;
        stream.set_nodelay(true).map_err(H1Error::Connect)?;
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(H1Error::Http)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        sender.ready().await.map_err(H1Error::Http)?;
        Ok(sender)
    }
}

/// `Host` for a request that has none: the URL's host, and its port unless it is 80.
fn host_value(authority: &Authority) -> HeaderValue {
    let value = match authority.port_u16() {
        Some(80) => HeaderValue::from_str(authority.host()),
        _ => HeaderValue::from_str(authority.as_str()),
    };
    value.unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}
