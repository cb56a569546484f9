//! The send-side stall clock, like nginx's `send_timeout`: a response the client does not
//! take — an HTTP/1.1 client that stops reading a large body, an HTTP/2 client that keeps
//! its flow-control window shut — would otherwise hold its upstream connection slot and its
//! request's concurrency permits for as long as the client keeps the socket open. The body
//! watchdog (`proxy/upstream/watchdog.rs`) cannot see this: hyper stops pulling a body the client
//! does not take, so a timer inside it is never polled.
//!
//! A [`SendClock`] says since when a response has been waiting on its client: from when its
//! head or a body frame was handed to hyper, until hyper comes back for the next frame (or
//! a write reaches the socket, on HTTP/1.1); while the body waits on the upstream instead,
//! the clock is stopped (that silence is the body watchdog's). Past `body_timeout` the
//! exchange ends: on HTTP/1.1 the connection driver closes the connection (one response at
//! a time is in flight there); on HTTP/2 [`StreamExec`] drops that stream's task, which
//! resets the stream alone (`RST_STREAM`, `CANCEL`) — either way hyper drops the response
//! body, and with it the upstream connection, its slot and the permits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::time::Sleep;
use tracing::debug;

use super::cuts::{Cut, Cuts};

/// "Not waiting on the client" in [`SendClock::since`].
const NOT_WAITING: u64 = u64::MAX;

/// Since when a response has been waiting on its client, if it is.
#[derive(Debug)]
pub(crate) struct SendClock {
    /// Time origin of `since`.
    base: Instant,
    /// Milliseconds after `base` since which the response waits on the client, or
    /// [`NOT_WAITING`].
    since: AtomicU64,
}

impl SendClock {
    pub fn new(base: Instant) -> Self {
        SendClock {
            base,
            since: AtomicU64::new(NOT_WAITING),
        }
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// A head or frame was handed over: the client has to take it, from now.
    pub fn handed(&self) {
        self.since.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Bytes reached the client's socket: if a response waits on it, it moved.
    pub fn progressed(&self) {
        if self.since.load(Ordering::Relaxed) != NOT_WAITING {
            self.handed();
        }
    }

    /// The response waits on the upstream, or is done: not the client's stall.
    pub fn stop(&self) {
        self.since.store(NOT_WAITING, Ordering::Relaxed);
    }

    /// Since when the response has waited on the client, in milliseconds after `base`.
    pub fn since_ms(&self) -> Option<u64> {
        Some(self.since.load(Ordering::Relaxed)).filter(|&s| s != NOT_WAITING)
    }

    /// As [`SendClock::since_ms`], as an instant.
    pub fn since(&self) -> Option<Instant> {
        Some(self.base + Duration::from_millis(self.since_ms()?))
    }
}

tokio::task_local! {
    /// The clock of the HTTP/2 stream whose task is running (unset on HTTP/1.1).
    static STREAM_CLOCK: Arc<SendClock>;
}

/// The send clock of the HTTP/2 stream this code runs in, if it does.
pub(crate) fn stream_clock() -> Option<Arc<SendClock>> {
    STREAM_CLOCK.try_with(Arc::clone).ok()
}

/// hyper's executor for the connections the driver serves: it runs each HTTP/2 stream on
/// its own task (as `TokioExecutor` does) with a [`SendClock`] of its own, and ends the
/// task once the stream's response has waited on the client for `timeout`.
#[derive(Clone, Debug)]
pub(crate) struct StreamExec {
    pub timeout: Duration,
    /// Where a reset stream is counted.
    pub cuts: Cuts,
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let clock = Arc::new(SendClock::new(Instant::now()));
        let (timeout, cuts) = (self.timeout, self.cuts.clone());
        tokio::spawn(async move {
            let fut = STREAM_CLOCK.scope(clock.clone(), fut);
            if until_stalled(fut, clock, timeout).await == Stream::Cut {
                cuts.count(Cut::NotTaken);
            }
        });
    }
}

/// How a stream's task ended.
#[derive(Debug, PartialEq, Eq)]
enum Stream {
    Done,
    /// Its response waited on the client for `timeout`: the stream is reset.
    Cut,
}

/// Run `fut` until it ends, or until `clock` has said "waiting on the client" for
/// `timeout`; the timer is armed only while it says so.
async fn until_stalled<F: Future<Output = ()>>(
    fut: F,
    clock: Arc<SendClock>,
    timeout: Duration,
) -> Stream {
    tokio::pin!(fut);
    let mut sleep: Option<Pin<Box<Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if fut.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Stream::Done);
        }
        // The clock only changes while `fut` is polled (the stream's body runs in it).
        let Some(since) = clock.since() else {
            return Poll::Pending;
        };
        let deadline = (since + timeout).into();
        let timer = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        if timer.as_mut().poll(cx).is_ready() {
            debug!(
                ?timeout,
                "HTTP/2 response not taken by the client; resetting the stream"
            );
            return Poll::Ready(Stream::Cut);
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_response_waiting_on_its_client_is_timed() {
        let c = SendClock::new(Instant::now());
        c.progressed();
        assert_eq!(
            c.since_ms(),
            None,
            "a write with nothing waiting starts nothing"
        );
        c.handed();
        assert!(c.since().is_some());
        c.stop();
        assert_eq!(c.since_ms(), None);
    }
}
