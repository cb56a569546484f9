//! gRPC requests (`content-type: application/grpc…`) get tollgate's own refusals as gRPC:
//! HTTP 200, a trailers-only answer whose `grpc-status` says what happened (RESOURCE_EXHAUSTED
//! for a rate limit), `grpc-message` the same detail a problem body would give, and the
//! rate-limit headers and `Retry-After` of a 429 kept (gRPC clients read headers too). A gRPC
//! client cannot read an HTTP 429 with a JSON body: it would report a protocol error.

use http::{HeaderValue, Request, Response, StatusCode, header};

use super::headers::{self, ResponseHeaders};
use super::{ErrorAnswer, ProblemBody};
use crate::layer::body::{ResponseBody, full};

/// Whether a request is gRPC (its answers must be gRPC too).
pub fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// `answer` as a gRPC answer (see the module doc): its code, its detail, and the headers a
/// problem answer would carry that gRPC clients read.
pub fn grpc_response(answer: &ErrorAnswer<'_>, cfg: &ResponseHeaders) -> Response<ResponseBody> {
    let mut resp = Response::new(full(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    if let ProblemBody::QuotaExceeded { report } = answer.body {
        headers::add_denied_draft_headers(h, report, cfg);
    }
    if let Some(secs) = answer.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(answer.grpc.number()));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(&answer.detail)) {
        h.insert("grpc-message", v);
    }
    resp
}

/// grpc-message's encoding (PROTOCOL-HTTP2.md): bytes outside printable ASCII, and `%`,
/// as `%XX`.
pub fn percent_encode(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("rate 100% — ok"), "rate 100%25 %E2%80%94 ok");
    }
}
