//! The TOML file exactly as a user writes it: the first thing a request's journey depends on.
//!
//! These structs are the user-facing contract (names never change, keys are only added).
//! They hold strings where a value needs checking beyond its TOML type (addresses, CIDRs,
//! durations, URLs), so that the validation pass in `validate.rs` can report *every* problem
//! with its key path instead of stopping at the first one, as serde would.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Listeners and timeouts; required because a gateway without a listener is no gateway.
    pub server: RawServer,
    /// Which peers may tell us the client's address.
    #[serde(default)]
    pub client_ip: RawClientIp,
    /// Named backends routes point at.
    #[serde(default)]
    pub upstreams: BTreeMap<String, RawUpstream>,
    /// Request matching, in the order written (order breaks ties between equal matches).
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    /// Where the account of a request comes from; without it no policy keys on `account`.
    pub account: Option<RawAccount>,
    /// Which rate-limit headers responses carry.
    #[serde(default)]
    pub response: RawResponse,
    /// Rate-limit policies by name; routes list the ones they enforce.
    #[serde(default)]
    pub policies: BTreeMap<String, RawPolicy>,
    /// Where `central` policies keep their state.
    #[serde(default)]
    pub store: RawStore,
    /// This node's place in a fleet of gateways.
    #[serde(default)]
    pub cluster: RawCluster,
}

/// `[store]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// memory (embedded, this process only) | redis | redis-cluster.
    #[serde(default)]
    pub kind: StoreKind,
    /// `redis://` or `rediss://` URLs; for a cluster, any seed nodes.
    #[serde(default)]
    pub urls: Vec<String>,
    /// Environment variable holding the Redis password (kept out of the file).
    pub password_env: Option<String>,
    /// Per store call: a slow store is worse than a down one.
    #[serde(default = "defaults::store_timeout")]
    pub timeout: String,
    /// Consecutive failures that open the breaker, and how long it stays open.
    #[serde(default)]
    pub breaker: RawBreaker,
    /// Prepended to every key, so several deployments can share one Redis.
    #[serde(default = "defaults::key_prefix")]
    pub key_prefix: String,
}

impl Default for RawStore {
    fn default() -> Self {
        RawStore {
            kind: StoreKind::Memory,
            urls: Vec::new(),
            password_env: None,
            timeout: defaults::store_timeout(),
            breaker: RawBreaker::default(),
            key_prefix: defaults::key_prefix(),
        }
    }
}

/// `store.kind`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    #[default]
    Memory,
    Redis,
    RedisCluster,
}

/// `store.breaker`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    #[serde(default = "defaults::breaker_failures")]
    pub failures: u32,
    #[serde(default = "defaults::breaker_cooldown")]
    pub cooldown: String,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker {
            failures: defaults::breaker_failures(),
            cooldown: defaults::breaker_cooldown(),
        }
    }
}

/// `[cluster]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Gateways sharing the limits; `on_store_error = "local"` enforces L/N with it.
    #[serde(default = "defaults::expected_nodes")]
    pub expected_nodes: u32,
}

impl Default for RawCluster {
    fn default() -> Self {
        RawCluster {
            expected_nodes: defaults::expected_nodes(),
        }
    }
}

/// `policies.NAME.site`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Site {
    /// In this process only.
    #[default]
    Local,
    /// In the store, shared by every gateway, exact.
    Central,
}

/// `routes[].on_store_error`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Forward as if allowed (reads that must not break when Redis does).
    #[default]
    Open,
    /// Answer 503 (login, payments: better refused than unlimited).
    Closed,
    /// Decide with a local limiter at L/N.
    Local,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// Plain listener: HTTP/1.1 and h2c with prior knowledge.
    pub listen: String,
    /// Optional TLS listener (ALPN h2 + http/1.1); needs `tls_cert` and `tls_key`.
    pub tls_listen: Option<String>,
    /// PEM certificate chain, relative paths resolved against the config file's folder.
    pub tls_cert: Option<String>,
    /// PEM private key, same resolution as `tls_cert`.
    pub tls_key: Option<String>,
    /// Separate listener for health and metrics, so scrapers never compete with traffic.
    pub admin_listen: Option<String>,
    /// A client that has not sent a full request head by then is cut off (slowloris).
    #[serde(default = "defaults::header_timeout")]
    pub header_timeout: String,
    /// Longest wait for an upstream's response head before answering 504.
    #[serde(default = "defaults::upstream_timeout")]
    pub upstream_timeout: String,
    /// Larger request heads get 431.
    #[serde(default = "defaults::max_header_bytes")]
    pub max_header_bytes: u64,
    /// How long in-flight requests may finish after SIGTERM before the process exits anyway.
    #[serde(default = "defaults::shutdown_grace")]
    pub shutdown_grace: String,
}

/// `[client_ip]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientIp {
    /// CIDRs (or bare addresses) whose `X-Forwarded-For` / `Forwarded` we believe.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// IPv6 clients are keyed by this prefix: one subscriber usually holds a whole /64.
    #[serde(default = "defaults::ipv6_prefix")]
    pub ipv6_prefix: u8,
    /// Multiplier of ip-keyed limits for 100.64.0.0/10 (RFC 6598), where many users share one address.
    #[serde(default = "defaults::cgnat_headroom")]
    pub cgnat_headroom: u32,
    /// More known shared addresses (corporate NATs, campus gateways) with their own headroom.
    #[serde(default)]
    pub shared_ranges: Vec<RawSharedRange>,
}

impl Default for RawClientIp {
    fn default() -> Self {
        RawClientIp {
            trusted_proxies: Vec::new(),
            ipv6_prefix: defaults::ipv6_prefix(),
            cgnat_headroom: defaults::cgnat_headroom(),
            shared_ranges: Vec::new(),
        }
    }
}

/// One `shared_ranges` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSharedRange {
    pub cidr: String,
    pub headroom: u32,
}

/// `[account]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccount {
    /// Request header naming the account (an API key, a user id).
    pub header: String,
    /// Environment variable holding the secret for the keyed hash of account values; nodes
    /// sharing limits must share it. Unset: a built-in key (values are still never stored raw).
    pub hash_key_env: Option<String>,
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

/// `response.headers`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadersWhere {
    /// On every response of a route with policies.
    #[default]
    All,
    /// Only on 429s.
    Denied,
    /// Never.
    None,
}

/// `[policies.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// Key parts, joined in order: ip, account, route, method, header:NAME.
    pub key: Vec<String>,
    pub algorithm: AlgorithmName,
    /// Requests per period (concurrency: requests in flight).
    pub limit: u64,
    /// Required except for concurrency.
    pub period: Option<String>,
    /// gcra / token_bucket: most requests at once from a full state (default: `limit`).
    pub burst: Option<u64>,
    /// Cells a request spends.
    #[serde(default = "defaults::cost")]
    pub cost: u64,
    /// leaky_bucket: longest a request may be held before it is denied (default 0: no queue).
    pub max_delay: Option<String>,
    /// Overrides the route's mode for this policy.
    pub mode: Option<Mode>,
    /// Memory bound of this policy's local state.
    #[serde(default = "defaults::max_keys")]
    pub max_keys: u64,
    /// Where the decision is made.
    #[serde(default)]
    pub site: Site,
    /// central: a node-local state of the same policy in front, denying without a store call.
    #[serde(default)]
    pub local_first: bool,
}

/// `policies.NAME.algorithm`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmName {
    Gcra,
    TokenBucket,
    SlidingWindow,
    LeakyBucket,
    Concurrency,
}

/// Route or policy mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Denied requests get 429.
    #[default]
    Enforce,
    /// Decide and count, but forward everything and change nothing the client sees.
    Shadow,
    /// Ask no policy.
    Off,
}

/// `[upstreams.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `http://host:port` base URLs; several are used round robin, a dead one is skipped.
    pub urls: Vec<String>,
}

/// `[[routes]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Unique; appears in logs, metrics and (later) rate-limit keys.
    pub name: String,
    /// Which requests this route takes.
    #[serde(rename = "match", default)]
    pub matcher: RawMatch,
    /// Name of an `[upstreams.NAME]` table.
    pub upstream: String,
    /// Remove `path_prefix` from the path before forwarding.
    #[serde(default)]
    pub strip_prefix: bool,
    /// Names of `[policies.NAME]` this route enforces; a request spends only if all allow.
    #[serde(default)]
    pub policies: Vec<String>,
    /// enforce | shadow | off for this route's policies.
    #[serde(default)]
    pub mode: Mode,
    /// What central policies do when the store is slow or down.
    #[serde(default)]
    pub on_store_error: OnStoreError,
}

/// `match = { ... }` of a route.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    /// Path must start with this (segment-agnostic, like nginx `location /prefix`).
    #[serde(default = "defaults::path_prefix")]
    pub path_prefix: String,
    /// Empty means every method.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Exact host (port ignored, case-insensitive); a route with a host beats one without.
    pub host: Option<String>,
}

impl Default for RawMatch {
    fn default() -> Self {
        RawMatch {
            path_prefix: defaults::path_prefix(),
            methods: Vec::new(),
            host: None,
        }
    }
}

/// Defaults live in one place so the README, the sample config and the code agree.
mod defaults {
    pub fn header_timeout() -> String {
        "10s".into()
    }
    pub fn upstream_timeout() -> String {
        "30s".into()
    }
    pub fn max_header_bytes() -> u64 {
        16 * 1024
    }
    pub fn shutdown_grace() -> String {
        "10s".into()
    }
    pub fn path_prefix() -> String {
        "/".into()
    }
    pub fn ipv6_prefix() -> u8 {
        64
    }
    pub fn cgnat_headroom() -> u32 {
        4
    }
    pub fn cost() -> u64 {
        1
    }
    pub fn max_keys() -> u64 {
        1_000_000
    }
    pub fn store_timeout() -> String {
        "10ms".into()
    }
    pub fn key_prefix() -> String {
        "tg:".into()
    }
    pub fn breaker_failures() -> u32 {
        5
    }
    pub fn breaker_cooldown() -> String {
        "2s".into()
    }
    pub fn expected_nodes() -> u32 {
        1
    }
}
