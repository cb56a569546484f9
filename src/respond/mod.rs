//! Turning failures into HTTP answers: the one place a [`GatewayError`] becomes a response.
//!
//! Every step of the request path returns a `GatewayError` when it cannot go on; the service
//! at the top of the stack calls [`error_response`] once. Bodies are RFC 9457 problem
//! details so clients get one machine-readable shape for every error tollgate makes itself.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

pub mod ratelimit;

use crate::config::Response as ResponseConfig;
use crate::limit::PolicyReport;
use crate::proxy::ResponseBody;

/// Why the gateway answers a request itself instead of forwarding it.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No route matches host, path and method.
    #[error("no route matches {method} {path}")]
    NoRoute { method: http::Method, path: String },
    /// No upstream could be reached (connection refused, reset, DNS, …).
    #[error("upstream `{upstream}` is unavailable: {reason}")]
    UpstreamUnavailable { upstream: String, reason: String },
    /// The upstream did not send a response head within `upstream_timeout`.
    #[error("upstream `{upstream}` did not answer within {timeout:?}")]
    UpstreamTimeout { upstream: String, timeout: Duration },
    /// The request cannot be forwarded as sent (e.g. a path that does not form a valid URI).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// An enforcing policy denied the request; the report names which and for how long.
    #[error("rate limited")]
    RateLimited(Vec<PolicyReport>),
    /// The store could not decide and the route fails closed.
    #[error("rate-limit store unavailable; retry in {}s", retry_after_secs(*.retry_after))]
    StoreUnavailable {
        retry_after: crate::limit::clock::Nanos,
    },
}

fn retry_after_secs(n: crate::limit::clock::Nanos) -> u64 {
    ratelimit::ceil_secs(n).max(1)
}

impl GatewayError {
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::NoRoute { .. } => StatusCode::NOT_FOUND,
            GatewayError::UpstreamUnavailable { .. } => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::BadRequest(_) => StatusCode::BAD_REQUEST,
            GatewayError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Short stable identifier, used as the problem `type` suffix and in logs.
    pub fn kind(&self) -> &'static str {
        match self {
            GatewayError::NoRoute { .. } => "no_route",
            GatewayError::UpstreamUnavailable { .. } => "upstream_unavailable",
            GatewayError::UpstreamTimeout { .. } => "upstream_timeout",
            GatewayError::BadRequest(_) => "bad_request",
            GatewayError::RateLimited(_) => "rate_limited",
            GatewayError::StoreUnavailable { .. } => "store_unavailable",
        }
    }
}

/// The response for `err`; logging is the caller's (it knows the route and client).
pub fn error_response(err: &GatewayError, cfg: &ResponseConfig) -> Response<ResponseBody> {
    if let GatewayError::RateLimited(report) = err {
        return ratelimit::too_many_requests(report, cfg);
    }
    let status = err.status();
    let body = serde_json::json!({
        "type": format!("https://tollgate.dev/problems/{}", err.kind()),
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": err.to_string(),
    });
    let mut resp = problem(status, body);
    if let GatewayError::StoreUnavailable { retry_after } = err {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after_secs(*retry_after)),
        );
    }
    resp
}

/// A `application/problem+json` response with the given status and JSON body.
pub fn problem(status: StatusCode, body: serde_json::Value) -> Response<ResponseBody> {
    let mut resp = Response::new(full(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

/// A fixed body in the gateway's response body type.
pub fn full(bytes: Bytes) -> ResponseBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_match_kinds() {
        let e = GatewayError::UpstreamTimeout {
            upstream: "app".into(),
            timeout: Duration::from_secs(1),
        };
        let cfg = ResponseConfig {
            headers: crate::config::HeadersWhere::All,
            legacy_headers: false,
        };
        let r = error_response(&e, &cfg);
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
