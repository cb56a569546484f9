//! The request path's one table of refusals: what each [`GatewayError`] tells the client,
//! in every form the answer takes. The problem-details answer and the gRPC answer
//! (`respond/mod.rs`, written by the limiter's `layer::answer`) both read an
//! [`ErrorAnswer`] and decide nothing of their own, so a client is told the same thing
//! whichever it speaks (as linkerd2-proxy's `errors/respond.rs` sets status, gRPC code and
//! headers in one constructor).
//!
//! [`GatewayError::answer`] has one arm per variant and no wildcard: a new variant does not
//! compile until its status, gRPC code, problem kind and detail are written here. The limit
//! step's refusals are answered by the limiter's constructors (`ErrorAnswer::rate_limited`
//! and the rest), which the tower layer answers with too.

use http::StatusCode;

pub use crate::limit::layer::answer::{ErrorAnswer, GrpcCode};

use super::GatewayError;

impl GatewayError {
    /// How this error is answered: the one place a variant gets its status, gRPC code,
    /// problem kind, detail and extra headers (see the module doc).
    pub fn answer(&self) -> ErrorAnswer<'_> {
        use GrpcCode as G;
        use StatusCode as S;
        match self {
            GatewayError::NoRoute { .. } => {
                ErrorAnswer::plain(S::NOT_FOUND, G::Unimplemented, "no_route", self.to_string())
            }
            GatewayError::UpstreamUnavailable { upstream, .. } => ErrorAnswer::plain(
                S::BAD_GATEWAY,
                G::Unavailable,
                "upstream_unavailable",
                format!("upstream `{upstream}` is unavailable"),
            ),
            GatewayError::UpstreamTimeout { .. } => ErrorAnswer::plain(
                S::GATEWAY_TIMEOUT,
                G::DeadlineExceeded,
                "upstream_timeout",
                self.to_string(),
            ),
            GatewayError::BadRequest(why) => ErrorAnswer::bad_request(why),
            GatewayError::RequestTimeout { .. } => ErrorAnswer::plain(
                S::REQUEST_TIMEOUT,
                G::DeadlineExceeded,
                "request_timeout",
                self.to_string(),
            ),
            GatewayError::PayloadTooLarge { .. } => ErrorAnswer::plain(
                S::PAYLOAD_TOO_LARGE,
                G::ResourceExhausted,
                "payload_too_large",
                self.to_string(),
            ),
            // No gRPC code says "looped" (ABORTED would invite a retry): UNKNOWN, as ever.
            GatewayError::LoopDetected { .. } => ErrorAnswer::plain(
                S::LOOP_DETECTED,
                G::Unknown,
                "loop_detected",
                self.to_string(),
            ),
            // The upstream answered, wrongly: not UNAVAILABLE, which clients retry.
            GatewayError::UnexpectedUpgrade { upstream, .. } => ErrorAnswer::plain(
                S::BAD_GATEWAY,
                G::Unknown,
                "unexpected_upgrade",
                format!("upstream `{upstream}` answered with a protocol switch nobody asked for"),
            ),
            GatewayError::Unauthenticated => ErrorAnswer::unauthenticated(),
            GatewayError::MissingCredential(m) => ErrorAnswer::missing_credential(m),
            GatewayError::MissingKey(m) => ErrorAnswer::missing_key(m),
            GatewayError::RateLimited(report) => ErrorAnswer::rate_limited(report),
            GatewayError::NoClientAddress => ErrorAnswer::no_client_address(),
            GatewayError::StoreUnavailable {
                retry_after,
                policies,
            } => ErrorAnswer::store_unavailable(*retry_after, policies),
        }
    }
}

#[cfg(test)]
mod tests;
