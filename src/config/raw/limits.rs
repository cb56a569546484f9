//! Rate-limit sections of the TOML file as written: `[account]`, `[response]`,
//! `[policies.NAME]` and the enums they share with routes. Part of the user-facing contract.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::limit::spec::{AlgorithmName, Mode, OnMissingKey};

use super::Site;
use super::defaults;

/// `[account]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccount {
    /// Request header naming the account (an API key, a user id).
    pub header: String,
    /// Environment variable holding the secret for the keyed hash of account values; nodes
    /// sharing limits must share it. Unset: a built-in key (values are still never stored raw).
    pub hash_key_env: Option<String>,
    /// The account is a claim of a verified token carried in `header` (`Bearer ` optional).
    pub jwt: Option<crate::config::jwt::RawJwt>,
}

/// `[response]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponse {
    /// Where `RateLimit-Policy` / `RateLimit` appear.
    #[serde(default)]
    pub headers: HeadersWhere,
    /// Also send `X-RateLimit-Limit` / `-Remaining` / `-Reset` for older clients.
    #[serde(default)]
    pub legacy_headers: bool,
}

impl Default for RawResponse {
    fn default() -> Self {
        RawResponse {
            headers: HeadersWhere::All,
            legacy_headers: false,
        }
    }
}

/// `response.headers` (the limiter's layer reads it too).
pub use tollgate_limit::layer::HeadersWhere;

/// `[policies.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// Key parts, joined in order: ip, account, route, method, path, header:NAME,
    /// query:NAME, cookie:NAME, jwt:CLAIM, form:NAME, json:POINTER (docs/src/api-limits.md,
    /// "Keys").
    pub key: Vec<String>,
    /// Body parts of `key` whose values are lower-cased before they are keyed.
    #[serde(default)]
    pub lowercase: Vec<String>,
    pub algorithm: AlgorithmName,
    /// Requests per period (concurrency: requests in flight).
    pub limit: u64,
    /// Required except for concurrency.
    pub period: Option<String>,
    /// gcra / token_bucket: most requests at once from a full state (default: `limit`).
    pub burst: Option<u64>,
    /// Cells a request spends: a number, or `"request_bytes"` (its body's bytes).
    #[serde(default = "defaults::cost")]
    pub cost: RawCost,
    /// leaky_bucket: longest a request may be held before it is denied (default 0: no queue).
    pub max_delay: Option<String>,
    /// Overrides the route's mode for this policy.
    pub mode: Option<Mode>,
    /// A request lacking a key part: `skip` the policy (default), count it in one `shared`
    /// bucket, or `deny` it (401 for the account or a claim, else 400).
    pub on_missing_key: Option<OnMissingKey>,
    /// Show these parts' values in clear in `/limits/{policy}/top`, `/shadow`, the
    /// dashboard and `tollgate shadow-report` (never in the stored key): `true` for every
    /// `form:`, `json:`, `query:` and `header:` part, or a list of parts (`account` only so).
    #[serde(default)]
    pub show_values: RawShowValues,
    /// Memory bound of this policy's local state.
    #[serde(default = "defaults::max_keys")]
    pub max_keys: u64,
    /// Where the decision is made.
    #[serde(default)]
    pub site: Site,
    /// central: a node-local state of the same policy in front, denying without a store call.
    #[serde(default)]
    pub local_first: bool,
    /// lease: most cells one coordinator call grants.
    pub lease_max: Option<u64>,
    /// lease: a granted cell not spent this long after it conforms is dropped.
    pub lease_ttl: Option<String>,
    /// lease: a batch covers about this much of the node's own traffic for the key.
    pub lease_target: Option<String>,
    /// Clients this policy never denies (besides `[exempt]`).
    pub exempt: Option<crate::config::exempt::RawExempt>,
    /// A trusted request header (set by an auth layer) stating the request's cost.
    pub cost_header: Option<String>,
    /// The most `cost_header` may state.
    pub max_cost: Option<u64>,
    /// A response header (set by the upstream) reporting what the call really cost.
    pub response_cost_header: Option<String>,
    /// Only responses with these statuses keep what their request spent.
    pub count: Option<crate::config::spend::RawCount>,
    /// A trusted request header (set by an auth layer) naming the client's tier.
    pub tier_header: Option<String>,
    /// A claim of the verified `[account] jwt` token naming the client's tier.
    pub tier_claim: Option<String>,
    /// Tier name → its own `limit` and `burst`.
    #[serde(default)]
    pub tiers: BTreeMap<String, crate::config::tiers::RawTier>,
    /// Account (raw or `hash:…`) → a tier, or its own `limit` and `burst`.
    #[serde(default)]
    pub overrides: BTreeMap<String, crate::config::tiers::RawOverride>,
}

/// `policies.NAME.show_values` as written: `true`/`false`, or the parts to show.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RawShowValues {
    All(bool),
    Parts(Vec<String>),
}

impl Default for RawShowValues {
    fn default() -> Self {
        RawShowValues::All(false)
    }
}

/// `policies.NAME.cost` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RawCost {
    Cells(u64),
    Named(String),
}
