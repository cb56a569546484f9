//! gRPC requests (`content-type: application/grpc…`) get the gateway's own errors as gRPC:
//! HTTP 200, a trailers-only answer whose `grpc-status` says what happened (RESOURCE_EXHAUSTED
//! for a rate limit), `grpc-message` the same detail a problem body would give, and the
//! rate-limit headers and `Retry-After` of a 429 kept (gRPC clients read headers too). A gRPC
//! client cannot read an HTTP 429 with a JSON body: it would report a protocol error.

use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};

use super::{GatewayError, ResponseConfig, error_response};
use crate::body::{ResponseBody, full};

/// gRPC status codes (grpc/doc/statuscodes.md) the gateway answers with.
mod code {
    pub const UNKNOWN: u8 = 2;
    pub const INVALID_ARGUMENT: u8 = 3;
    pub const DEADLINE_EXCEEDED: u8 = 4;
    pub const RESOURCE_EXHAUSTED: u8 = 8;
    pub const UNIMPLEMENTED: u8 = 12;
    pub const UNAVAILABLE: u8 = 14;
    pub const UNAUTHENTICATED: u8 = 16;
}

/// Whether a request is gRPC (its answers must be gRPC too).
pub fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

fn status_of(err: &GatewayError) -> u8 {
    match err {
        GatewayError::RateLimited(_) | GatewayError::PayloadTooLarge { .. } => {
            code::RESOURCE_EXHAUSTED
        }
        GatewayError::StoreUnavailable { .. } | GatewayError::UpstreamUnavailable { .. } => {
            code::UNAVAILABLE
        }
        GatewayError::UpstreamTimeout { .. } | GatewayError::RequestTimeout { .. } => {
            code::DEADLINE_EXCEEDED
        }
        GatewayError::NoRoute { .. } => code::UNIMPLEMENTED,
        GatewayError::BadRequest(_) => code::INVALID_ARGUMENT,
        GatewayError::Unauthenticated => code::UNAUTHENTICATED,
        GatewayError::MissingKey(m) if m.unauthenticated => code::UNAUTHENTICATED,
        GatewayError::MissingKey(_) => code::INVALID_ARGUMENT,
        _ => code::UNKNOWN,
    }
}

/// `err` as a gRPC answer (see the module doc).
pub fn error_response_grpc(err: &GatewayError, cfg: &ResponseConfig) -> Response<ResponseBody> {
    // The HTTP answer's headers (RateLimit fields, Retry-After) carry over.
    let http = error_response(err, cfg, None);
    let mut headers = HeaderMap::new();
    for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
        if let Some(v) = http.headers().get(name) {
            headers.insert(header::HeaderName::from_static(name), v.clone());
        }
    }
    let mut resp = Response::new(full(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::OK;
    *resp.headers_mut() = headers;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(u16::from(status_of(err))));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(&err.public_detail())) {
        h.insert("grpc-message", v);
    }
    resp
}

/// grpc-message's encoding (PROTOCOL-HTTP2.md): bytes outside printable ASCII, and `%`,
/// as `%XX`.
fn percent_encode(s: &str) -> String {
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
