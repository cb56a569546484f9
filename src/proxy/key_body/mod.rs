//! Step 4's body read, for a route whose policies key on `form:NAME` or `json:POINTER`:
//! up to `max_key_body_bytes` of the request body are read before the limit step, parsed
//! once by media type into the limiter's [`KeyBody`], and forwarded byte for byte from the
//! buffer, the rest of the stream following ([`ClientBody`]). Every other route's body is
//! never touched: it streams as it always did.
//!
//! A body of another media type, or larger than the read with `on_large_key_body =
//! "missing"`, keys nothing (its parts are missing: `on_missing_key` decides); a larger
//! one is refused (413) by default; a silent one waits at most `body_timeout` a frame.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::config::{KeyBodyRules, OnLargeKeyBody};
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
        (Some(bytes), Some(kind)) => Some(parse(kind, bytes, headers).await?),
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

/// The media types keys read a body of.
#[derive(Debug, Clone, Copy)]
enum Media {
    Urlencoded,
    Multipart,
    Json,
}

/// The body's media type, when keys read it; two `Content-Type` lines are refused (a
/// backend may read either), and so is, on a type keys read, a parameter given twice
/// (`boundary=A; boundary=B`: parsers take either) or a `charset` other than UTF-8
/// (Django decodes a form in it, Express's JSON parser any `utf-*`: under UTF-7
/// `+AGE-lice` is `alice`).
fn media(headers: &HeaderMap) -> Result<Option<Media>, GatewayError> {
    let mut lines = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (lines.next(), lines.next()) else {
        return match headers.contains_key(header::CONTENT_TYPE) {
            true => Err(GatewayError::BadRequest(
                "the Content-Type header must appear once".into(),
            )),
            false => Ok(None),
        };
    };
    let text = value.to_str().unwrap_or("");
    let mut params = text.split(';');
    let essence = params.next().unwrap_or("").trim().to_ascii_lowercase();
    let kind = match essence.as_str() {
        "application/x-www-form-urlencoded" => Media::Urlencoded,
        "multipart/form-data" => Media::Multipart,
        "application/json" => Media::Json,
        e if e.starts_with("application/") && e.ends_with("+json") => Media::Json,
        _ => return Ok(None),
    };
    let bad = |why: &str| Err(GatewayError::BadRequest(format!("the Content-Type {why}")));
    let mut seen = Vec::new();
    for param in params.map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let name = name.trim().to_ascii_lowercase();
        if seen.contains(&name) {
            return bad(&format!("parameter `{name}` must appear once"));
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        if name == "charset" && !value.eq_ignore_ascii_case("utf-8") {
            return bad("charset of a body a key reads must be UTF-8");
        }
        seen.push(name);
    }
    Ok(Some(kind))
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
async fn parse(kind: Media, bytes: Bytes, headers: &HeaderMap) -> Result<KeyBody, GatewayError> {
    Ok(match kind {
        Media::Urlencoded => KeyBody::Urlencoded(bytes),
        Media::Json => KeyBody::json(&bytes),
        Media::Multipart => KeyBody::Multipart(multipart(bytes, headers).await?),
    })
}

/// A `multipart/form-data` body's text fields, in order (file parts left out). Each part's
/// `Content-Disposition` is read strictly here ([`disposition`]), not by multer, whose
/// lenient reading (the first `name` substring, `filename` anywhere, case-sensitive
/// names) is not the backends'.
async fn multipart(
    bytes: Bytes,
    headers: &HeaderMap,
) -> Result<Vec<(String, Vec<u8>)>, GatewayError> {
    let bad = |why: String| GatewayError::BadRequest(format!("the multipart body: {why}"));
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let boundary = multer::parse_boundary(content_type).map_err(|e| bad(e.to_string()))?;
    let stream =
        futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut fields = Vec::new();
    while let Some(field) = parts.next_field().await.map_err(|e| bad(e.to_string()))? {
        let Some(name) = disposition(field.headers()).map_err(|why| bad(why.into()))? else {
            continue;
        };
        let value = field.bytes().await.map_err(|e| bad(e.to_string()))?;
        fields.push((name, value.to_vec()));
    }
    Ok(fields)
}

/// A part's name, `None` for a file part, read from its one `Content-Disposition` as
/// PHP, Werkzeug and Go read it: `form-data`, then `; name=value` parameters, names in any
/// case, a value a token or a quoted string. Refused where they differ: a parameter given
/// twice (PHP takes the last, Go refuses), an RFC 2231 `name*` or `filename*` (Werkzeug and
/// Go read it, PHP does not), a `\` in a quoted value, any other syntax. A part is a file
/// when its `filename` is not empty (Go reads `filename=""` as a field).
fn disposition(headers: &HeaderMap) -> Result<Option<String>, &'static str> {
    let mut lines = headers.get_all(header::CONTENT_DISPOSITION).iter();
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return Err("each part needs one Content-Disposition");
    };
    let text = std::str::from_utf8(line.as_bytes()).map_err(|_| "a part's header is not UTF-8")?;
    let unclear = "a part's Content-Disposition is not `form-data; name=\"…\"` read one way";
    let (kind, mut rest) = text.split_once(';').unwrap_or((text, ""));
    if !kind.trim().eq_ignore_ascii_case("form-data") {
        return Err(unclear);
    }
    let (mut name, mut file, mut seen) = (None, false, Vec::new());
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (param, after) = rest.split_once('=').ok_or(unclear)?;
        let param = param.trim().to_ascii_lowercase();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'+-.^_`|~".contains(c);
        if param.is_empty() || !param.chars().all(token) || seen.contains(&param) {
            return Err(unclear);
        }
        let after = after.trim_start();
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').ok_or(unclear)?;
                let value = &quoted[..end];
                if value.contains('\\') {
                    return Err(unclear);
                }
                (value, &quoted[end + 1..])
            }
            None => {
                let end = after.find([';', ' ', '\t']).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        let after = after.trim_start();
        rest = match after.strip_prefix(';') {
            Some(next) => next,
            None if after.is_empty() => after,
            None => return Err(unclear),
        };
        match param.as_str() {
            "name" => name = Some(value.to_owned()),
            "filename" => file = !value.is_empty(),
            _ => {}
        }
        seen.push(param);
    }
    Ok((!file).then(|| name.unwrap_or_default()))
}
