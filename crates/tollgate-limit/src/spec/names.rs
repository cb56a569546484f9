//! The limiter's named choices, spelled as the TOML file spells them: an algorithm, a mode,
//! a decision site, a store kind, what a store error means. `Deserialize` is derived here so
//! the gateway's config and a tower layer's tables read the same words into the same types.

use serde::Deserialize;

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

impl AlgorithmName {
    /// As the config spells it: check's messages name it so, never as the Rust variant.
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::LeakyBucket => "leaky_bucket",
            AlgorithmName::Concurrency => "concurrency",
        }
    }
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

/// `store.kind`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    #[default]
    Memory,
    Redis,
    RedisCluster,
    /// One master found through Redis Sentinel (and found again after a failover).
    RedisSentinel,
}

impl StoreKind {
    /// As the config spells it (`/config` and `/status` show it so).
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::RedisCluster => "redis-cluster",
            StoreKind::RedisSentinel => "redis-sentinel",
        }
    }
}

/// `policies.NAME.site`, and where a route's policy is decided (`route_limits.rs`: there a
/// `central` policy on the memory store is `local`, and local-first is the entry's flag).
/// A new site is a variant here and a folder in `site/` (ARCHITECTURE.md, "Adding a
/// decision site").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Site {
    /// In this process only.
    #[default]
    Local,
    /// In the store, shared by every gateway, exact.
    Central,
    /// Batches of cells leased from the store and spent locally: ~1/k store calls.
    Lease,
    /// limit/N and burst/N on each node (N from membership): no store call.
    Split,
    /// Each key decided by one node of the fleet (rendezvous hashing over the live peers),
    /// exactly; other nodes ask it over the peer transport: no store.
    Owner,
    /// Each node counts locally and gossips its deltas every `gossip_interval`; a soft
    /// limit whose over-admission grows with the gossip delay: no store.
    Gossip,
}

impl Site {
    /// As the config spells it (`GET /routes`, the admin API and the access log name it so).
    pub fn name(self) -> &'static str {
        match self {
            Site::Local => "local",
            Site::Central => "central",
            Site::Lease => "lease",
            Site::Split => "split",
            Site::Owner => "owner",
            Site::Gossip => "gossip",
        }
    }
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

impl OnStoreError {
    /// As the config spells it (a metric label).
    pub fn name(self) -> &'static str {
        match self {
            OnStoreError::Open => "open",
            OnStoreError::Closed => "closed",
            OnStoreError::Local => "local",
        }
    }
}

/// `policies.NAME.on_missing_key`: what a request lacking a part of the policy's key (no
/// account, no `header:NAME` header, no `query:NAME` parameter, no cookie, no claim, no
/// token) gets. Without one the policy cannot count it: `skip` lets it through uncounted,
/// which is what a client spending a per-account login limit only has to do to escape it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMissingKey {
    /// The policy does not apply to the request (the behaviour before the setting existed).
    #[default]
    Skip,
    /// Every such request is counted in one bucket of the policy: the missing part's text
    /// in the key is the marker `missing`, which no real part is spelled as.
    Shared,
    /// The request is refused before any policy is asked: 401 when the missing part is the
    /// account or a token's claim (the request is unauthenticated), else 400. In shadow
    /// mode a would-be refusal: counted and logged as `shadow_deny`, and forwarded.
    Deny,
}
