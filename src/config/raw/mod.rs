//! The TOML file exactly as a user writes it: the first thing a request's journey depends on.
//!
//! These structs are the user-facing contract (names never change, keys are only added).
//! They hold strings where a value needs checking beyond its TOML type (addresses, CIDRs,
//! durations, URLs), so that the validation pass in `validate/` can report *every* problem
//! with its key path instead of stopping at the first one, as serde would.

use std::collections::BTreeMap;

use serde::Deserialize;

mod layers;
mod limits;
mod safety;
mod store;

pub use layers::*;
pub use limits::*;
pub use safety::*;
pub use store::*;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Listeners and timeouts; required because a gateway without a listener is no gateway
    /// (a file with `[layers.NAME]` only, read by the tower layer, may leave it out).
    pub server: Option<RawServer>,
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
    /// Clients no policy denies.
    pub exempt: Option<super::exempt::RawExempt>,
    /// What each tower layer (`tollgate::layer`) of a service enforces; the gateway's
    /// routing never reads them.
    #[serde(default)]
    pub layers: BTreeMap<String, RawLayer>,
    /// Where spans are exported; without it none are recorded.
    #[serde(default)]
    pub telemetry: super::telemetry::RawTelemetry,
    /// Envoy's rate limit service (`ShouldRateLimit`) over envoyproxy/ratelimit's YAML.
    pub rls: Option<super::rls::RawRls>,
}

impl RawConfig {
    /// `[server]`, or for a file without it (layers only) the one a bare
    /// `listen = "127.0.0.1:0"` would give, so that every rule reading server settings
    /// (path rules, body limits) reads the defaults.
    pub fn server(&self) -> &RawServer {
        static UNSET: std::sync::LazyLock<RawServer> = std::sync::LazyLock::new(|| {
            toml::from_str("listen = \"127.0.0.1:0\"").expect("the default [server] parses")
        });
        self.server.as_ref().unwrap_or(&UNSET)
    }
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// Plain listener: HTTP/1.1 and h2c with prior knowledge. Required, but in a file
    /// that runs only the rate limit service (`[rls]`, no routes).
    pub listen: Option<String>,
    /// Optional TLS listener (ALPN h2 + http/1.1); needs `tls_cert` and `tls_key`.
    pub tls_listen: Option<String>,
    /// PEM certificate chain, relative paths resolved against the config file's folder.
    pub tls_cert: Option<String>,
    /// PEM private key, same resolution as `tls_cert`.
    pub tls_key: Option<String>,
    /// Separate listener for health and metrics, so scrapers never compete with traffic.
    pub admin_listen: Option<String>,
    /// Environment variable holding a bearer token that `/metrics`, `/routes` and `/config`
    /// require (`/healthz` and `/readyz` stay open for balancers).
    pub admin_token_env: Option<String>,
    /// Host names (`name` or `name:port`) the admin listener answers besides its own
    /// addresses and `localhost`: a `Host` it does not know is a page's DNS rebinding.
    #[serde(default)]
    pub admin_hosts: Vec<String>,
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
    /// A keep-alive or HTTP/2 connection with no request in flight this long is closed.
    #[serde(default = "safety::defaults::idle_timeout")]
    pub idle_timeout: String,
    /// No byte of a request body (408) or of an upstream's response body for this long ends it.
    #[serde(default = "safety::defaults::body_timeout")]
    pub body_timeout: String,
    /// Open client connections per process; past it new ones wait in the backlog.
    #[serde(default = "safety::defaults::max_connections")]
    pub max_connections: u64,
    /// Largest request body in bytes (413); none = unlimited. Routes may override it.
    pub max_body_bytes: Option<u64>,
    /// `%2F`, `%5C` and `\` in paths: `reject` (400) or `keep` (encoded).
    #[serde(default)]
    pub escaped_slashes: EscapedSlashes,
    /// `;` in paths: `reject` (400) or `keep` (an ordinary character).
    #[serde(default)]
    pub path_parameters: PathParameters,
    /// Method-override headers: `drop` (from every request) or `route` (as the method).
    #[serde(default)]
    pub method_override: MethodOverride,
    /// This fleet's name in `Via`; a request already carrying it is a loop (508).
    pub via_pseudonym: Option<String>,
    /// The header that carries a request's id: kept from trusted proxies, else minted.
    #[serde(default = "defaults::request_id_header")]
    pub request_id_header: String,
    /// The access log's file (relative paths against the config's folder); none = stderr.
    /// `serve --access-log FILE` overrides it; SIGUSR1 reopens it (log rotation).
    pub access_log: Option<String>,
    /// After SIGTERM, how long `/readyz` answers 503 while the listeners still serve, so a
    /// balancer stops sending before they close (Kubernetes: its readiness period).
    #[serde(default = "defaults::drain_delay")]
    pub drain_delay: String,
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
    /// The one forwarding header believed from trusted proxies; the other is ignored.
    #[serde(default)]
    pub forwarded_header: ForwardedHeader,
}

impl Default for RawClientIp {
    fn default() -> Self {
        RawClientIp {
            trusted_proxies: Vec::new(),
            ipv6_prefix: defaults::ipv6_prefix(),
            cgnat_headroom: defaults::cgnat_headroom(),
            shared_ranges: Vec::new(),
            forwarded_header: ForwardedHeader::default(),
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

/// `[upstreams.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `http://host:port` base URLs, each a string or `{ url, weight }`; several share the
    /// load by `balance`, an ejected or unhealthy one is skipped.
    pub urls: Vec<super::backends::RawUpstreamUrl>,
    /// Requests in flight to this upstream per process (so connections open to it); more
    /// wait for a free one within `upstream_timeout`.
    #[serde(default = "safety::defaults::upstream_max_connections")]
    pub max_connections: u64,
    /// https: PEM roots to trust instead of the system store.
    pub ca_file: Option<String>,
    /// https: PEM certificate chain presented when the upstream asks for one (mTLS).
    pub client_cert: Option<String>,
    /// https: PEM private key of `client_cert`.
    pub client_key: Option<String>,
    /// https: base64 SHA-256 of the leaf's SubjectPublicKeyInfo (curl's `--pinnedpubkey`),
    /// one of which the upstream's key must match: on top of `ca_file`, or, without it,
    /// instead of a chain (a self-signed leaf known by its key).
    pub pin_sha256: Option<Vec<String>>,
    /// Active health checks of every URL.
    pub health: Option<super::health::RawHealth>,
    /// HTTP/1.1, or HTTP/2 (h2c prior knowledge on http://, ALPN h2 on https://): gRPC.
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// How a request's URL is chosen among `urls`.
    #[serde(default)]
    pub balance: super::backends::Balance,
    /// Extra attempts a request may make after its first (idempotent, replayable ones).
    #[serde(default)]
    pub retries: u64,
    /// Upstream statuses that are retried (with `retries`). The `retry_*` keys are options
    /// so that one written without `retries` is refused rather than silently unused.
    pub retry_on: Option<Vec<u16>>,
    /// At most this share of requests (%, over 10 s) are retries.
    pub retry_budget_percent: Option<f64>,
    /// Retries a second allowed whatever the budget says (so a quiet upstream can retry).
    pub retry_budget_min_per_second: Option<u64>,
    /// First wait before a retry, doubled for each next one, jittered.
    pub retry_backoff: Option<String>,
    /// When a URL is ejected for failing.
    #[serde(default)]
    pub outlier: super::backends::RawOutlier,
}

/// `upstreams.NAME.protocol`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    #[default]
    Http1,
    H2,
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
    /// `Upgrade` protocols forwarded on this route; every other is stripped (`h2c` never).
    #[serde(default = "safety::defaults::upgrades")]
    pub upgrades: Vec<String>,
    /// Overrides `server.max_body_bytes` for this route.
    pub max_body_bytes: Option<u64>,
    /// Body bytes read for `form:`/`json:` key parts (default 64 KiB).
    pub max_key_body_bytes: Option<u64>,
    /// A body larger than that: 413 (`reject`), or its parts are `missing`.
    #[serde(default)]
    pub on_large_key_body: super::key_body::OnLargeKeyBody,
    /// Requests without an account (with `[account] jwt`: without a token that verifies)
    /// are answered 401.
    #[serde(default)]
    pub require_account: bool,
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
    /// Compare `path_prefix` ignoring ASCII case, for backends that route that way.
    #[serde(default)]
    pub case_insensitive: bool,
}

impl Default for RawMatch {
    fn default() -> Self {
        RawMatch {
            path_prefix: defaults::path_prefix(),
            methods: Vec::new(),
            host: None,
            case_insensitive: false,
        }
    }
}

/// Defaults live in one place so the README, the sample config and the code agree.
pub(super) mod defaults {
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
    pub fn request_id_header() -> String {
        "x-request-id".into()
    }
    pub fn drain_delay() -> String {
        "0s".into()
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
    pub fn cost() -> super::RawCost {
        super::RawCost::Cells(1)
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
    pub fn heartbeat() -> String {
        "1s".into()
    }
    pub fn lease_max() -> u64 {
        50
    }
    pub fn lease_ttl() -> String {
        "50ms".into()
    }
    pub fn lease_target() -> String {
        "20ms".into()
    }
    pub fn expected_nodes() -> u32 {
        1
    }
}
