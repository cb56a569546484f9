//! The response body as the connection driver sees it (step 6 of the request path, on its
//! way out): [`Tracked`] ends its request's [`InFlight`] when hyper drops it, and runs the
//! response's [`SendClock`] (`stall.rs`), so a response its client does not take is timed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::activity::InFlight;
use super::stall::SendClock;

/// A response body that ends its request's [`InFlight`] when hyper drops it: after the last
/// frame was sent, or when the client went away mid-body. It also runs the response's
/// [`SendClock`]: waiting on the client from the head on and after each frame handed to
/// hyper, not while the body itself waits.
pub(crate) struct Tracked<B> {
    inner: B,
    in_flight: InFlight,
    /// An HTTP/2 stream's own clock; `None`: the connection's (HTTP/1.1).
    stream: Option<Arc<SendClock>>,
    /// HTTP/2: what is left of a data frame cut into [`STREAM_FRAME`] pieces.
    rest: Bytes,
}

/// The largest data frame handed to hyper for an HTTP/2 stream. A stream's clock moves only
/// when hyper pulls a frame, which it does once the client has taken nearly all of the last
/// one: an upstream frame of ~400 KiB made a client reading 256 KiB/s through a 64 KiB
/// window look stalled. Pieces of h2's own frame size (16 KiB) ask a steady reader only
/// 16 KiB per `body_timeout` (`Bytes::split_to` copies nothing).
const STREAM_FRAME: usize = 16 * 1024;

impl<B> Tracked<B> {
    pub fn new(inner: B, in_flight: InFlight, stream: Option<Arc<SendClock>>) -> Self {
        let tracked = Tracked {
            inner,
            in_flight,
            stream,
            rest: Bytes::new(),
        };
        tracked.clock().handed();
        tracked
    }

    fn clock(&self) -> &SendClock {
        self.stream
            .as_deref()
            .unwrap_or(self.in_flight.send_clock())
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if !self.rest.is_empty() {
            let piece = self.piece();
            self.clock().handed();
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        let mut polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &mut polled {
            Poll::Ready(Some(Ok(frame))) => {
                if self.stream.is_some()
                    && let Some(data) = frame.data_mut()
                    && data.len() > STREAM_FRAME
                {
                    self.rest = std::mem::take(data);
                    *data = self.piece();
                }
                self.clock().handed();
            }
            // Waiting on the upstream (the body watchdog's to time), or done.
            _ => self.clock().stop(),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        hint.set_lower(hint.lower() + rest);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

impl<B> Tracked<B> {
    /// The next piece of `rest`, at most [`STREAM_FRAME`].
    fn piece(&mut self) -> Bytes {
        let n = self.rest.len().min(STREAM_FRAME);
        self.rest.split_to(n)
    }
}
