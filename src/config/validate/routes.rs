//! Routes as written: each `[[routes]]` entry checked and resolved against the upstreams
//! and policies it names. A route the router could never match, or one that would spend
//! on a policy twice, is refused here rather than found in production.

use std::collections::HashSet;
use std::net::Ipv6Addr;

use http::Method;

use super::Validator;
use crate::config::raw::RawConfig;
use crate::config::{KeyPart, PathRules, Policy, Route, Upstream};

impl Validator {
    pub(super) fn routes(
        &mut self,
        config: &RawConfig,
        upstreams: &[Upstream],
        policies: &[Policy],
    ) -> Vec<Route> {
        let mut seen = HashSet::new();
        let rules = PathRules {
            escaped_slashes: config.server().escaped_slashes,
            path_parameters: config.server().path_parameters,
        };
        config
            .routes
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let at = |k: &str| format!("routes[{i}].{k}");
                if r.name.is_empty() {
                    self.fail(&at("name"), "must not be empty");
                } else if !seen.insert(r.name.as_str()) {
                    self.fail(&at("name"), format!("duplicate route name `{}`", r.name));
                }
                self.path_prefix(&at("match.path_prefix"), &r.matcher.path_prefix, rules);
                let methods = r
                    .matcher
                    .methods
                    .iter()
                    .enumerate()
                    .filter_map(|(j, m)| {
                        Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                            .map_err(|_| {
                                self.fail(
                                    &at(&format!("match.methods[{j}]")),
                                    format!("`{m}` is not an HTTP method"),
                                )
                            })
                            .ok()
                    })
                    .collect();
                let upstream = upstreams.iter().position(|u| u.name == r.upstream);
                if upstream.is_none() {
                    self.fail(
                        &at("upstream"),
                        format!(
                            "no upstream named `{}` (define [upstreams.{}])",
                            r.upstream, r.upstream
                        ),
                    );
                }
                let route_policies = self.route_policies(&at, &r.policies, policies, config);
                let host = r
                    .matcher
                    .host
                    .as_deref()
                    .and_then(|h| self.route_host(&at, h));
                let safety = self.route_safety(&at, r, config.server().max_body_bytes);
                let reads_body = route_policies
                    .iter()
                    .any(|&p| policies[p].key.iter().any(KeyPart::reads_body));
                let key_body =
                    self.key_body(&at, reads_body, r.max_key_body_bytes, r.on_large_key_body);
                Some(Route {
                    key_body,
                    case_insensitive: r.matcher.case_insensitive,
                    upgrades: safety.upgrades,
                    max_body_bytes: safety.max_body_bytes,
                    policies: route_policies,
                    mode: r.mode,
                    on_store_error: r.on_store_error,
                    name: r.name.clone(),
                    host,
                    path_prefix: r.matcher.path_prefix.clone(),
                    methods,
                    upstream: upstream?,
                    strip_prefix: r.strip_prefix,
                    require_account: r.require_account,
                })
            })
            .collect()
    }

    /// The indexes of a route's policies. A policy listed twice is refused: both entries
    /// decide on one state, but the request's end gives back (a concurrency cell, a
    /// refund) once per entry, so a second entry would free what another request holds.
    pub(super) fn route_policies(
        &mut self,
        at: &dyn Fn(&str) -> String,
        names: &[String],
        policies: &[Policy],
        config: &RawConfig,
    ) -> Vec<usize> {
        let mut seen = HashSet::new();
        names
            .iter()
            .enumerate()
            .filter_map(|(j, p)| {
                if !seen.insert(p.as_str()) {
                    self.fail(
                        &at(&format!("policies[{j}]")),
                        format!("policy `{p}` is listed twice (list it once; a request spends on each entry)"),
                    );
                    return None;
                }
                let found = policies.iter().position(|q| &q.name == p);
                // A policy that exists but is invalid was reported already.
                if found.is_none() && !config.policies.contains_key(p) {
                    self.fail(
                        &at(&format!("policies[{j}]")),
                        format!("no policy named `{p}` (define [policies.{p}])"),
                    );
                }
                found
            })
            .collect()
    }

    /// `match.host` in the form the router compares with a request's host (`proxy/
    /// canonical.rs`): lower case, no trailing dot, an IPv6 literal without brackets in RFC
    /// 5952's form. A port
    /// is refused rather than ignored: the router ignores the request's port, so `host =
    /// "a:8443"` would never match (or, ignored here, would match every port).
    fn route_host(&mut self, at: &dyn Fn(&str) -> String, host: &str) -> Option<String> {
        let key = at("match.host");
        let lower = host.to_ascii_lowercase();
        // An IPv6 literal in RFC 5952's form, as the request's is made (`[0:0::1]` is `::1`).
        if let Some(literal) = lower.strip_prefix('[') {
            return match literal.strip_suffix(']').map(str::parse::<Ipv6Addr>) {
                Some(Ok(addr)) => Some(addr.to_string()),
                _ => {
                    self.fail(&key, format!("`{host}` is not a bracketed IPv6 address"));
                    None
                }
            };
        }
        if let Ok(addr) = lower.parse::<Ipv6Addr>() {
            return Some(addr.to_string());
        }
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        let name_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
        if name.contains(':') {
            self.fail(
                &key,
                format!(
                    "`{host}` has a port: write the host alone (requests match whatever their port)"
                ),
            );
        } else if name.is_empty() || name.starts_with('.') || name.contains("..") {
            self.fail(&key, format!("`{host}` is not a host name"));
        } else if !name.bytes().all(name_ok) {
            self.fail(&key, format!("`{host}` is not an exact host name (letters, digits, `-`, `.`, `_`; no wildcards)"));
        } else {
            return Some(name.to_owned());
        }
        None
    }
}
