//! The connection driver: between a socket the worker (or the admin listener) owns and
//! hyper, which speaks HTTP on it. hyper bounds neither protocol detection (hyper-util's
//! auto builder waits for the first bytes forever) nor an idle HTTP/2 connection, so the
//! driver polls hyper's connection next to one timer (and the server's stop signal, both
//! only when they woke it) and acts on [`Activity::check`]:
//! drop a connection whose head is late or whose response the client does not take, close an
//! idle one gracefully, and close every one gracefully when the server shuts down.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use futures_util::task::AtomicWaker;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::activity::{Activity, Timeouts, Verdict, Watched};
use super::cuts::{Cut, Cuts};
use super::stall::{self, StreamExec};
use super::tracked::Tracked;
use crate::body::ResponseBody;
use crate::config::Config;

/// How a connection ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// hyper finished it: the client closed, or a graceful close completed.
    Done,
    /// hyper failed it (a refused head, a reset, an upgrade error).
    Failed(Box<dyn StdError + Send + Sync>),
    /// The driver dropped it: this bound was broken.
    TimedOut(Cut),
}

/// Resolves once the server shuts down (or the sender is gone); cancel-safe.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Serve HTTP/1.1 or HTTP/2 on `io` until the client leaves, a timeout closes it, or the
/// server's `stop` has drained it. `handler` answers each request.
pub(crate) async fn drive<I, H, Fut>(
    io: I,
    http: &auto::Builder<StreamExec>,
    activity: Arc<Activity>,
    timeouts: &Timeouts,
    handler: H,
    stop: &mut watch::Receiver<bool>,
) -> Ended
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let marks = activity.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let in_flight = marks.begin(req.version());
        let answer = handler(req);
        async move {
            let answer = answer.await;
            // Inside an HTTP/2 stream's task (`StreamExec`), its own send clock.
            let stream = stall::stream_clock();
            Ok::<_, Infallible>(answer.map(|b| Tracked::new(b, in_flight, stream)))
        }
    });
    let io = TokioIo::new(Watched::new(io, activity.clone()));
    let conn = http.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    // Due now when the socket waited past its deadline in a queue: the first check closes it.
    let first = match activity.check(Instant::now(), timeouts, None) {
        Verdict::Wait(at) => at,
        _ => Instant::now(),
    };
    let timer = tokio::time::sleep_until(first.into());
    tokio::pin!(timer);
    let mut draining_since: Option<Instant> = None;
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
        draining_since = Some(Instant::now());
    }
    let stop = stopped(stop);
    tokio::pin!(stop);
    // The timer and the stop signal wake the task through `side`, which notes it: a wake-up
    // by the connection (two or three a request) then polls the connection alone. Polling
    // all three each time (`select!`) cost ~800 instructions a request (callgrind).
    let side = Arc::new(SideWake::default());
    let side_waker = Waker::from(side.clone());
    std::future::poll_fn(|cx| {
        loop {
            if let Poll::Ready(ended) = conn.as_mut().poll(cx) {
                return Poll::Ready(ended.map_or_else(Ended::Failed, |()| Ended::Done));
            }
            // Registered before the flag is read: a side wake-up after it wakes this task.
            side.task.register(cx.waker());
            if !side.woken.swap(false, Ordering::AcqRel) {
                return Poll::Pending;
            }
            let mut side_cx = Context::from_waker(&side_waker);
            let mut acted = false;
            if timer.as_mut().poll(&mut side_cx).is_ready() {
                acted = true;
                let now = Instant::now();
                match activity.check(now, timeouts, draining_since) {
                    Verdict::Wait(at) => timer.as_mut().reset(at.into()),
                    Verdict::Drain => {
                        conn.as_mut().graceful_shutdown();
                        draining_since = Some(now);
                        timer.as_mut().reset((now + timeouts.header).into());
                    }
                    Verdict::Close(why) => return Poll::Ready(Ended::TimedOut(why)),
                }
            }
            if !stopping && stop.as_mut().poll(&mut side_cx).is_ready() {
                acted = true;
                stopping = true;
                if draining_since.is_none() {
                    conn.as_mut().graceful_shutdown();
                    draining_since = Some(Instant::now());
                }
            }
            if !acted {
                return Poll::Pending;
            }
            // Something changed: poll the connection again, and the timer (to arm its new
            // deadline) with it.
            side.woken.store(true, Ordering::Release);
        }
    })
    .await
}

/// How the timer and the stop signal wake the driver: a flag saying they did (set at
/// first, so the first poll arms both), and the driver's task to wake.
struct SideWake {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Default for SideWake {
    fn default() -> Self {
        SideWake {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        }
    }
}

impl Wake for SideWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The status hyper answered by itself when a connection failed on a request head it
/// refused (such heads never reach the service): 431, 414 or 400; `None` otherwise.
pub(crate) fn refused_status(e: &(dyn StdError + 'static)) -> Option<u16> {
    let e = e.downcast_ref::<hyper::Error>()?;
    if e.is_parse_too_large() {
        // hyper has no predicate for its 414; its message is the only tell. Should the
        // wording change, such heads are counted as 431, the nearest truth.
        Some(if e.to_string().contains("URI too long") {
            414
        } else {
            431
        })
    } else if e.is_parse() && !e.is_parse_status() {
        Some(400)
    } else {
        None
    }
}

/// Connection settings shared by the plain and TLS listeners. hyper's own head timer is
/// off: it starts when a keep-alive connection goes idle, so it would close idle HTTP/1.1
/// connections at `header_timeout` instead of `idle_timeout`; the driver times heads.
pub(super) fn http_builder(config: &Config, cuts: &Cuts) -> auto::Builder<StreamExec> {
    let s = &config.server;
    // Each HTTP/2 stream is reset once its response has waited on the client for
    // `body_timeout` (HTTP/1.1: the driver closes the connection).
    let mut b = auto::Builder::new(StreamExec {
        timeout: s.body_timeout,
        cuts: cuts.clone(),
    });
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(s.max_header_bytes)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(s.max_header_bytes as u32);
    b
}
