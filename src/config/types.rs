//! The validated config: every value already checked and typed, so the request path never
//! re-parses or second-guesses it.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use http::{Method, Uri};
use ipnet::IpNet;

pub use crate::normalize::PathRules;

pub use super::raw::{
    EscapedSlashes, ForwardedHeader, HeadersWhere, MethodOverride, PathParameters, UpstreamProtocol,
};
use super::{Account, Cluster, Exemptions, Mode, OnStoreError, Policy, RouteSpec, Store, Tiers};
use crate::limit::spec::{IpKeys, LimiterSpec};

/// A config that passed validation.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from, for log lines and errors raised later (TLS reload, etc.).
    pub origin: PathBuf,
    /// The file has a `[server]` table. Without one it configures tower layers only
    /// (`[layers.NAME]`), `server` holds the defaults, and `tollgate serve` refuses it.
    pub has_server: bool,
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
    pub exempt: Exemptions,
    /// Each policy's `tiers` and `overrides`: the variants the limit step chooses from.
    pub tiers: Tiers,
    /// `[layers.NAME]` in name order: what each tower layer enforces, a route's limit
    /// settings without its matching and forwarding (the gateway's routing never reads them;
    /// `tollgate::layer` does).
    pub layers: Vec<RouteSpec>,
    /// `[telemetry]`: where spans are exported; `None`: tracing is off.
    pub telemetry: Option<super::Telemetry>,
    /// `[server] listen` is set: the proxy runs. Without it (a file of `[rls]` only) the
    /// server runs the rate limit service and the admin listener, and `server.listen`
    /// is a default no socket is bound to.
    pub proxy: bool,
    /// `[rls]`: Envoy's rate limit service, its YAML read.
    pub rls: Option<super::Rls>,
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

/// What the limiter is built from: the config's policies, keys, store and fleet, and each
/// route's policies.
impl From<&Config> for LimiterSpec {
    fn from(config: &Config) -> Self {
        LimiterSpec {
            ip_keys: IpKeys {
                ipv6_prefix: config.client_ip.ipv6_prefix,
                shared_ranges: config.client_ip.shared_ranges.clone(),
            },
            account: config.account.clone(),
            // The rate limit service's rules and domains after the config's own: its
            // routes index the policies so (`config/rls_policies.rs`).
            policies: (config.policies.iter())
                .chain(config.rls.iter().flat_map(|r| &r.policies))
                .cloned()
                .collect(),
            routes: (config.routes.iter().map(Route::limits))
                .chain(config.rls.iter().flat_map(|r| r.routes.iter().cloned()))
                .collect(),
            store: config.store.clone(),
            expected_nodes: config.expected_nodes,
            cluster: config.cluster.clone(),
            exempt: config.exempt.clone(),
            tiers: config.tiers.clone(),
        }
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
    /// `admin_hosts`: the names the admin listener answers besides its own addresses.
    pub admin_hosts: Vec<AdminHost>,
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
    /// The header a request's id travels in (`x-request-id` unless configured).
    pub request_id_header: http::HeaderName,
    /// The access log's file, resolved; `None` writes it to stderr (`serve --access-log`
    /// overrides it).
    pub access_log: Option<PathBuf>,
    /// After SIGTERM: readiness answers 503 this long before the listeners close.
    pub drain_delay: Duration,
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

/// `[response]`, typed: the limiter's layer answers with it too.
pub use tollgate_limit::layer::ResponseHeaders as Response;

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
    /// Per URL (like `urls`): its share of the load, 1 to 1000.
    pub weights: Vec<u32>,
    /// How a request's URL is chosen.
    pub balance: super::Balance,
    /// When a request is sent again.
    pub retry: super::Retry,
    /// When a failing URL is left out.
    pub outlier: super::Outlier,
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
    /// How the body is read for `form:`/`json:` key parts; `None`: no policy reads it.
    pub key_body: Option<super::KeyBodyRules>,
}

impl Route {
    /// The policies this route asks, as the limiter takes them.
    pub fn limits(&self) -> RouteSpec {
        RouteSpec {
            name: self.name.clone(),
            policies: self.policies.clone(),
            mode: self.mode,
            on_store_error: self.on_store_error,
            require_account: self.require_account,
        }
    }
}

/// One `[server] admin_hosts` entry: a `Host` the admin listener answers to. Without a
/// port it is answered on any port (a tunnel or a port-forward changes the port, never the
/// name a rebinding page would carry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminHost {
    /// Lower case; an IPv6 address in brackets, as it is written in a `Host`.
    pub host: String,
    pub port: Option<u16>,
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
