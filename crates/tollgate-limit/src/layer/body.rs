//! The body of every response tollgate sends, and the small helpers that make one.
//!
//! A response body may also carry what its request holds until the answer is sent
//! (concurrency permits, the upstream connection slot): [`hold`] attaches it, and it is
//! released — the in-flight slot freed — exactly when the body has been sent or the client
//! has gone away. This module imports nothing else of tollgate, so every step may use it (the gateway
//! re-exports it as `tollgate::body`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};

/// Errors a body may end with: hyper's, or a body watchdog's (a stalled upstream).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response tollgate sends: the upstream's stream or one of ours.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// A fixed body in the gateway's response body type.
pub fn full(bytes: Bytes) -> ResponseBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A body that owns what its request holds until it is dropped.
struct Holding<B, H> {
    /// The real body.
    inner: B,
    /// Released on drop, after the real body.
    _held: H,
}

impl<B, H> Body for Holding<B, H>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
    H: Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Attach `held` (dropped in its own field order once the body is done) to the response
/// body, boxing it once.
pub fn hold<B, H>(resp: Response<B>, held: H) -> Response<ResponseBody>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin + Send + 'static,
    H: Unpin + Send + 'static,
{
    resp.map(|inner| Holding { inner, _held: held }.boxed_unsync())
}
