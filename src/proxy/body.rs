//! Response bodies that carry what the request holds until its answer is sent: concurrency
//! permits and the upstream connection slot. Both are released — the in-flight slot freed —
//! exactly when the body has been sent or the client has gone away.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

use super::{BoxError, ResponseBody};
use crate::limit::permit::Permits;

/// A body that owns permits until it is dropped.
struct WithPermits<B> {
    /// The real body.
    inner: B,
    /// Released on drop.
    _permits: Permits,
    /// The upstream connection slot, released on drop (`None` once a tunnel holds it).
    _slot: Option<OwnedSemaphorePermit>,
}

impl<B> Body for WithPermits<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
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

/// Attach `permits` and the upstream `slot` to the response body, boxing it once.
pub(super) fn hold_permits<B>(
    resp: Response<B>,
    permits: Permits,
    slot: Option<OwnedSemaphorePermit>,
) -> Response<ResponseBody>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin + Send + 'static,
{
    resp.map(|inner| {
        WithPermits {
            inner,
            _permits: permits,
            _slot: slot,
        }
        .boxed_unsync()
    })
}
