//! Step 5 of the request path, around the two streamed bodies: a body that goes silent for
//! `body_timeout`, or a request body past `max_body_bytes`, ends the exchange instead of
//! holding a connection, an upstream slot and a concurrency permit forever.
//!
//! The request side records in a [`BodyWatch`] *why* it ended, so that when the upstream
//! call fails because of it, the client is answered 408, 413 or 400 — the client's fault —
//! and not a 502 blamed on the upstream, and the upstream URL's outlier state never hears
//! of it (`send.rs` reads the watch before it records a failure); and *when* it last
//! moved, so that a slow but steady upload is not cut off by `upstream_timeout`, which is
//! about the upstream's answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use tracing::warn;

use crate::body::BoxError;
use crate::respond::GatewayError;

/// Why a watched body ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyFault {
    /// No byte for `body_timeout`.
    #[error("no byte of the body for {0:?}")]
    Stalled(Duration),
    /// More bytes than the route's `max_body_bytes`.
    #[error("the body is larger than {0} bytes")]
    TooLarge(u64),
    /// The stream's framing is malformed (a bad chunk size or chunk end).
    #[error("the body's framing is malformed")]
    Malformed,
    /// The stream ended before the body did: the client closed or reset its connection
    /// (or its HTTP/2 stream) mid-body.
    #[error("the body stream ended early")]
    Gone,
}

impl BodyFault {
    /// The fault's name in `tollgate_client_body_errors_total{kind}`.
    pub fn kind(self) -> &'static str {
        match self {
            BodyFault::Stalled(_) => "timeout",
            BodyFault::TooLarge(_) => "too_large",
            BodyFault::Malformed => "malformed",
            BodyFault::Gone => "gone",
        }
    }

    /// What the client is answered when its body is why the upstream call failed: 408 for
    /// a silent body, 413 for one too large, 400 for a broken one (a client that left is
    /// not there to read it) — never a 502 blamed on the upstream.
    pub fn client_error(self) -> GatewayError {
        match self {
            BodyFault::Stalled(timeout) => GatewayError::RequestTimeout { timeout },
            BodyFault::TooLarge(limit) => GatewayError::PayloadTooLarge { limit },
            BodyFault::Malformed => {
                GatewayError::BadRequest("the request body's framing is malformed".into())
            }
            BodyFault::Gone => GatewayError::BadRequest("the request body was cut off".into()),
        }
    }

    /// The fault behind a client stream's error: malformed framing when hyper's decoder
    /// refused the bytes (it reports `InvalidInput`/`InvalidData`), else the stream ended
    /// (end of file, reset, a cancelled HTTP/2 stream).
    fn of_stream_error(e: &(dyn std::error::Error + 'static)) -> BodyFault {
        let mut cause = Some(e);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<std::io::Error>()
                && matches!(
                    io.kind(),
                    std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
                )
            {
                return BodyFault::Malformed;
            }
            cause = c.source();
        }
        BodyFault::Gone
    }
}

/// What a request body tells the code that awaits the upstream's answer.
#[derive(Debug)]
pub struct BodyWatch {
    /// Why the body ended early, once it has.
    fault: OnceLock<BodyFault>,
    /// Time origin of `moved_ns`.
    base: Instant,
    /// Nanoseconds after `base` at which the body last moved (a frame, or its end).
    moved_ns: AtomicU64,
    /// Whether the body's last poll found the client's stream empty: the sender is
    /// waiting on the client, not on the upstream, and the watchdog's timer is running.
    waiting: AtomicBool,
    /// Data bytes passed on so far, when a `cost = "request_bytes"` policy counts them
    /// (shared with the limit step's settlement, which outlives a dropped request).
    bytes: Option<Arc<AtomicU64>>,
}

impl BodyWatch {
    /// A watch that also counts the body's data bytes into `sent`, when given.
    pub fn new(sent: Option<Arc<AtomicU64>>) -> Arc<Self> {
        Arc::new(BodyWatch {
            fault: OnceLock::new(),
            base: Instant::now(),
            moved_ns: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            bytes: sent,
        })
    }

    pub fn fault(&self) -> Option<BodyFault> {
        self.fault.get().copied()
    }

    /// When the body last moved: the upstream's answer is awaited from then.
    pub fn last_moved(&self) -> Instant {
        self.base + Duration::from_nanos(self.moved_ns.load(Ordering::Relaxed))
    }

    /// Whether the body is waiting for the client's next byte (or has failed): its
    /// silence is then the client's, which the watchdog ends within `body_timeout` (408),
    /// and the upstream, which has not had the whole request, is not late.
    pub fn on_the_client(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) || self.fault.get().is_some()
    }

    fn moved(&self) {
        let ns = self.base.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.moved_ns.store(ns, Ordering::Relaxed);
        if self.waiting.load(Ordering::Relaxed) {
            self.waiting.store(false, Ordering::Relaxed);
        }
    }
}

/// Where a request body reports, when it is one.
pub type FaultSlot = Arc<BodyWatch>;

/// A body with an idle timer and, optionally, a byte budget.
pub struct Watchdog<B> {
    inner: B,
    /// Longest silence between frames.
    timeout: Duration,
    /// Armed lazily, the first time the inner body is not ready: most small bodies are
    /// complete when their head is parsed and never pay for a timer.
    sleep: Option<Pin<Box<Sleep>>>,
    /// When the last frame arrived (tracked once the timer is armed, so a body that never
    /// waits never reads the clock): the timer is re-armed from it when it fires instead of
    /// being reset on every frame.
    last_frame: Option<Instant>,
    /// Bytes still allowed, and the limit for the error; `None` = unlimited.
    budget: Option<(u64, u64)>,
    /// Set once when the body fails.
    fault: Option<FaultSlot>,
    /// An upstream's response body: its name, for the log line when it stalls.
    upstream: Option<Arc<str>>,
}

impl<B> Watchdog<B> {
    /// Watch `inner` for silence; `limit` bounds its bytes; `fault` learns why it ended.
    pub fn new(inner: B, timeout: Duration, limit: Option<u64>, fault: Option<FaultSlot>) -> Self {
        Watchdog {
            inner,
            timeout,
            sleep: None,
            last_frame: None,
            budget: limit.map(|l| (l, l)),
            fault,
            upstream: None,
        }
    }

    /// Log a stall as the upstream's failure (a response body; the client is cut off).
    pub fn on_stall(mut self, upstream: Arc<str>) -> Self {
        self.upstream = Some(upstream);
        self
    }

    fn fail(&mut self, fault: BodyFault) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(upstream) = &self.upstream {
            warn!(upstream = &**upstream, error = %fault, "upstream response body ended early");
        }
        if let Some(slot) = &self.fault {
            let _ = slot.fault.set(fault);
        }
        Poll::Ready(Some(Err(Box::new(fault))))
    }

    /// `Ready` when the body has been silent for the whole timeout.
    fn poll_silence(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let last = *self.last_frame.get_or_insert_with(Instant::now);
        let deadline = last + self.timeout;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        sleep.as_mut().poll(cx)
    }
}

impl<B> Body for Watchdog<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if let Some(slot) = &this.fault {
                    slot.waiting.store(true, Ordering::Relaxed);
                }
                // Never waited before (`last_frame` unset): every frame so far was ready, so
                // the silence starts now.
                ready!(this.poll_silence(cx));
                return this.fail(BodyFault::Stalled(this.timeout));
            }
            Poll::Ready(None) => {
                if let Some(slot) = &this.fault {
                    slot.moved();
                }
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(e))) => {
                let e: BoxError = e.into();
                if let Some(slot) = &this.fault {
                    let _ = slot.fault.set(BodyFault::of_stream_error(&*e));
                }
                return Poll::Ready(Some(Err(e)));
            }
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        if this.last_frame.is_some() {
            this.last_frame = Some(Instant::now());
        }
        if let Some(slot) = &this.fault {
            slot.moved();
            if let (Some(sent), Some(data)) = (&slot.bytes, frame.data_ref()) {
                sent.fetch_add(data.remaining() as u64, Ordering::Relaxed);
            }
        }
        if let (Some((left, limit)), Some(data)) = (this.budget.as_mut(), frame.data_ref()) {
            let n = data.remaining() as u64;
            if n > *left {
                let limit = *limit;
                return this.fail(BodyFault::TooLarge(limit));
            }
            *left -= n;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
