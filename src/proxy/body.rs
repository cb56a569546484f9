//! Response bodies that carry concurrency permits: the permit drops — and the in-flight
//! slot is released — exactly when the body has been sent or the client has gone away.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use super::ResponseBody;
use crate::limit::permit::Permits;

/// A body that owns permits until it is dropped.
struct WithPermits {
    /// The real body (boxed, so `Unpin`).
    inner: ResponseBody,
    /// Released on drop.
    _permits: Permits,
}

impl Body for WithPermits {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Attach `permits` to the response body; a no-op (no extra box) when there are none.
pub(super) fn hold_permits(
    resp: Response<ResponseBody>,
    permits: Permits,
) -> Response<ResponseBody> {
    if permits.is_empty() {
        return resp;
    }
    resp.map(|inner| {
        WithPermits {
            inner,
            _permits: permits,
        }
        .boxed_unsync()
    })
}
