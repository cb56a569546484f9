//! The validated config: every value already checked and typed, so the request path never
//! re-parses or second-guesses it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::{Method, Uri};
use ipnet::IpNet;

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
}

/// `[server]`, typed.
#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    /// Present only when `tls_listen`, `tls_cert` and `tls_key` all are.
    pub tls: Option<Tls>,
    pub admin_listen: Option<SocketAddr>,
    pub header_timeout: Duration,
    pub upstream_timeout: Duration,
    pub max_header_bytes: usize,
    pub shutdown_grace: Duration,
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
}

/// One `[upstreams.NAME]`.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    /// Base URLs (`http://host:port`, maybe with a path prefix), at least one.
    pub urls: Vec<Uri>,
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
}
