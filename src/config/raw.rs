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
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientIp {
    /// CIDRs (or bare addresses) whose `X-Forwarded-For` / `Forwarded` we believe.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
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
}
