//! Protocol upgrades (WebSocket and friends): once both sides agreed on `101 Switching
//! Protocols`, tollgate is a byte pipe between the two upgraded connections — until either
//! side closes, or nothing has crossed it for `idle_timeout` (an idle tunnel holds an
//! upstream connection slot, so idle tunnels must not be able to starve a route). A tunnel
//! is its request still in flight: it holds the request's concurrency permits too, so a
//! `concurrency` limit bounds open tunnels as it bounds requests.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tracing::debug;

/// A switched exchange, ready to become a tunnel once the `101` has reached the client.
pub(in crate::proxy) struct Tunnel {
    pub client: OnUpgrade,
    pub upstream: OnUpgrade,
    /// Longest silence both ways.
    pub idle: Duration,
}

impl Tunnel {
    /// Run the tunnel on its own task; `held` (the upstream connection slot and the
    /// request's admission permits) is dropped when it ends, however it ends: a tunnel is
    /// one request in flight for as long as it is open.
    pub fn spawn<H: Send + 'static>(self, held: H) {
        tokio::spawn(async move {
            tunnel(self.client, self.upstream, self.idle).await;
            drop(held);
        });
    }
}

/// Copy bytes both ways until either side closes or the tunnel has been idle for `idle`.
async fn tunnel(client: OnUpgrade, upstream: OnUpgrade, idle: Duration) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(pair) => pair,
        Err(e) => {
            debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let start = Instant::now();
    let moved = Arc::new(AtomicU64::new(0));
    let mut client = Touch::new(TokioIo::new(client), start, moved.clone());
    let mut upstream = Touch::new(TokioIo::new(upstream), start, moved.clone());
    let copy = tokio::io::copy_bidirectional(&mut client, &mut upstream);
    tokio::pin!(copy);
    let mut deadline = start + idle;
    loop {
        tokio::select! {
            ended = &mut copy => {
                if let Err(e) = ended {
                    debug!(error = %e, "upgraded connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(deadline) => {
                let last = start + Duration::from_millis(moved.load(Ordering::Relaxed));
                if last + idle <= Instant::now() {
                    debug!(?idle, "upgraded connection idle; closing it");
                    return;
                }
                deadline = last + idle;
            }
        }
    }
}

/// An upgraded connection that stamps `moved` (milliseconds after `start`) on every read
/// that carries bytes; writes only follow reads of the other side.
struct Touch<T> {
    inner: T,
    start: Instant,
    moved: Arc<AtomicU64>,
}

impl<T> Touch<T> {
    fn new(inner: T, start: Instant, moved: Arc<AtomicU64>) -> Self {
        Touch {
            inner,
            start,
            moved,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Touch<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let ms = self.start.elapsed().as_millis() as u64;
            self.moved.store(ms, Ordering::Relaxed);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Touch<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
