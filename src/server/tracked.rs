//! The response body as the connection driver sees it (on its way out, after step 7 of
//! the request path): [`Tracked`] ends its request's [`InFlight`] when hyper drops it, and runs the
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
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        // Upper first: `set_lower` asserts lower <= upper.
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint.set_lower(inner.lower().saturating_add(rest));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Body;

    use super::super::activity::Activity;
    use super::super::stall::SendClock;
    use super::{STREAM_FRAME, Tracked};

    /// An HTTP/2 body with a content length is handed over in pieces, and its size hint
    /// stays exact while a piece is held (review-g: it raised the lower bound first, which
    /// `SizeHint::set_lower` refuses above the upper one: a panic).
    #[tokio::test]
    async fn pieces_keep_the_size_hint_exact() {
        let total = 40 * 1024;
        let activity = Activity::new(Instant::now());
        let in_flight = activity.begin(http::Version::HTTP_2);
        let stream = Some(Arc::new(SendClock::new(Instant::now())));
        let full = Full::new(Bytes::from(vec![7u8; total]));
        let mut body = Tracked::new(full, in_flight, stream);
        assert_eq!(body.size_hint().exact(), Some(total as u64));
        let mut taken = 0;
        while let Some(frame) = body.frame().await {
            let piece = frame.unwrap().into_data().unwrap();
            assert!(piece.len() <= STREAM_FRAME);
            taken += piece.len();
            assert_eq!(body.size_hint().exact(), Some((total - taken) as u64));
            assert_eq!(body.is_end_stream(), taken == total);
        }
        assert_eq!(taken, total);
    }
}
