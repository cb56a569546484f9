//! What one client connection is doing, kept where the request path can update it for the
//! price of a few atomics: how many requests are in flight, since when it is idle, and (on
//! HTTP/1.1) since when the next request head has been trickling in. The connection driver
//! (`conn.rs`) reads it to decide when `header_timeout` and `idle_timeout` close the
//! connection; the service wrapper marks request starts, the response body wrapper
//! (`tracked.rs`) marks their ends, and the IO wrapper ([`Watched`]) marks the first bytes
//! of a later head. On HTTP/1.1 the connection's [`SendClock`] says since when the response
//! in flight has waited on the client (see `stall.rs`): past `body_timeout` the driver
//! closes the connection; an HTTP/2 stream's response has a clock of its own.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::cuts::Cut;
use super::stall::SendClock;

/// "No head is being read" in [`Activity::head_since`].
const NO_HEAD: u64 = u64::MAX;

/// The configured bounds a connection is held to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// From accept to the first request head (TLS handshake included), and for every later
    /// HTTP/1.1 head from its first byte.
    pub header: Duration,
    /// Longest stretch with no request in flight before the connection is closed.
    pub idle: Duration,
    /// Longest wait of a response on its client (no frame or byte taken) before the
    /// exchange is ended.
    pub body: Duration,
}

/// What the driver should do next, decided by [`Activity::check`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing is due before this instant: check again then.
    Wait(Instant),
    /// Idle too long: close gracefully (HTTP/2 GOAWAY; an idle HTTP/1.1 connection closes).
    Drain,
    /// A bound was broken: drop the connection, saying which.
    Close(Cut),
}

/// Shared by one connection's driver, its requests and its IO. Times are milliseconds after
/// `accepted`, so they fit atomics.
#[derive(Debug)]
pub(crate) struct Activity {
    /// When the listener accepted the socket: the first head's deadline counts from here.
    accepted: Instant,
    /// Requests whose response has not been fully sent (or dropped) yet.
    in_flight: AtomicU32,
    /// Some request head has arrived (the service was called at least once).
    served: AtomicBool,
    /// The connection speaks HTTP/2, whose idle reads (pings, window updates) are no head.
    h2: AtomicBool,
    /// When `in_flight` last fell to zero.
    idle_since: AtomicU64,
    /// When the first byte after going idle arrived on HTTP/1.1, or [`NO_HEAD`].
    head_since: AtomicU64,
    /// Since when the HTTP/1.1 response in flight has waited on the client, if it has.
    send: SendClock,
}

impl Activity {
    pub fn new(accepted: Instant) -> Arc<Activity> {
        Arc::new(Activity {
            accepted,
            in_flight: AtomicU32::new(0),
            served: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NO_HEAD),
            send: SendClock::new(accepted),
        })
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.accepted).as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.accepted + Duration::from_millis(ms)
    }

    /// The moment the first request head is due (also bounds the TLS handshake).
    pub fn first_head_deadline(&self, t: &Timeouts) -> Instant {
        self.accepted + t.header
    }

    /// A request head arrived: it is in flight until the returned guard drops.
    pub fn begin(self: &Arc<Self>, version: http::Version) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_since.store(NO_HEAD, Ordering::Relaxed);
        self.served.store(true, Ordering::Relaxed);
        if version == http::Version::HTTP_2 {
            self.h2.store(true, Ordering::Relaxed);
        }
        InFlight(self.clone())
    }

    /// Bytes arrived. On an idle HTTP/1.1 connection they begin the next head, whose
    /// `header_timeout` starts now; a busy connection's reads are its bodies'.
    fn note_read(&self) {
        if self.head_since.load(Ordering::Relaxed) == NO_HEAD
            && self.in_flight.load(Ordering::Relaxed) == 0
            && self.served.load(Ordering::Relaxed)
            && !self.h2.load(Ordering::Relaxed)
        {
            self.head_since
                .store(self.ms(Instant::now()), Ordering::Relaxed);
        }
    }

    /// Decide at `now`; `draining_since` is when the driver started a graceful close.
    ///
    /// Requests start and end (and responses start waiting on the client) without waking
    /// the driver, so a `Wait` is never longer than the shortest timeout: whatever began
    /// since this check, its deadline is no earlier than that. An idle connection so costs
    /// one timer wake-up per `min(header, idle, body)`.
    pub fn check(&self, now: Instant, t: &Timeouts, draining_since: Option<Instant>) -> Verdict {
        let now_ms = self.ms(now);
        match self.due(now_ms, t, draining_since) {
            Ok(deadline) => {
                let tick = (t.header.min(t.idle).min(t.body).as_millis() as u64).max(1);
                Verdict::Wait(self.at(deadline.min(now_ms.saturating_add(tick))))
            }
            Err(verdict) => verdict,
        }
    }

    /// The next deadline (`Ok`), or what is due now (`Err`).
    fn due(&self, now_ms: u64, t: &Timeouts, draining: Option<Instant>) -> Result<u64, Verdict> {
        let (header, idle) = (t.header.as_millis() as u64, t.idle.as_millis() as u64);
        let due = |deadline: u64, verdict: Verdict| {
            if now_ms >= deadline {
                Err(verdict)
            } else {
                Ok(deadline)
            }
        };
        if !self.served.load(Ordering::Relaxed) {
            return due(header, Verdict::Close(Cut::NoHead));
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            // Busy: only a response the client does not take is due; one that starts to
            // wait after this check is due no earlier than a body_timeout from now.
            let body = t.body.as_millis() as u64;
            return match self.send.since_ms() {
                Some(since) => due(since.saturating_add(body), Verdict::Close(Cut::NotTaken)),
                None => Ok(now_ms.saturating_add(body)),
            };
        }
        let head = self.head_since.load(Ordering::Relaxed);
        if head != NO_HEAD {
            let late = Verdict::Close(Cut::HeadUnfinished);
            return due(head.saturating_add(header), late);
        }
        let idle_since = self.idle_since.load(Ordering::Relaxed);
        match draining {
            None => due(idle_since.saturating_add(idle), Verdict::Drain),
            // A client that never answers HTTP/2's GOAWAY ping would keep the connection
            // forever: once closing, it gets one header_timeout, then it is dropped.
            Some(d) => due(
                self.ms(d).max(idle_since).saturating_add(header),
                Verdict::Close(Cut::Drain),
            ),
        }
    }
}

/// One request in flight; its drop (with the response body) makes the connection idle.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    /// The connection's send clock (HTTP/1.1: one response at a time is in flight).
    pub fn send_clock(&self) -> &SendClock {
        &self.0.send
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.send.stop();
        a.idle_since.store(a.ms(Instant::now()), Ordering::Relaxed);
        a.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// The connection's IO, noting reads in its [`Activity`] (see [`Activity::note_read`]).
pub(crate) struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I> Watched<I> {
    pub fn new(io: I, activity: Arc<Activity>) -> Self {
        Watched { io, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.note_read();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(1..))) {
            self.activity.send.progressed();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(1..))) {
            self.activity.send.progressed();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_millis(500),
        idle: Duration::from_millis(2000),
        body: Duration::from_millis(1000),
    };

    #[test]
    fn first_head_is_due_header_timeout_after_accept() {
        let start = Instant::now();
        let a = Activity::new(start);
        assert_eq!(a.check(start, &T, None), Verdict::Wait(start + T.header));
        assert!(matches!(
            a.check(start + T.header, &T, None),
            Verdict::Close(_)
        ));
    }

    #[test]
    fn idle_counts_from_the_end_of_the_last_response() {
        let start = Instant::now();
        let a = Activity::new(start);
        let req = a.begin(http::Version::HTTP_11);
        // Busy: never drained, however long the request takes.
        let late = start + Duration::from_secs(3600);
        assert!(matches!(a.check(late, &T, None), Verdict::Wait(w) if w > late));
        drop(req);
        let idle_since = a.at(a.idle_since.load(Ordering::Relaxed));
        // Checked every header_timeout (the shorter), so a head starting meanwhile is seen.
        assert_eq!(
            a.check(idle_since, &T, None),
            Verdict::Wait(idle_since + T.header)
        );
        let almost = idle_since + T.idle - T.header / 2;
        assert_eq!(
            a.check(almost, &T, None),
            Verdict::Wait(idle_since + T.idle)
        );
        assert_eq!(a.check(idle_since + T.idle, &T, None), Verdict::Drain);
        let closing = idle_since + T.idle;
        assert!(matches!(
            a.check(closing + T.header, &T, Some(closing)),
            Verdict::Close(_)
        ));
    }

    #[test]
    fn a_response_waiting_on_its_client_for_body_timeout_closes_the_connection() {
        let start = Instant::now();
        let a = Activity::new(start);
        let _req = a.begin(http::Version::HTTP_11);
        // Busy, waiting on the upstream: checked again a body_timeout later.
        assert_eq!(a.check(start, &T, None), Verdict::Wait(start + T.header));
        a.send.handed();
        let since = a.send.since().unwrap();
        let due = a.check(since, &T, None);
        assert!(
            matches!(due, Verdict::Wait(w) if w <= since + T.body),
            "{due:?}"
        );
        assert!(matches!(
            a.check(since + T.body, &T, None),
            Verdict::Close(_)
        ));
    }

    #[test]
    fn bytes_on_an_idle_http1_connection_start_the_head_clock() {
        let a = Activity::new(Instant::now());
        drop(a.begin(http::Version::HTTP_11));
        a.note_read();
        let head = a.at(a.head_since.load(Ordering::Relaxed));
        assert_eq!(a.check(head, &T, None), Verdict::Wait(head + T.header));
        // On HTTP/2 idle reads are pings and window updates, not a head.
        let b = Activity::new(Instant::now());
        drop(b.begin(http::Version::HTTP_2));
        b.note_read();
        assert_eq!(b.head_since.load(Ordering::Relaxed), NO_HEAD);
    }
}
