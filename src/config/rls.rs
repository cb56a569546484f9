//! `[rls]`: tollgate as Envoy's rate limit service, both passes in one file. The TOML says
//! where the service listens, where envoyproxy/ratelimit's YAML is (read here, its
//! problems reported as `check`'s) and how its rules run: each rule one policy
//! (`rls_policies.rs`), each domain one route of the limiter.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::load::relative_to;
use super::validate::Validator;
use super::{AlgorithmName, OnStoreError, Policy, RouteSpec, Site};
use crate::rls::RlsConfig;
use crate::rls::{Bounds, OnStoreError as RlsOnStoreError, Served};

/// `[rls]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRls {
    /// gRPC, cleartext HTTP/2: `ShouldRateLimit` and `grpc.health.v1`.
    pub listen: String,
    /// envoyproxy/ratelimit's YAML: one file or a folder of `*.yaml` / `*.yml`, relative
    /// paths from the config file's folder.
    pub config: String,
    /// `POST /json` as envoyproxy/ratelimit answers it.
    pub json_listen: Option<String>,
    /// Where every rule is decided, unless its domain says otherwise.
    #[serde(default)]
    pub site: Site,
    /// The algorithm every rule of N per unit runs as (default: a sliding window of N per
    /// unit, no edge doubling).
    #[serde(default = "sliding_window")]
    pub algorithm: AlgorithmName,
    /// When the store cannot decide: `open`, `closed` (OVER_LIMIT), `local` (the node's
    /// share), `error` (gRPC `UNAVAILABLE`: Envoy's `failure_mode_deny` decides).
    #[serde(default)]
    pub on_store_error: RlsOnStoreError,
    /// The draft RateLimit headers in `response_headers_to_add`.
    #[serde(default)]
    pub headers: bool,
    /// Descriptors per request past this are refused (`RESOURCE_EXHAUSTED`).
    #[serde(default = "max_descriptors")]
    pub max_descriptors: u64,
    /// Entries per descriptor past this are refused (`RESOURCE_EXHAUSTED`).
    #[serde(default = "max_entries")]
    pub max_entries: u64,
    /// A longer domain, entry key or value is refused (`INVALID_ARGUMENT`).
    #[serde(default = "max_value_bytes")]
    pub max_value_bytes: u64,
    /// Per domain: `site`, `algorithm`, `on_store_error`.
    #[serde(default)]
    pub domains: BTreeMap<String, RawRlsDomain>,
    /// PEM certificate chain: `listen` speaks TLS (h2 by ALPN); with `tls_key`. The same
    /// keys as `[server]`'s, paths relative to the config file's folder.
    pub tls_cert: Option<String>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<String>,
}

/// `[rls.domains.NAME]`: this domain's rules run so.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRlsDomain {
    pub site: Option<Site>,
    pub algorithm: Option<AlgorithmName>,
    pub on_store_error: Option<RlsOnStoreError>,
}

fn sliding_window() -> AlgorithmName {
    AlgorithmName::SlidingWindow
}
fn max_descriptors() -> u64 {
    64
}
fn max_entries() -> u64 {
    16
}
fn max_value_bytes() -> u64 {
    1024
}

/// What a domain's route does when the store cannot decide: `error` fails closed there,
/// and the service turns that refusal into `UNAVAILABLE` instead of `OVER_LIMIT`.
pub(super) fn route_on_store_error(e: RlsOnStoreError) -> OnStoreError {
    match e {
        RlsOnStoreError::Open => OnStoreError::Open,
        RlsOnStoreError::Closed | RlsOnStoreError::Error => OnStoreError::Closed,
        RlsOnStoreError::Local => OnStoreError::Local,
    }
}

/// `[rls]`, validated, with its YAML read.
#[derive(Debug, Clone)]
pub struct Rls {
    pub listen: SocketAddr,
    pub json_listen: Option<SocketAddr>,
    /// The YAML's file or folder (resolved), read again on each reload.
    pub config: PathBuf,
    /// `tls_cert` and `tls_key`: `listen` speaks TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// What the service answers from: the YAML, each domain's settings, the bounds.
    pub served: Served,
    /// One policy per counted rule (not `unlimited`, a limit above zero), named as the rule
    /// (`Rule::policy`): appended to the config's policies in the limiter's spec.
    pub policies: Vec<Policy>,
    /// One route per domain, named after it, asking its rules' policies (indexes among the
    /// config's policies followed by `policies`).
    pub routes: Vec<RouteSpec>,
}

/// Where `[rls]` meets the rest of the config: the config's own policies and routes
/// (names are shared with them) and the fleet a site needs.
pub(super) struct Around<'a> {
    pub policies: &'a [Policy],
    pub route_names: Vec<&'a str>,
    pub peers: bool,
}

impl Validator {
    pub(super) fn rls(&mut self, raw: &RawRls, origin: &Path, around: Around<'_>) -> Option<Rls> {
        let listen = self.addr("rls.listen", &raw.listen);
        let json_listen = raw
            .json_listen
            .as_ref()
            .map(|a| self.addr("rls.json_listen", a));
        let bounds = self.rls_bounds(raw);
        let tls = self.rls_tls(raw, origin);
        let path = relative_to(origin, &raw.config);
        let yaml = match RlsConfig::load(&path) {
            Ok(yaml) => Some(yaml),
            Err(errors) => {
                for e in errors.0 {
                    self.fail("rls.config", e.to_string());
                }
                None
            }
        };
        self.rls_algorithm("rls.algorithm", raw.algorithm);
        self.rls_site("rls.site", raw.site, around.peers);
        for (name, d) in &raw.domains {
            let at = |k: &str| format!("rls.domains.{name}.{k}");
            if let Some(a) = d.algorithm {
                self.rls_algorithm(&at("algorithm"), a);
            }
            if let Some(s) = d.site {
                self.rls_site(&at("site"), s, around.peers);
            }
            if yaml
                .as_ref()
                .is_some_and(|y| !y.domains().any(|n| n == name))
            {
                self.fail(
                    &format!("rls.domains.{name}"),
                    format!(
                        "no domain `{name}` in the rate limit config `{}`",
                        path.display()
                    ),
                );
            }
        }
        let yaml = yaml?;
        let built = super::rls_policies::build(raw, &yaml, around.policies.len());
        for name in built.domains.keys() {
            if let Some(i) = around.route_names.iter().position(|r| r == name) {
                self.fail(
                    "rls.config",
                    format!(
                        "domain `{name}` has the name of routes[{i}]: decisions are counted by route name, rename one"
                    ),
                );
            }
        }
        for p in &built.policies {
            if around.policies.iter().any(|o| o.name == p.name) {
                self.fail(
                    "rls.config",
                    format!(
                        "rule `{}` has the name of [policies.{}]: rename one",
                        p.name, p.name
                    ),
                );
            }
        }
        Some(Rls {
            listen: listen?,
            json_listen: json_listen.map_or(Some(None), |a| a.map(Some))?,
            config: path,
            tls: tls?,
            served: Served {
                yaml: Arc::new(yaml),
                domains: built.domains,
                bounds: bounds?,
                headers: raw.headers,
            },
            policies: built.policies,
            routes: built.routes,
        })
    }

    /// `Some(None)` without TLS, `None` when its files are broken.
    fn rls_tls(&mut self, raw: &RawRls, origin: &Path) -> Option<Option<(PathBuf, PathBuf)>> {
        let (cert, key) = match (&raw.tls_cert, &raw.tls_key) {
            (None, None) => return Some(None),
            (Some(c), Some(k)) => (c, k),
            (Some(_), None) => {
                self.fail("rls.tls_key", "required when tls_cert is set");
                return None;
            }
            (None, Some(_)) => {
                self.fail("rls.tls_cert", "required when tls_key is set");
                return None;
            }
        };
        let cert = self.readable("rls.tls_cert", origin, cert);
        let key = self.readable("rls.tls_key", origin, key);
        let cert = cert.filter(|p| self.pem("rls.tls_cert", p, true));
        let key = key.filter(|p| self.pem("rls.tls_key", p, false));
        Some(Some((cert?, key?)))
    }

    fn rls_bounds(&mut self, raw: &RawRls) -> Option<Bounds> {
        let mut bound = |key: &str, v: u64, max: u64| match v {
            1.. if v <= max => Some(v as usize),
            _ => {
                self.fail(
                    &format!("rls.{key}"),
                    format!("{v} is out of range: use 1 to {max}"),
                );
                None
            }
        };
        let max_descriptors = bound("max_descriptors", raw.max_descriptors, 4096);
        let max_entries = bound("max_entries", raw.max_entries, 256);
        let max_value_bytes = bound("max_value_bytes", raw.max_value_bytes, 65_536);
        Some(Bounds {
            max_descriptors: max_descriptors?,
            max_entries: max_entries?,
            max_value_bytes: max_value_bytes?,
        })
    }

    /// The service answers at once: no leaky bucket's delay, no concurrency's release.
    fn rls_algorithm(&mut self, key: &str, a: AlgorithmName) {
        let why = match a {
            AlgorithmName::Concurrency => {
                "a slot is given back when the request ends, and the service never hears of that"
            }
            AlgorithmName::LeakyBucket => {
                "its queue holds a request back, and the service answers at once"
            }
            _ => return,
        };
        self.fail(
            key,
            format!(
                "\"{}\" cannot answer Envoy's rate limit service ({why}): use sliding_window, gcra or token_bucket",
                a.name()
            ),
        );
    }

    fn rls_site(&mut self, key: &str, site: Site, peers: bool) {
        if matches!(site, Site::Owner | Site::Gossip) && !peers {
            self.fail(
                key,
                format!(
                    "\"{}\" needs the fleet's peer transport: set [cluster] peer_listen and peer_secret_env",
                    site.name()
                ),
            );
        }
    }
}
