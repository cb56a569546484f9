//! One policy as the limiter runs it: its key parts, algorithm and numbers (already in
//! range: [`super::MIN_PERIOD`]..=[`super::MAX_PERIOD`], non-zero limits), its site and what
//! a request spends.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use http::HeaderName;

use super::{AlgorithmName, Mode, OnMissingKey, Site};

/// One part of a policy key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// Client address (IPv6 folded to `ipv6_prefix`).
    Ip,
    /// Hashed account value.
    Account,
    /// Route name.
    Route,
    /// Request method.
    Method,
    /// Value of a request header.
    Header(HeaderName),
    /// Decoded value of a query parameter (the name as decoded, case-sensitive).
    Query(String),
    /// Value of a cookie of the `Cookie` header(s) (the name case-sensitive).
    Cookie(String),
    /// A claim of the verified `[account] jwt` token.
    Jwt(String),
    /// The canonical path the router matched (case and a trailing `/` folded).
    Path,
    /// A field of a form body (`application/x-www-form-urlencoded` or
    /// `multipart/form-data`), the name as decoded and compared like a query parameter's.
    Form(BodyField),
    /// A value of a JSON body, by RFC 6901 pointer (`/user/email`).
    Json(BodyField),
    /// A key the caller states itself (Envoy's rate limit service: a descriptor's values):
    /// a policy keyed so is the whole key (`key = [Given]`) and is asked only through
    /// [`Limiter::check_keys`](crate::Limiter::check_keys); a request of the proxy never
    /// has it, so there the policy does not apply (`limiter/given.rs` checks this).
    Given,
}

/// A `form:` field's name or a `json:` pointer, and whether its value is lower-cased
/// (`lowercase = [...]` of the policy: an email's case is the mail server's business, and
/// `Alice@Example.com` rotating its case must not mint budgets; never silent).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BodyField {
    pub name: String,
    pub lowercase: bool,
}

impl std::fmt::Display for KeyPart {
    /// As `key = [...]` writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyPart::Ip => f.write_str("ip"),
            KeyPart::Account => f.write_str("account"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Method => f.write_str("method"),
            KeyPart::Path => f.write_str("path"),
            KeyPart::Header(h) => write!(f, "header:{h}"),
            KeyPart::Query(q) => write!(f, "query:{q}"),
            KeyPart::Cookie(c) => write!(f, "cookie:{c}"),
            KeyPart::Jwt(c) => write!(f, "jwt:{c}"),
            KeyPart::Form(n) => write!(f, "form:{}", n.name),
            KeyPart::Json(p) => write!(f, "json:{}", p.name),
            KeyPart::Given => f.write_str("given"),
        }
    }
}

impl KeyPart {
    /// A value the client sends (an account, a header, a query parameter, a cookie, a
    /// claim, a body field): hashed into keys with the `[account]` hash key, and absent
    /// from some requests. `ip`, `route`, `method` and `path` are neither.
    pub fn is_sent_value(&self) -> bool {
        matches!(
            self,
            KeyPart::Account
                | KeyPart::Header(_)
                | KeyPart::Query(_)
                | KeyPart::Cookie(_)
                | KeyPart::Jwt(_)
                | KeyPart::Form(_)
                | KeyPart::Json(_)
        )
    }

    /// Read from the request body, which the proxy then buffers for the limit step.
    pub fn reads_body(&self) -> bool {
        matches!(self, KeyPart::Form(_) | KeyPart::Json(_))
    }
}

/// One `[policies.NAME]`, typed: every value in range for its algorithm.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub key: Vec<KeyPart>,
    pub algorithm: AlgorithmName,
    pub limit: NonZeroU32,
    /// Zero only for concurrency, which has no window.
    pub period: Duration,
    /// `limit` when not given; 1 for algorithms without bursts.
    pub burst: NonZeroU32,
    pub cost: NonZeroU32,
    /// leaky_bucket only; zero elsewhere.
    pub max_delay: Duration,
    /// Overrides the route's mode when set.
    pub mode: Option<Mode>,
    pub max_keys: NonZeroUsize,
    /// Where the decision is made (central is local when the store is `memory`).
    pub site: Site,
    /// central only: deny from node-local state first.
    pub local_first: bool,
    /// lease only (defaults elsewhere): batch bound, cell lifetime, traffic per batch.
    pub lease: LeaseKnobs,
    /// `cost_header` / `max_cost` and `count`: what a request spends beyond `cost`.
    pub spend: Spend,
    /// What a request lacking a key part gets; `None` when the config does not say (then
    /// `skip`, and `tollgate check` warns where that lets requests through unlimited).
    pub on_missing_key: Option<OnMissingKey>,
    /// `show_values`: the key parts whose values `/limits/{policy}/top`, `/shadow` and the
    /// dashboard show in clear (empty: every sent value shows as its keyed hash). Only
    /// what an operator sees: the key the state is stored under is the same either way,
    /// so it never decides a reload's reset.
    pub show_values: Vec<KeyPart>,
}

/// `lease_max`, `lease_ttl`, `lease_target` of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseKnobs {
    pub max: NonZeroU32,
    pub ttl: Duration,
    pub target: Duration,
}

impl Default for LeaseKnobs {
    fn default() -> Self {
        LeaseKnobs {
            max: NonZeroU32::new(50).unwrap_or(NonZeroU32::MIN),
            ttl: Duration::from_millis(50),
            target: Duration::from_millis(20),
        }
    }
}

/// A policy's per-request spending rules, typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spend {
    /// `cost_header` and `max_cost`: the request's cost is this header's value, 1 to the
    /// bound; absent, the policy's `cost`.
    pub cost_header: Option<(HeaderName, NonZeroU32)>,
    /// `count.statuses`, sorted: a response with another status gives its cells back.
    pub count_statuses: Option<Vec<u16>>,
    /// `response_cost_header`: the response reports what the call really cost; the spend
    /// is resized to it when the head arrives.
    pub response_cost: Option<HeaderName>,
    /// `cost = "request_bytes"`: a request spends its body's bytes (see `limit/cost.rs`).
    pub request_bytes: bool,
}
