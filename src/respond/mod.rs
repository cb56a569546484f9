//! The request path's last step, turning failures into answers: the one place a
//! [`GatewayError`] becomes a response (and the one place the limit step's [`Answer`]
//! becomes one, or goes on: [`admitted`]).
//!
//! Every step of the request path returns a `GatewayError` when it cannot go on; the
//! gateway's request path and the tower layer each call [`refusal`] once. What an error
//! tells the client — status, gRPC code, problem kind, detail, extra headers — is written
//! once, in `answer.rs` ([`GatewayError::answer`]); the limiter's `layer::answer` writes it
//! as RFC 9457 problem details, so clients get one machine-readable shape for every error
//! tollgate makes itself, or as gRPC — the writers the tower layer answers with too.

use std::time::Duration;

use http::{Response, StatusCode};

mod answer;

/// The rate-limit headers and the 429's body (`tollgate_limit::layer::answer::headers`).
pub use crate::limit::layer::answer::headers as ratelimit;
pub use crate::limit::layer::answer::is_grpc;

use crate::body::ResponseBody;
use crate::config::Response as ResponseConfig;
use crate::limit::keys::MissingKey;
use crate::limit::layer::answer::{self as write, Refusal};
use crate::limit::{Admitted, Answer, PolicyReport};

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
    /// The request is ambiguous or malformed (a path, authority or key part that cannot be
    /// made canonical, a broken chunked body); the message is safe to show the client.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The client stopped sending its request body for `body_timeout`.
    #[error("no byte of the request body for {timeout:?}")]
    RequestTimeout { timeout: Duration },
    /// The request body is larger than the route's `max_body_bytes`.
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: u64 },
    /// The request's `Via` already names this gateway: it has looped back to us.
    #[error("the request has already passed this gateway (`Via` names `{pseudonym}`)")]
    LoopDetected { pseudonym: String },
    /// The upstream switched protocols the client did not ask for (or is not allowed).
    #[error("upstream `{upstream}` answered 101 to a request that did not ask for {what}")]
    UnexpectedUpgrade { upstream: String, what: String },
    /// The route requires an account, or a policy keys on a token, and the request has
    /// none that verifies.
    #[error("a valid account (a token that verifies) is required")]
    Unauthenticated,
    /// An `on_missing_key = "deny"` policy needs the account or a token's claim, which the
    /// request lacks (401). The message names the policy and the part.
    #[error("{0}")]
    MissingCredential(MissingKey),
    /// An `on_missing_key = "deny"` policy needs another key part the request lacks (400).
    /// The message names the policy and the part.
    #[error("{0}")]
    MissingKey(MissingKey),
    /// An enforcing policy denied the request; the report names which and for how long.
    #[error("rate limited")]
    RateLimited(Vec<PolicyReport>),
    /// The tower layer cannot tell who is asking: the app is served without the peer's
    /// address (a wiring mistake). Answered 500 rather than keyed on a guess.
    #[error("the rate limiter cannot tell the client's address")]
    NoClientAddress,
    /// The store could not decide and the route fails closed.
    #[error("rate-limit store unavailable; retry in {}s", retry_after_secs(*.retry_after))]
    StoreUnavailable {
        retry_after: crate::limit::clock::Nanos,
        /// The policies it could not decide.
        policies: Vec<std::sync::Arc<str>>,
    },
}

fn retry_after_secs(n: crate::limit::clock::Nanos) -> u64 {
    ratelimit::ceil_secs(n).max(1)
}

impl From<Refusal> for GatewayError {
    /// The limit step's refusal, as the gateway's error of the same name.
    fn from(refusal: Refusal) -> GatewayError {
        match refusal {
            Refusal::BadRequest(why) => GatewayError::BadRequest(why),
            Refusal::Unauthenticated => GatewayError::Unauthenticated,
            Refusal::MissingCredential(m) => GatewayError::MissingCredential(m),
            Refusal::MissingKey(m) => GatewayError::MissingKey(m),
            Refusal::RateLimited(report) => GatewayError::RateLimited(report),
            Refusal::NoClientAddress => GatewayError::NoClientAddress,
            Refusal::StoreUnavailable {
                retry_after,
                policies,
            } => GatewayError::StoreUnavailable {
                retry_after,
                policies,
            },
        }
    }
}

impl GatewayError {
    /// The HTTP status it is answered with (a gRPC call's answer is counted as it):
    /// [`GatewayError::answer`]'s.
    pub fn status(&self) -> StatusCode {
        self.answer().status
    }

    /// Short stable identifier, the problem `type` suffix and the logs' `kind`:
    /// [`GatewayError::answer`]'s.
    pub fn kind(&self) -> &'static str {
        self.answer().kind
    }

    /// Whether the upstream, not the client or the limits, failed this request (worth a
    /// WARN in the log; a client's refusals are not).
    pub fn is_upstream_failure(&self) -> bool {
        matches!(
            self,
            GatewayError::UpstreamUnavailable { .. }
                | GatewayError::UpstreamTimeout { .. }
                | GatewayError::UnexpectedUpgrade { .. }
        )
    }
}

/// The limit step's answer: an admitted request goes on to be forwarded; every other
/// outcome is the error that answers it (the limiter's `layer::answer::refused` decides
/// which, for the gateway and the tower layer alike).
pub fn admitted(answer: Answer) -> Result<Admitted, GatewayError> {
    write::refused(answer).map_err(GatewayError::from)
}

/// The answer to a request the limit step or the gateway refused, as its client reads it:
/// a gRPC call's as gRPC (`grpc`: [`is_grpc`] of the request), any other as problem details.
/// The gateway and the tower layer (`tollgate::layer`) both answer through here, so a
/// service behind either tells its clients the same thing. `request_id`, when the request
/// has one, is the problem body's `request_id` member.
pub fn refusal(
    err: &GatewayError,
    grpc: bool,
    cfg: &ResponseConfig,
    request_id: Option<&str>,
) -> Response<ResponseBody> {
    if grpc {
        return error_response_grpc(err, cfg);
    }
    error_response(err, cfg, request_id)
}

/// The response for `err` as problem details, written from [`GatewayError::answer`];
/// logging is the caller's (it knows the route and client).
pub fn error_response(
    err: &GatewayError,
    cfg: &ResponseConfig,
    request_id: Option<&str>,
) -> Response<ResponseBody> {
    write::problem_response(&err.answer(), cfg, request_id)
}

/// `err` as a gRPC answer (HTTP 200, trailers-only, `grpc-status` and `grpc-message`),
/// written from [`GatewayError::answer`].
pub fn error_response_grpc(err: &GatewayError, cfg: &ResponseConfig) -> Response<ResponseBody> {
    write::grpc_response(&err.answer(), cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    #[test]
    fn problem_bodies_hide_error_chains() {
        let e = GatewayError::UpstreamUnavailable {
            upstream: "app".into(),
            reason: "client error (Connect): tcp connect error: Connection refused (os error 111)"
                .into(),
        };
        let detail = e.answer().detail;
        assert_eq!(detail, "upstream `app` is unavailable");
        assert!(
            e.to_string().contains("os error 111"),
            "the log keeps the chain"
        );
    }

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
        let r = error_response(&e, &cfg, None);
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
