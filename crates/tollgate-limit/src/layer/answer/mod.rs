//! The layer's last step, and the gateway's: what a client is told when the limit step
//! refuses a request. [`refused`] is the one place each outcome of the limit step
//! ([`Answer`]) is either admitted or becomes a [`Refusal`]; [`ErrorAnswer`] is everything a
//! client is told about one refusal (status, gRPC code, problem kind, detail,
//! `Retry-After`, challenge), made by one constructor per outcome, as linkerd2-proxy's
//! `errors/respond.rs` sets status, gRPC code and headers in one place. The gateway's own
//! errors (`tollgate::respond::GatewayError`) answer their limit outcomes through the same
//! constructors, so a service behind the layer and one behind the gateway tell their
//! clients the same thing.
//!
//! Written out as RFC 9457 problem details by `problem.rs`, as gRPC by `grpc.rs`; the
//! `RateLimit-Policy`/`RateLimit` fields and the 429's body are `headers.rs`'.

use std::borrow::Cow;
use std::sync::Arc;

use http::StatusCode;

mod grpc;
pub mod headers;
mod problem;

pub use grpc::{grpc_response, is_grpc, percent_encode};
pub use headers::{HeadersWhere, ResponseHeaders};
pub use problem::{problem, problem_of, problem_response};

use crate::clock::Nanos;
use crate::keys::MissingKey;
use crate::{Admitted, Answer, PolicyReport};

/// Why the limit step refuses a request: every outcome of [`Answer`] but an admission, and
/// the layer's own two refusals before it asks (a path it cannot make canonical, a request
/// without a peer address).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The request is ambiguous or malformed (a path or key part that cannot be made
    /// canonical); the message is safe to show the client.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The route requires an account, or a policy keys on a token, and the request has
    /// none that verifies.
    #[error("a valid account (a token that verifies) is required")]
    Unauthenticated,
    /// An `on_missing_key = "deny"` policy needs the account or a token's claim (401).
    #[error("{0}")]
    MissingCredential(MissingKey),
    /// An `on_missing_key = "deny"` policy needs another key part the request lacks (400).
    #[error("{0}")]
    MissingKey(MissingKey),
    /// An enforcing policy denied the request; the report names which and for how long.
    #[error("rate limited")]
    RateLimited(Vec<PolicyReport>),
    /// The layer cannot tell who is asking: the app is served without the peer's address
    /// (a wiring mistake). Answered 500 rather than keyed on a guess.
    #[error("the rate limiter cannot tell the client's address")]
    NoClientAddress,
    /// The store could not decide and the route fails closed.
    #[error("rate-limit store unavailable; retry in {}s", retry_after_secs(*.retry_after))]
    StoreUnavailable {
        retry_after: Nanos,
        /// The policies it could not decide.
        policies: Vec<Arc<str>>,
    },
}

/// The limit step's answer: an admitted request goes on; every other outcome is the
/// refusal that answers it. The one place each outcome is answered (no wildcard arm: a new
/// outcome does not compile until it is answered here).
pub fn refused(answer: Answer) -> Result<Admitted, Refusal> {
    match answer {
        Answer::Admit(admitted) => Ok(admitted),
        Answer::Deny { report } => Err(Refusal::RateLimited(report)),
        Answer::Unavailable {
            retry_after,
            policies,
        } => Err(Refusal::StoreUnavailable {
            retry_after,
            policies,
        }),
        Answer::Unauthenticated => Err(Refusal::Unauthenticated),
        Answer::Ambiguous(why) => Err(Refusal::BadRequest(why)),
        Answer::MissingCredential(m) => Err(Refusal::MissingCredential(m)),
        Answer::MissingKey(m) => Err(Refusal::MissingKey(m)),
    }
}

impl Refusal {
    /// How this refusal is answered: each variant by its constructor of [`ErrorAnswer`].
    pub fn answer(&self) -> ErrorAnswer<'_> {
        match self {
            Refusal::BadRequest(why) => ErrorAnswer::bad_request(why),
            Refusal::Unauthenticated => ErrorAnswer::unauthenticated(),
            Refusal::MissingCredential(m) => ErrorAnswer::missing_credential(m),
            Refusal::MissingKey(m) => ErrorAnswer::missing_key(m),
            Refusal::RateLimited(report) => ErrorAnswer::rate_limited(report),
            Refusal::NoClientAddress => ErrorAnswer::no_client_address(),
            Refusal::StoreUnavailable {
                retry_after,
                policies,
            } => ErrorAnswer::store_unavailable(*retry_after, policies),
        }
    }
}

/// A fail-closed 503's `Retry-After`: at least a second.
fn retry_after_secs(n: Nanos) -> u64 {
    headers::ceil_secs(n).max(1)
}

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
    /// The 429: the draft's quota-exceeded body (`headers::too_many_requests`) and the
    /// `RateLimit-Policy`/`RateLimit` headers of the report (a gRPC answer carries those
    /// two, not the legacy `X-RateLimit-*` trio).
    QuotaExceeded { report: &'e [PolicyReport] },
}

/// gRPC status codes (grpc/doc/statuscodes.md) tollgate answers with. Written here, not
/// taken from `tonic`: eight numbers are not worth a gRPC stack in the build.
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
    /// An answer with a plain problem body, no `Retry-After` and no challenge (the
    /// gateway's own errors are made from it too).
    pub fn plain(
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

    /// 400 `bad_request`: `why` is safe to show the client.
    pub fn bad_request(why: &str) -> Self {
        let detail = format!("bad request: {why}");
        Self::plain(
            StatusCode::BAD_REQUEST,
            GrpcCode::InvalidArgument,
            "bad_request",
            detail,
        )
    }

    /// 401 `unauthenticated`: a valid account is required.
    pub fn unauthenticated() -> Self {
        Self::plain(
            StatusCode::UNAUTHORIZED,
            GrpcCode::Unauthenticated,
            "unauthenticated",
            Refusal::Unauthenticated.to_string(),
        )
        .challenged()
    }

    /// 401 as [`ErrorAnswer::unauthenticated`] (clients tell the 401s apart by the
    /// detail, which names the policy and the part).
    pub fn missing_credential(missing: &MissingKey) -> Self {
        Self::plain(
            StatusCode::UNAUTHORIZED,
            GrpcCode::Unauthenticated,
            "unauthenticated",
            missing.to_string(),
        )
        .challenged()
    }

    /// 400 `bad_request`, the detail naming the policy and the part.
    pub fn missing_key(missing: &MissingKey) -> Self {
        Self::plain(
            StatusCode::BAD_REQUEST,
            GrpcCode::InvalidArgument,
            "bad_request",
            missing.to_string(),
        )
    }

    /// 429 `rate_limited`: the draft's quota-exceeded body and `Retry-After`.
    pub fn rate_limited(report: &'e [PolicyReport]) -> Self {
        ErrorAnswer {
            retry_after: headers::retry_after(report),
            body: ProblemBody::QuotaExceeded { report },
            ..Self::plain(
                StatusCode::TOO_MANY_REQUESTS,
                GrpcCode::ResourceExhausted,
                "rate_limited",
                "rate limited",
            )
        }
    }

    /// 500 `no_client_address`: the layer is wired without the peer's address.
    pub fn no_client_address() -> Self {
        Self::plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            GrpcCode::Internal,
            "no_client_address",
            Refusal::NoClientAddress.to_string(),
        )
    }

    /// 503 `store_unavailable`: the draft's temporary-reduced-capacity body naming
    /// `policies`, and `Retry-After`.
    pub fn store_unavailable(retry_after: Nanos, policies: &'e [Arc<str>]) -> Self {
        let secs = retry_after_secs(retry_after);
        ErrorAnswer {
            retry_after: Some(secs),
            body: ProblemBody::ReducedCapacity { policies },
            ..Self::plain(
                StatusCode::SERVICE_UNAVAILABLE,
                GrpcCode::Unavailable,
                "store_unavailable",
                format!("rate-limit store unavailable; retry in {secs}s"),
            )
        }
    }
}
