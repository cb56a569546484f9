//! The validation pass: raw strings to typed values, and every cross-reference checked.
//!
//! It never stops at the first problem: a user fixing a config wants the whole list.

mod admin;
mod fleet;
mod keys;
mod layers;
mod limits;
mod operations;
mod peers;
mod routes;
mod safety;
mod shares;
mod show;
mod store;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use http::Uri;
use ipnet::IpNet;

use super::load::relative_to;
use super::raw::RawConfig;
use super::{Config, ConfigError, Policy, Problem, Response, Server, Tls, Upstream};
use safety::default_via_pseudonym;

/// Turn a parsed file into a [`Config`], or list everything wrong with it.
pub fn validate(raw: RawConfig, origin: &Path) -> Result<Config, ConfigError> {
    let mut v = Validator::default();
    let server = v.server(&raw, origin);
    let client_ip = v.client_ip(&raw.client_ip);
    let account = raw.account.as_ref().and_then(|a| v.account(a, origin));
    // A written [account] that failed has said why: what needs it says nothing more.
    v.account_failed = raw.account.is_some() && account.is_none();
    let policies = v.policies(&raw.policies);
    let store = v.store(&raw.store, origin);
    let cluster = v.cluster(&raw.cluster);
    let redis = store
        .as_ref()
        .is_some_and(|s| s.kind != super::StoreKind::Memory);
    v.peer_sites(&policies, &cluster, redis);
    v.fleet_reach(&raw.cluster, &cluster, &policies, store.as_ref());
    v.split_shares(&policies, cluster.expected_nodes);
    v.node_periods(&policies, cluster.expected_nodes);
    let upstreams: Vec<Upstream> = raw
        .upstreams
        .iter()
        .map(|(name, u)| {
            let written: Vec<&str> = u.urls.iter().map(|e| e.url.as_str()).collect();
            let urls = v.upstream_urls(name, &written);
            let backends = v.backends(name, u);
            Upstream {
                name: name.clone(),
                tls: v.upstream_tls(name, u, &urls, origin),
                health: u.health.as_ref().and_then(|h| v.health(name, h)),
                protocol: u.protocol,
                urls,
                max_connections: v.upstream_max_connections(name, u.max_connections),
                weights: backends.weights,
                balance: u.balance,
                retry: backends.retry,
                outlier: backends.outlier,
            }
        })
        .collect();
    let routes = v.routes(&raw, &upstreams, &policies);
    v.fallback_shares(&routes, &policies, cluster.expected_nodes);
    let mut server = server;
    if let Some(s) = server.as_mut().filter(|s| s.via_pseudonym.is_empty()) {
        s.via_pseudonym = default_via_pseudonym(&cluster.node_id);
    }
    v.account_is_defined(&policies, account.as_ref());
    v.shown_account_header(&raw.policies, &policies, account.as_ref());
    for (i, r) in routes.iter().enumerate() {
        if r.require_account && v.no_account(account.as_ref()) {
            v.fail(
                &format!("routes[{i}].require_account"),
                "needs an [account] section to read the account from",
            );
        }
    }
    let layers = v.layers(&raw, &policies, account.as_ref());
    let telemetry = v.telemetry(&raw.telemetry);
    let rls = raw.rls.as_ref().and_then(|r| {
        let around = super::rls::Around {
            policies: &policies,
            route_names: routes.iter().map(|r| r.name.as_str()).collect(),
            peers: cluster.peer_listen.is_some(),
        };
        v.rls(r, origin, around)
    });
    if let Some(r) = &rls {
        v.node_periods(&r.policies, cluster.expected_nodes);
    }
    if raw.server.is_none() && layers.is_empty() && raw.rls.is_none() {
        v.fail(
            "server",
            "missing table [server] with its `listen` (only a file of [layers.NAME] for the tower layer may leave it out)",
        );
    }
    let exempt = v.exemptions(raw.exempt.as_ref(), &raw.policies, account.as_ref());
    let tiers = v.tiers(&raw.policies, account.as_ref());
    // A tier's numbers meet the same per-node bounds as the policy's own.
    let variants: Vec<Policy> = tiers.variants().cloned().collect();
    v.split_shares(&variants, cluster.expected_nodes);
    v.node_periods(&variants, cluster.expected_nodes);
    if let Some(s) = &server {
        let written = raw.server.as_ref().map(|r| r.request_id_header.as_str());
        let own = (
            written.unwrap_or(s.request_id_header.as_str()),
            &s.request_id_header,
        );
        v.request_id_header_own(own, account.as_ref(), &policies, &tiers);
    }
    if !v.problems.is_empty() {
        return Err(ConfigError::Invalid {
            file: origin.to_path_buf(),
            problems: v.problems,
        });
    }
    Ok(Config {
        origin: origin.to_path_buf(),
        has_server: raw.server.is_some(),
        proxy: raw.server.as_ref().is_some_and(|s| s.listen.is_some()),
        rls,
        layers,
        server: server.expect("server is Some when no problems were found"),
        client_ip,
        upstreams,
        routes,
        account,
        response: Response {
            headers: raw.response.headers,
            legacy_headers: raw.response.legacy_headers,
        },
        policies,
        store: store.expect("store is Some when no problems were found"),
        expected_nodes: cluster.expected_nodes,
        cluster,
        exempt,
        tiers,
        telemetry,
    })
}

/// Collects problems while converting values.
#[derive(Default)]
pub(super) struct Validator {
    problems: Vec<Problem>,
    /// `[account]` is written but has problems of its own (an unset `hash_key_env`, a
    /// broken `jwt`): the parts that need it are not told again that it is missing.
    pub(super) account_failed: bool,
}

impl Validator {
    /// Whether there is no `[account]` section to read accounts from: not when the section
    /// is written but failed (its own problems are the ones to report).
    pub(super) fn no_account(&self, account: Option<&super::Account>) -> bool {
        account.is_none() && !self.account_failed
    }

    pub(super) fn problem_count(&self) -> usize {
        self.problems.len()
    }

    pub(super) fn fail(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(key, message));
    }

    pub(super) fn addr(&mut self, key: &str, s: &str) -> Option<SocketAddr> {
        SocketAddr::from_str(s)
            .map_err(|_| {
                self.fail(
                    key,
                    format!("`{s}` is not an address like \"127.0.0.1:8080\""),
                )
            })
            .ok()
    }

    pub(super) fn duration(&mut self, key: &str, s: &str) -> Option<Duration> {
        match humantime::parse_duration(s) {
            Ok(d) if d.is_zero() => {
                self.fail(key, "must be longer than zero");
                None
            }
            Ok(d) => Some(d),
            Err(_) => {
                self.fail(
                    key,
                    format!("`{s}` is not a duration like \"250ms\", \"10s\" or \"1m\""),
                );
                None
            }
        }
    }

    pub(super) fn cidr(&mut self, key: &str, s: &str) -> Option<IpNet> {
        // A bare address is a one-host network: users write "10.0.0.5" and mean exactly that.
        IpNet::from_str(s)
            .or_else(|_| std::net::IpAddr::from_str(s).map(IpNet::from))
            .map_err(|_| self.fail(key, format!("`{s}` is not a CIDR like \"10.0.0.0/8\"")))
            .ok()
    }

    pub(super) fn readable(&mut self, key: &str, origin: &Path, s: &str) -> Option<PathBuf> {
        let path = relative_to(origin, s);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Some(path),
            Ok(_) => {
                self.fail(key, format!("`{}` is not a file", path.display()));
                None
            }
            Err(e) => {
                self.fail(key, format!("cannot read `{}`: {e}", path.display()));
                None
            }
        }
    }

    /// A cert file must hold a PEM certificate, a key file a PEM private key; checked here so
    /// `tollgate check` catches a swapped or truncated file before the listener would.
    pub(super) fn pem(&mut self, key: &str, path: &Path, is_cert: bool) -> bool {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let ok = if is_cert {
            CertificateDer::pem_file_iter(path)
                .is_ok_and(|mut it| it.next().is_some_and(|c| c.is_ok()))
        } else {
            PrivateKeyDer::from_pem_file(path).is_ok()
        };
        if !ok {
            let what = if is_cert {
                "a PEM certificate"
            } else {
                "a PEM private key"
            };
            self.fail(key, format!("`{}` does not contain {what}", path.display()));
        }
        ok
    }

    fn server(&mut self, raw: &RawConfig, origin: &Path) -> Option<Server> {
        let s = raw.server();
        let listen = match &s.listen {
            Some(l) => self.addr("server.listen", l),
            // The rate limit service alone: no proxy, no socket bound to this.
            None if raw.rls.is_some() && raw.routes.is_empty() => {
                Some(SocketAddr::from(([127, 0, 0, 1], 0)))
            }
            None => {
                self.fail(
                    "server.listen",
                    "missing: the proxy's listener (only a file that runs the rate limit service alone, [rls] without routes, may leave it out)",
                );
                None
            }
        };
        let admin_listen = s
            .admin_listen
            .as_ref()
            .map(|a| self.addr("server.admin_listen", a));
        let tls = self.tls(raw, origin);
        let admin_token = self.admin_token(s.admin_token_env.as_deref());
        let admin_hosts = self.admin_hosts(&s.admin_hosts);
        if let Some(Some(addr)) = admin_listen {
            self.admin_exposure(addr, s.admin_token_env.is_some());
        }
        let header_timeout = self.timeout("server.header_timeout", &s.header_timeout);
        let upstream_timeout = self.timeout("server.upstream_timeout", &s.upstream_timeout);
        let shutdown_grace = self.timeout("server.shutdown_grace", &s.shutdown_grace);
        let safety = self.server_safety(s);
        let ops = self.server_operations(s, origin);
        // hyper's HTTP/1 reader cannot buffer less than 8 KiB, so smaller limits would lie.
        if !(8192..=1 << 20).contains(&s.max_header_bytes) {
            self.fail(
                "server.max_header_bytes",
                format!(
                    "{} is out of range: use 8192 to 1048576",
                    s.max_header_bytes
                ),
            );
        }
        let safety = safety?;
        let ops = ops?;
        Some(Server {
            listen: listen?,
            tls: tls?,
            admin_listen: admin_listen.map_or(Some(None), |a| a.map(Some))?,
            admin_token: admin_token?,
            admin_hosts: admin_hosts?,
            header_timeout: header_timeout?,
            upstream_timeout: upstream_timeout?,
            max_header_bytes: s.max_header_bytes as usize,
            shutdown_grace: shutdown_grace?,
            idle_timeout: safety.idle_timeout,
            body_timeout: safety.body_timeout,
            max_connections: safety.max_connections,
            paths: safety.paths,
            method_override: s.method_override,
            // Empty until `validate` knows the node id it defaults to.
            via_pseudonym: safety.via_pseudonym.unwrap_or_default(),
            request_id_header: ops.request_id_header,
            access_log: ops.access_log,
            drain_delay: ops.drain_delay,
        })
    }

    /// `Some(None)` when TLS is off, `None` when its settings are broken.
    fn tls(&mut self, raw: &RawConfig, origin: &Path) -> Option<Option<Tls>> {
        let s = raw.server();
        let Some(listen) = &s.tls_listen else {
            if s.tls_cert.is_some() || s.tls_key.is_some() {
                self.fail(
                    "server.tls_listen",
                    "tls_cert/tls_key are set but tls_listen is not",
                );
                return None;
            }
            return Some(None);
        };
        let listen = self.addr("server.tls_listen", listen);
        let mut file = |key: &str, value: &Option<String>| match value {
            Some(p) => self.readable(key, origin, p),
            None => {
                self.fail(key, "required when tls_listen is set");
                None
            }
        };
        let cert = file("server.tls_cert", &s.tls_cert);
        let key = file("server.tls_key", &s.tls_key);
        let cert = cert.filter(|p| self.pem("server.tls_cert", p, true));
        let key = key.filter(|p| self.pem("server.tls_key", p, false));
        Some(Some(Tls {
            listen: listen?,
            cert: cert?,
            key: key?,
        }))
    }

    fn upstream_urls(&mut self, name: &str, urls: &[&str]) -> Vec<Uri> {
        if urls.is_empty() {
            self.fail(&format!("upstreams.{name}.urls"), "needs at least one URL");
        }
        urls.iter()
            .enumerate()
            .filter_map(|(i, u)| {
                let key = format!("upstreams.{name}.urls[{i}]");
                match Uri::from_str(u) {
                    Ok(uri)
                        if matches!(uri.scheme_str(), Some("http" | "https"))
                            && uri.host().is_some() =>
                    {
                        Some(uri)
                    }
                    Ok(_) => {
                        self.fail(
                            &key,
                            format!("`{u}` must be an http:// or https:// URL with a host"),
                        );
                        None
                    }
                    Err(e) => {
                        self.fail(&key, format!("`{u}` is not a URL: {e}"));
                        None
                    }
                }
            })
            .collect()
    }
}
