//! Step 4's body read, for a route whose policies key on `form:NAME` or `json:POINTER`:
//! up to `max_key_body_bytes` of the request body are read before the limit step, parsed
//! once by media type into the limiter's [`KeyBody`], and forwarded byte for byte from the
//! buffer, the rest of the stream following ([`ClientBody`]). Every other route's body is
//! never touched: it streams as it always did.
//!
//! Which media type a body is (`media.rs`) and its multipart fields (`multipart.rs`) are
//! read as every common backend reads them, or refused (400). A body of another media
//! type, or larger than the read with `on_large_key_body = "missing"`, keys nothing (its
//! parts are missing: `on_missing_key` decides); a larger one is refused (413) by default;
//! a silent one waits at most `body_timeout` a frame.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::config::{KeyBodyRules, OnLargeKeyBody};
use media::{Media, media};

mod media;
mod multipart;
use crate::limit::keys::KeyBody;
use crate::respond::GatewayError;

/// The body sent upstream: the client's stream as it is, or what the limit step read
/// followed by the rest of the stream. Kept to the stream's size plus a tag (the read
/// case is boxed): a request's body is moved through every step of the proxy.
pub enum ClientBody {
    Stream(Incoming),
    Read(Box<ReadBody>),
}

/// A body the limit step read some or all of.
pub struct ReadBody {
    head: Option<Bytes>,
    /// Trailers the read met (the stream had ended).
    trailers: Option<HeaderMap>,
    rest: Option<Incoming>,
}

impl From<Incoming> for ClientBody {
    /// A body the limit step did not read.
    fn from(body: Incoming) -> Self {
        ClientBody::Stream(body)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let read = match &mut *self {
            ClientBody::Stream(body) => return Pin::new(body).poll_frame(cx),
            ClientBody::Read(read) => &mut **read,
        };
        if let Some(head) = read.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = &mut read.rest {
            return Pin::new(rest).poll_frame(cx);
        }
        Poll::Ready(read.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Stream(body) => body.is_end_stream(),
            ClientBody::Read(read) => {
                read.head.is_none()
                    && read.trailers.is_none()
                    && read.rest.as_ref().is_none_or(Body::is_end_stream)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        let read = match self {
            ClientBody::Stream(body) => return body.size_hint(),
            ClientBody::Read(read) => read,
        };
        let head = read.head.as_ref().map_or(0, |h| h.len() as u64);
        match &read.rest {
            None => SizeHint::with_exact(head),
            Some(rest) => {
                let r = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(r.lower() + head);
                if let Some(upper) = r.upper() {
                    hint.set_upper(upper + head);
                }
                hint
            }
        }
    }
}

/// Read the body of `req` for its keys: the body to forward, and what the keys may read.
pub(super) async fn read(
    headers: &HeaderMap,
    body: Incoming,
    rules: KeyBodyRules,
    body_timeout: Duration,
) -> Result<(ClientBody, Option<KeyBody>), GatewayError> {
    let kind = media(headers)?;
    if kind.is_some() {
        uncoded(headers)?;
    }
    let declared = super::declared_length_of(headers);
    if kind.is_none() || body.is_end_stream() || declared.is_some_and(|n| n > rules.max_bytes) {
        let keyed = match (kind, declared) {
            (Some(_), Some(n)) if n > rules.max_bytes => too_large(rules)?,
            _ => None,
        };
        return Ok((ClientBody::from(body), keyed));
    }
    let (read, complete) = read_up_to(body, rules.max_bytes, body_timeout).await?;
    let keyed = match (complete, kind) {
        (Some(bytes), Some(kind)) => Some(parse(kind, bytes).await?),
        (None, _) => too_large(rules)?,
        (_, None) => None,
    };
    Ok((read, keyed))
}

/// Over the read: refused, or keyed as missing.
fn too_large(rules: KeyBodyRules) -> Result<Option<KeyBody>, GatewayError> {
    match rules.on_large {
        OnLargeKeyBody::Reject => Err(GatewayError::PayloadTooLarge {
            limit: rules.max_bytes,
        }),
        OnLargeKeyBody::Missing => Ok(None),
    }
}

/// Refused: a body a key reads that is content-coded. Express's `body-parser` inflates
/// `gzip` and `deflate` before parsing, so the gateway would key the coded bytes (an
/// ASCII-only zlib stream is a valid form to it) while the backend reads another body.
fn uncoded(headers: &HeaderMap) -> Result<(), GatewayError> {
    let coded = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .any(|c| !c.trim_ascii().eq_ignore_ascii_case(b"identity"));
    match coded {
        true => Err(GatewayError::BadRequest(
            "a body a key reads must have no Content-Encoding".into(),
        )),
        false => Ok(()),
    }
}

/// Up to `max` bytes of `body`: the body to forward, and the whole body when it ended
/// within them.
async fn read_up_to(
    mut body: Incoming,
    max: u64,
    timeout: Duration,
) -> Result<(ClientBody, Option<Bytes>), GatewayError> {
    let mut buf = BytesMut::new();
    let mut trailers = None;
    let ended = loop {
        let frame = match tokio::time::timeout(timeout, body.frame()).await {
            Err(_) => return Err(GatewayError::RequestTimeout { timeout }),
            Ok(None) => break true,
            Ok(Some(Err(_))) => {
                return Err(GatewayError::BadRequest(
                    "the request body is malformed or was cut off".into(),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        match frame.into_data() {
            Ok(data) => buf.extend_from_slice(&data),
            Err(frame) => {
                trailers = frame.into_trailers().ok();
                break true;
            }
        }
        if buf.len() as u64 > max {
            break false;
        }
    };
    let head = buf.freeze();
    let complete = ended.then(|| head.clone());
    let forward = ClientBody::Read(Box::new(ReadBody {
        head: Some(head).filter(|h| !h.is_empty()),
        trailers,
        rest: (!ended).then_some(body),
    }));
    Ok((forward, complete))
}

/// The body as the keys read it.
async fn parse(kind: Media, bytes: Bytes) -> Result<KeyBody, GatewayError> {
    Ok(match kind {
        Media::Urlencoded => KeyBody::Urlencoded(bytes),
        Media::Json => KeyBody::json(&bytes),
        Media::Multipart { boundary } => {
            KeyBody::Multipart(multipart::fields(bytes, boundary).await?)
        }
    })
}
