//! Gateway configs as TOML text, one whole table (header and keys) per call, in call order:
//! a test's config reads as the list of what it sets. Only a test that edits the text
//! (`str::replace`) depends on the exact spelling, which stays as it was.

use std::net::SocketAddr;

/// A breaker that no failure within a test opens (the store tests count every call).
pub const PATIENT_BREAKER: &str = "{ failures = 1000, cooldown = \"1s\" }";

/// A gateway config under construction.
pub struct ConfigBuilder(String);

impl ConfigBuilder {
    /// `[server]` on ephemeral ports (traffic and admin), with `extra` keys.
    pub fn new(extra_server: &str) -> Self {
        Self(format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{extra_server}\n"
        ))
    }

    /// `[server]` on an ephemeral port and no admin listener, with `extra` keys.
    pub fn without_admin(extra_server: &str) -> Self {
        Self(format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{extra_server}\n"
        ))
    }

    /// `[client_ip]` trusting loopback as a proxy (tests pick client IPs with
    /// `X-Forwarded-For`), with `extra` keys.
    pub fn trust_loopback(self, extra: &str) -> Self {
        self.text(&format!(
            "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n{extra}\n"
        ))
    }

    /// `[account]` read from the `x-api-key` header.
    pub fn account(self) -> Self {
        self.text("[account]\nheader = \"x-api-key\"\n")
    }

    /// `[store]` of `kind` at `urls` with `timeout`, and a `breaker` when not empty.
    pub fn store(self, kind: &str, urls: &[String], timeout: &str, breaker: &str) -> Self {
        let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
        let breaker = if breaker.is_empty() {
            String::new()
        } else {
            format!("breaker = {breaker}\n")
        };
        self.text(&format!(
            "[store]\nkind = \"{kind}\"\nurls = [{}]\ntimeout = \"{timeout}\"\n{breaker}",
            urls.join(", ")
        ))
    }

    /// `[store]`: one Redis at `url`, the default breaker.
    pub fn redis(self, url: &str, timeout: &str) -> Self {
        self.store("redis", &[url.to_string()], timeout, "")
    }

    /// `[store]`: one Redis at `url` behind the [`PATIENT_BREAKER`].
    pub fn patient_redis(self, url: &str, timeout: &str) -> Self {
        self.store("redis", &[url.to_string()], timeout, PATIENT_BREAKER)
    }

    /// `[cluster]` with `keys` (the table is written even when `keys` is empty).
    pub fn cluster(self, keys: &str) -> Self {
        self.text(&format!("[cluster]\n{keys}\n"))
    }

    /// `[upstreams.app]` at `up`.
    pub fn upstream(self, up: SocketAddr) -> Self {
        self.text(&format!("[upstreams.app]\nurls = [\"http://{up}\"]\n"))
    }

    /// A policy table: see [`policy`].
    pub fn policy(
        self,
        name: &str,
        key: &[&str],
        algorithm: &str,
        limit: u32,
        period: &str,
        extra: &str,
    ) -> Self {
        self.text(&policy(name, key, algorithm, limit, period, extra))
    }

    /// A route on its own path: see [`route`].
    pub fn route(self, name: &str, policies: &[&str], on_store_error: &str) -> Self {
        self.text(&route(name, policies, on_store_error))
    }

    /// `[[routes]]` NAME to `app` with `keys` (without a `match`, every path).
    pub fn app_route(self, name: &str, keys: &str) -> Self {
        self.text(&format!(
            "[[routes]]\nname = \"{name}\"\nupstream = \"app\"\n{keys}\n"
        ))
    }

    /// Any TOML made elsewhere (policy tables, several routes), on lines of its own.
    pub fn text(mut self, toml: &str) -> Self {
        self.0.push('\n');
        self.0.push_str(toml);
        self
    }

    pub fn build(self) -> String {
        self.0
    }
}

/// The fleet tests' gateway: `[server]`, `[client_ip]` trusting loopback, `[cluster]` with
/// `cluster` keys and `[upstreams.app]` at `up`; the store is the caller's.
pub fn fleet(up: SocketAddr, cluster: &str) -> ConfigBuilder {
    ConfigBuilder::new("")
        .trust_loopback("")
        .cluster(cluster)
        .upstream(up)
}

/// The rate-limit tests' gateway: `[server]`, `[client_ip]` trusting loopback (with
/// `client_ip` keys), `[account]` from `x-api-key` and `[upstreams.app]` at `up`.
pub fn limited(up: SocketAddr, client_ip: &str) -> ConfigBuilder {
    ConfigBuilder::new("")
        .trust_loopback(client_ip)
        .account()
        .upstream(up)
}

/// The central-site tests' gateway: [`limited`], one Redis at `store_url` (timeout
/// 500 ms), `policies` and the route `api` with `route` keys.
pub fn central_config(up: SocketAddr, store_url: &str, policies: &str, route: &str) -> String {
    limited(up, "")
        .redis(store_url, "500ms")
        .text(policies)
        .app_route("api", route)
        .build()
}

/// `[policies.NAME]` keyed by `key` parts, `limit` per `period` by `algorithm`, with
/// `extra` keys (`burst`, `site`, ...).
pub fn policy(
    name: &str,
    key: &[&str],
    algorithm: &str,
    limit: u32,
    period: &str,
    extra: &str,
) -> String {
    let key: Vec<String> = key.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "[policies.{name}]\nkey = [{}]\nalgorithm = \"{algorithm}\"\nlimit = {limit}\nperiod = \"{period}\"\n{extra}\n",
        key.join(", ")
    )
}

/// `[[routes]]` NAME on the path prefix `/NAME` to `app`, with `policies` and
/// `on_store_error`.
pub fn route(name: &str, policies: &[&str], on_store_error: &str) -> String {
    let policies: Vec<String> = policies.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"/{name}\" }}\nupstream = \"app\"\npolicies = [{}]\non_store_error = \"{on_store_error}\"\n",
        policies.join(", ")
    )
}

/// A limiter's config, validated, for tests that drive a limit site directly (no listener
/// is bound, the upstream is never asked): one Redis at `store` with `timeout` and a
/// [`PATIENT_BREAKER`], and one policy `per_ip` keyed by the client IP (`policy`: its
/// algorithm, numbers and site) on the route `api`.
pub fn one_policy(store: SocketAddr, timeout: &str, policy: &str) -> tollgate::config::Config {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
[store]
kind = "redis"
urls = ["redis://{store}"]
timeout = "{timeout}"
breaker = {PATIENT_BREAKER}
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[policies.per_ip]
key = ["ip"]
{policy}
[[routes]]
name = "api"
upstream = "app"
policies = ["per_ip"]
"#
    );
    let origin = std::path::Path::new("one_policy.toml");
    let raw = tollgate::config::parse_str(&toml, origin).expect("parses");
    tollgate::config::validate(raw, origin).expect("valid")
}
