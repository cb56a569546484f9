//! The request path's one table of refusals: what each [`GatewayError`] tells the client,
//! in every form the answer takes. The problem-details answer (`respond/mod.rs`, the 429's
//! body in `ratelimit.rs`) and the gRPC answer (`grpc.rs`) both read an [`ErrorAnswer`]
//! and decide nothing of their own, so a client is told the same thing whichever it speaks
//! (as linkerd2-proxy's `errors/respond.rs` sets status, gRPC code and headers in one
//! constructor).
//!
//! [`GatewayError::answer`] has one arm per variant and no wildcard: a new variant does not
//! compile until its status, gRPC code, problem kind and detail are written here.

use std::borrow::Cow;
use std::sync::Arc;

use http::StatusCode;

use super::{GatewayError, ratelimit, retry_after_secs};
use crate::limit::PolicyReport;

/// Everything a client is told about one error, as HTTP problem details or as gRPC.
#[derive(Debug)]
pub struct ErrorAnswer<'e> {
    /// The HTTP status: the problem answer's, and what metrics and the access log count a
    /// gRPC call's answer as (a rate-limited call is a 429 there too).
    pub status: StatusCode,
    /// The `grpc-status` of a gRPC call's answer (HTTP 200, trailers-only).
    pub grpc: GrpcCode,
    /// Short stable identifier: the problem `type` under `https://tollgate.dev/problems/`
    /// (the 429 and the fail-closed 503 send the draft's IANA types instead: `body`) and
    /// the logs' `kind`.
    pub kind: &'static str,
    /// What the client may know: the problem `detail` (the 429 writes a longer one from
    /// its report) and the `grpc-message`. The log line has the whole error; this never
    /// carries an OS or library error chain, nor a backend address.
    pub detail: Cow<'e, str>,
    /// `Retry-After`, in seconds, in both forms.
    pub retry_after: Option<u64>,
    /// `WWW-Authenticate: Bearer` on the problem answer: a 401 names the scheme that would
    /// let the request in. A gRPC answer says it with `UNAUTHENTICATED` alone.
    pub challenge: bool,
    /// The problem body's shape, and the 429's `RateLimit` headers.
    pub body: ProblemBody<'e>,
}

/// Which problem body an error gets beyond `type`, `title`, `status` and `detail`.
#[derive(Debug, Clone, Copy)]
pub enum ProblemBody<'e> {
    /// `type` is `https://tollgate.dev/problems/{kind}`.
    Plain,
    /// The 503 of a store that cannot decide, the route failing closed: the draft's
    /// temporary-reduced-capacity type and the policies it could not decide as
    /// `violated-policies`.
    ReducedCapacity { policies: &'e [Arc<str>] },
    /// The 429: the draft's quota-exceeded body (`ratelimit::too_many_requests`) and the
    /// `RateLimit-Policy`/`RateLimit` headers of the report (a gRPC answer carries those
    /// two, not the legacy `X-RateLimit-*` trio).
    QuotaExceeded { report: &'e [PolicyReport] },
}

/// gRPC status codes (grpc/doc/statuscodes.md) the gateway answers with. Written here, not
/// taken from `tonic`: seven numbers are not worth a gRPC stack in the gateway's build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcCode {
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The `grpc-status` value.
    pub fn number(self) -> u16 {
        self as u16
    }
}

impl<'e> ErrorAnswer<'e> {
    /// An answer with a plain problem body, no `Retry-After` and no challenge.
    fn plain(
        status: StatusCode,
        grpc: GrpcCode,
        kind: &'static str,
        detail: impl Into<Cow<'e, str>>,
    ) -> Self {
        ErrorAnswer {
            status,
            grpc,
            kind,
            detail: detail.into(),
            retry_after: None,
            challenge: false,
            body: ProblemBody::Plain,
        }
    }

    /// A 401: the problem answer names the `Bearer` scheme.
    fn challenged(mut self) -> Self {
        self.challenge = true;
        self
    }
}

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
            GatewayError::BadRequest(_) => ErrorAnswer::plain(
                S::BAD_REQUEST,
                G::InvalidArgument,
                "bad_request",
                self.to_string(),
            ),
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
            GatewayError::Unauthenticated => ErrorAnswer::plain(
                S::UNAUTHORIZED,
                G::Unauthenticated,
                "unauthenticated",
                self.to_string(),
            )
            .challenged(),
            // The same problem types as the other 401s and 400s: clients tell them apart
            // by status already, and the detail says which policy and part.
            GatewayError::MissingCredential(m) => ErrorAnswer::plain(
                S::UNAUTHORIZED,
                G::Unauthenticated,
                "unauthenticated",
                m.to_string(),
            )
            .challenged(),
            GatewayError::MissingKey(m) => ErrorAnswer::plain(
                S::BAD_REQUEST,
                G::InvalidArgument,
                "bad_request",
                m.to_string(),
            ),
            GatewayError::RateLimited(report) => ErrorAnswer {
                retry_after: ratelimit::retry_after(report),
                body: ProblemBody::QuotaExceeded { report },
                ..ErrorAnswer::plain(
                    S::TOO_MANY_REQUESTS,
                    G::ResourceExhausted,
                    "rate_limited",
                    "rate limited",
                )
            },
            GatewayError::NoClientAddress => ErrorAnswer::plain(
                S::INTERNAL_SERVER_ERROR,
                G::Internal,
                "no_client_address",
                self.to_string(),
            ),
            GatewayError::StoreUnavailable {
                retry_after,
                policies,
            } => ErrorAnswer {
                retry_after: Some(retry_after_secs(*retry_after)),
                body: ProblemBody::ReducedCapacity { policies },
                ..ErrorAnswer::plain(
                    S::SERVICE_UNAVAILABLE,
                    G::Unavailable,
                    "store_unavailable",
                    self.to_string(),
                )
            },
        }
    }
}

#[cfg(test)]
mod tests;
