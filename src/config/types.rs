//! The validated config: every value already checked and typed, so the request path never
//! re-parses or second-guesses it.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, Method, Uri};
use ipnet::IpNet;

pub use crate::normalize::PathRules;

pub use super::raw::{
    AlgorithmName, EscapedSlashes, ForwardedHeader, HeadersWhere, MethodOverride, Mode,
    OnStoreError, PathParameters, Site, StoreKind, UpstreamProtocol,
};

/// A config that passed validation.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from, for log lines and errors raised later (TLS reload, etc.).
    pub origin: PathBuf,
    pub server: Server,
    pub client_ip: ClientIp,
    /// Upstreams by name, in name order.
    pub upstreams: Vec<Upstream>,
    /// Routes in the order written; the router sorts its own copy by specificity.
    pub routes: Vec<Route>,
    /// `[account]`, when some policy may key on the account.
    pub account: Option<Account>,
    /// `[response]`.
    pub response: Response,
    /// Policies in name order; routes refer to them by index.
    pub policies: Vec<Policy>,
    /// `[store]`.
    pub store: Store,
    /// `[cluster] expected_nodes`: N of the L/N split before membership says otherwise.
    pub expected_nodes: NonZeroU32,
    /// `[cluster]`.
    pub cluster: Cluster,
    /// `[exempt]` and each policy's `exempt`.
    pub exempt: super::Exemptions,
    /// Each policy's `tiers` and `overrides`: the variants the limit step chooses from.
    pub tiers: super::Tiers,
}

impl Config {
    /// Route indexes in the order requests are matched: a route with a `host` first, then
    /// the longest `path_prefix`, then the order written (the router and the admin
    /// `/routes` view both use it).
    pub fn match_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.routes.len()).collect();
        order.sort_by_key(|&i| {
            let r = &self.routes[i];
            (r.host.is_none(), std::cmp::Reverse(r.path_prefix.len()), i)
        });
        order
    }
}

/// `[store]`, typed.
#[derive(Clone)]
pub struct Store {
    pub kind: StoreKind,
    /// Parsed and checked for the scheme.
    pub urls: Vec<String>,
    /// The password read from `password_env`, never printed.
    pub password: Option<String>,
    /// The ACL user read from `username_env`.
    pub username: Option<String>,
    /// `rediss://` roots and client certificate, when set.
    pub tls: Option<super::StoreTls>,
    /// redis-sentinel: the sentinels and the master name they monitor.
    pub sentinels: Vec<String>,
    pub master_name: Option<String>,
    pub timeout: Duration,
    pub breaker_failures: NonZeroU32,
    pub breaker_cooldown: Duration,
    pub key_prefix: String,
}

impl std::fmt::Debug for Store {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("kind", &self.kind)
            .field("urls", &self.urls)
            .field("timeout", &self.timeout)
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

/// `[server]`, typed.
#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    /// Present only when `tls_listen`, `tls_cert` and `tls_key` all are.
    pub tls: Option<Tls>,
    pub admin_listen: Option<SocketAddr>,
    /// From `admin_token_env`: the bearer token the admin endpoints but health require.
    pub admin_token: Option<AdminToken>,
    pub header_timeout: Duration,
    pub upstream_timeout: Duration,
    pub max_header_bytes: usize,
    pub shutdown_grace: Duration,
    /// A connection with no request in flight this long is closed (HTTP/2: GOAWAY).
    pub idle_timeout: Duration,
    /// Longest silence inside a request body (then 408) or an upstream's response body.
    pub body_timeout: Duration,
    /// Open client connections per process (public listeners); past it accepting pauses.
    pub max_connections: usize,
    /// How paths are made canonical before routing.
    pub paths: PathRules,
    /// Method-override headers: dropped, or the method routed, limited and forwarded.
    pub method_override: MethodOverride,
    /// This fleet's `Via` name; a request whose `Via` already names it is a loop.
    pub via_pseudonym: String,
}

/// The TLS listener and its key material, paths already resolved and readable.
#[derive(Debug, Clone)]
pub struct Tls {
    pub listen: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[client_ip]`, typed.
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    /// Peers allowed to speak for the client in forwarding headers.
    pub trusted_proxies: Vec<IpNet>,
    /// IPv6 clients are keyed by their network of this length.
    pub ipv6_prefix: u8,
    /// Shared-address ranges and the multiplier of ip-keyed limits there, most specific
    /// first (the user's `shared_ranges`, then 100.64.0.0/10 with `cgnat_headroom`).
    pub shared_ranges: Vec<(IpNet, NonZeroU32)>,
    /// The one forwarding header believed from trusted proxies.
    pub forwarded_header: ForwardedHeader,
}

/// `[account]`, typed.
#[derive(Clone)]
pub struct Account {
    /// Header carrying the account.
    pub header: HeaderName,
    /// Key of the keyed hash applied to account values before they become keys or logs.
    pub hash_key: [u8; 16],
    /// `jwt`: the header carries a token whose claim is the account.
    pub jwt: Option<std::sync::Arc<super::Jwt>>,
}

impl Account {
    /// The keyed hash of an account (or header) value, as keys and logs hold it: SipHash-1-3
    /// with the 128-bit secret, a fast PRF, so keys are unlinkable to the raw value without
    /// the secret, and 128 bits make collisions between clients negligible. 32 hex digits.
    pub fn hash(&self, value: &[u8]) -> String {
        keyed_hash(&self.hash_key, value)
    }
}

/// [`Account::hash`] with any 128-bit secret.
pub fn keyed_hash(secret: &[u8; 16], value: &[u8]) -> String {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher;
    let mut h = SipHasher13::new_with_key(secret);
    h.write(value);
    // `hex` rather than `write!("{b:02x}")` per byte: the formatter cost ~200 instructions
    // a key on the request path (callgrind, `tollgate replay`).
    hex::encode(h.finish128().as_bytes())
}

impl std::fmt::Debug for Account {
    /// Never prints the hash key: it is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// `[response]`, typed.
#[derive(Debug, Clone, Copy)]
pub struct Response {
    pub headers: HeadersWhere,
    pub legacy_headers: bool,
}

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
    pub spend: super::Spend,
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

/// `[cluster]`, typed: who this node is and how it announces itself.
#[derive(Clone)]
pub struct Cluster {
    /// N of the L/N split while membership is unknown (memory store, store down at start).
    pub expected_nodes: NonZeroU32,
    /// This node's member name.
    pub node_id: String,
    /// Membership renewal interval; a member missing three beats is dropped.
    pub heartbeat: Duration,
    /// This node's peer endpoint; when `peers` is not empty it is one of them.
    pub peer_listen: Option<SocketAddr>,
    /// The static fleet, this node included, without duplicates; empty: from membership.
    pub peers: Vec<SocketAddr>,
    /// The shared secret read from `peer_secret_env` (at least 32 bytes), never printed;
    /// present whenever `peer_listen` or `peers` is set.
    pub peer_secret: Option<Vec<u8>>,
    /// How often gossip sends deltas to the peers (1 ms to 10 s).
    pub gossip_interval: Duration,
}

impl std::fmt::Debug for Cluster {
    /// Never prints the peer secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("expected_nodes", &self.expected_nodes)
            .field("node_id", &self.node_id)
            .field("heartbeat", &self.heartbeat)
            .field("peer_listen", &self.peer_listen)
            .field("peers", &self.peers)
            .field("gossip_interval", &self.gossip_interval)
            .finish_non_exhaustive()
    }
}

/// One `[upstreams.NAME]`.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    /// Base URLs (`http://host:port`, maybe with a path prefix), at least one.
    pub urls: Vec<Uri>,
    /// Requests in flight to this upstream per process: bounds its open connections.
    pub max_connections: NonZeroUsize,
    /// TLS settings, when some URL is `https://`.
    pub tls: Option<std::sync::Arc<super::UpstreamTls>>,
    /// Active health checks, when set.
    pub health: Option<super::HealthCheck>,
    /// What the forwarder speaks to it.
    pub protocol: UpstreamProtocol,
}

/// One `[[routes]]`.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    /// Lower-cased, without port.
    pub host: Option<String>,
    pub path_prefix: String,
    /// Empty means all methods.
    pub methods: Vec<Method>,
    /// Index into [`Config::upstreams`], resolved once here.
    pub upstream: usize,
    pub strip_prefix: bool,
    /// Indexes into [`Config::policies`].
    pub policies: Vec<usize>,
    pub mode: Mode,
    pub on_store_error: OnStoreError,
    /// `path_prefix` compared ignoring ASCII case.
    pub case_insensitive: bool,
    /// Lower-case `Upgrade` protocol names forwarded on this route (never `h2c`).
    pub upgrades: Vec<String>,
    /// Largest request body (the route's, else the server's); `None` = unlimited.
    pub max_body_bytes: Option<u64>,
    /// 401 for a request without a (verified) account.
    pub require_account: bool,
}

/// The admin bearer token: compared in constant time, never printed (`Debug` masks it).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    pub fn new(token: String) -> Self {
        AdminToken(token)
    }

    /// The token itself, for `tollgate reload` to send (never logged or shown).
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header value is `Bearer <this token>`, in time that does
    /// not depend on where the first difference is.
    pub fn admits(&self, authorization: &[u8]) -> bool {
        // The scheme name is case-insensitive (RFC 9110 §11.1).
        let (scheme, given) = authorization.split_at(authorization.len().min(7));
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return false;
        }
        let want = self.0.as_bytes();
        given.len() == want.len() && given.iter().zip(want).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::AdminToken;

    #[test]
    fn an_admin_token_is_its_exact_bytes_after_any_case_of_bearer() {
        let t = AdminToken::new("s3cret-token-0123".into());
        assert!(t.admits(b"Bearer s3cret-token-0123"));
        assert!(t.admits(b"bearer s3cret-token-0123"));
        assert!(!t.admits(b"Bearer s3cret-token-012"));
        assert!(!t.admits(b"Bearer s3cret-token-0123 "));
        assert!(!t.admits(b"Basic s3cret-token-0123"));
        assert!(!t.admits(b"s3cret-token-0123"));
        assert!(!t.admits(b"Bearer"));
        assert!(!t.admits(b""));
        assert_eq!(format!("{t:?}"), "AdminToken(***)");
    }
}
