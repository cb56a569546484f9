//! `GET /routes` and `GET /config`: the running config as JSON, rendered once per config
//! (at start and at each reload). Secrets are never copied in: the store
//! password, the account hash key, the peer secret and any password or token in a URL's
//! user-info are written as [`MASK`] (or `null` when not set).

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{
    AlgorithmName, Config, EscapedSlashes, Exempt, ForwardedHeader, HeadersWhere, KeyPart,
    MethodOverride, Mode, OnStoreError, PathParameters, Policy, Route, Site, StoreKind,
};

/// What a secret is shown as.
pub const MASK: &str = "***";

/// The routing table in match order ([`Config::match_order`], as the router matches).
pub fn routes(config: &Config) -> Value {
    let routes: Vec<Value> = config
        .match_order()
        .into_iter()
        .map(|i| route(config, i, &config.routes[i]))
        .collect();
    json!({ "routes": routes })
}

/// The whole running config, secrets masked.
pub fn config(config: &Config) -> Value {
    let s = &config.server;
    let ip = &config.client_ip;
    let store = &config.store;
    let cluster = &config.cluster;
    json!({
        "origin": config.origin.display().to_string(),
        "server": {
            "listen": s.listen.to_string(),
            "tls": s.tls.as_ref().map(|t| json!({
                "listen": t.listen.to_string(),
                "cert": t.cert.display().to_string(),
                "key": t.key.display().to_string(),
            })),
            "admin_listen": s.admin_listen.map(|a| a.to_string()),
            "admin_token": s.admin_token.as_ref().map(|_| MASK),
            "admin_hosts": s.admin_hosts.iter()
                .map(|h| h.port.map_or_else(|| h.host.clone(), |p| format!("{}:{p}", h.host)))
                .collect::<Vec<_>>(),
            "header_timeout": duration(s.header_timeout),
            "upstream_timeout": duration(s.upstream_timeout),
            "max_header_bytes": s.max_header_bytes,
            "shutdown_grace": duration(s.shutdown_grace),
            "idle_timeout": duration(s.idle_timeout),
            "body_timeout": duration(s.body_timeout),
            "max_connections": s.max_connections,
            "escaped_slashes": match s.paths.escaped_slashes {
                EscapedSlashes::Reject => "reject",
                EscapedSlashes::Keep => "keep",
            },
            "path_parameters": match s.paths.path_parameters {
                PathParameters::Reject => "reject",
                PathParameters::Keep => "keep",
            },
            "method_override": match s.method_override {
                MethodOverride::Drop => "drop",
                MethodOverride::Route => "route",
            },
            "via_pseudonym": s.via_pseudonym,
            "request_id_header": s.request_id_header.as_str(),
            "access_log": s.access_log.as_ref().map(|p| p.display().to_string()),
            "drain_delay": duration(s.drain_delay),
        },
        "client_ip": {
            "trusted_proxies": ip.trusted_proxies.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "ipv6_prefix": ip.ipv6_prefix,
            "shared_ranges": ip.shared_ranges.iter()
                .map(|(net, m)| json!({ "range": net.to_string(), "multiplier": m.get() }))
                .collect::<Vec<_>>(),
            "forwarded_header": match ip.forwarded_header {
                ForwardedHeader::XForwardedFor => "x-forwarded-for",
                ForwardedHeader::Forwarded => "forwarded",
            },
        },
        "upstreams": config.upstreams.iter().map(|u| json!({
            "name": u.name,
            "urls": u.urls.iter().map(|url| mask_userinfo(&url.to_string())).collect::<Vec<_>>(),
            "max_connections": u.max_connections.get(),
        })).collect::<Vec<_>>(),
        "routes": config.routes.iter().enumerate()
            .map(|(i, r)| route(config, i, r))
            .collect::<Vec<_>>(),
        "account": config.account.as_ref().map(|a| json!({
            "header": a.header.as_str(),
            "hash_key": MASK,
        })),
        "response": {
            "headers": match config.response.headers {
                HeadersWhere::All => "all",
                HeadersWhere::Denied => "denied",
                HeadersWhere::None => "none",
            },
            "legacy_headers": config.response.legacy_headers,
        },
        "policies": config.policies.iter().map(|p| policy(config, p)).collect::<Vec<_>>(),
        "store": {
            "kind": store.kind.name(),
            "urls": store.urls.iter().map(|u| mask_userinfo(u)).collect::<Vec<_>>(),
            "password": store.password.as_ref().map(|_| MASK),
            "username": store.username,
            "sentinels": store.sentinels.iter().map(|u| mask_userinfo(u)).collect::<Vec<_>>(),
            "master_name": store.master_name,
            "ca_file": store.tls.as_ref().and_then(|t| t.ca.as_ref()).map(|c| c.0.display().to_string()),
            "client_cert": store.tls.as_ref().and_then(|t| t.client.as_ref()).map(|c| c.0.display().to_string()),
            "client_key": store.tls.as_ref().and_then(|t| t.client.as_ref()).map(|c| c.2.display().to_string()),
            "timeout": duration(store.timeout),
            "breaker": {
                "failures": store.breaker_failures.get(),
                "cooldown": duration(store.breaker_cooldown),
            },
            "key_prefix": store.key_prefix,
            "fallback_repay": store.fallback_repay.name(),
        },
        "cluster": {
            "expected_nodes": cluster.expected_nodes.get(),
            "node_id": cluster.node_id,
            "heartbeat": duration(cluster.heartbeat),
            "peer_listen": cluster.peer_listen.map(|a| a.to_string()),
            "peers": cluster.peers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "peer_secret": cluster.peer_secret.as_ref().map(|_| MASK),
            "gossip_interval": duration(cluster.gossip_interval),
        },
        "exempt": {
            "global": exempt(&config.exempt.global),
            "policies": config.exempt.by_policy.iter()
                .map(|(name, e)| (name.clone(), exempt(e)))
                .collect::<serde_json::Map<_, _>>(),
        },
    })
}

/// An exemption list: networks, and accounts as the keyed hashes they are matched on.
fn exempt(e: &Exempt) -> Value {
    json!({
        "cidrs": e.cidrs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "accounts": e.accounts.iter().map(|h| format!("hash:{h}")).collect::<Vec<_>>(),
    })
}

/// One route; `index` is its position in the config (the order written).
fn route(config: &Config, index: usize, r: &Route) -> Value {
    let upstream = config.upstreams.get(r.upstream).map(|u| u.name.as_str());
    let policies: Vec<Value> = r
        .policies
        .iter()
        .filter_map(|&p| config.policies.get(p))
        .map(|p| {
            let mut v = policy(config, p);
            v["mode_override"] = v["mode"].take();
            v["mode"] = json!(mode(effective_mode(r, p)));
            v
        })
        .collect();
    json!({
        "name": r.name,
        "index": index,
        "host": r.host,
        "path_prefix": r.path_prefix,
        "methods": r.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        "case_insensitive": r.case_insensitive,
        "strip_prefix": r.strip_prefix,
        "upstream": upstream,
        "mode": mode(r.mode),
        "on_store_error": match r.on_store_error {
            OnStoreError::Open => "open",
            OnStoreError::Closed => "closed",
            OnStoreError::Local => "local",
        },
        "upgrades": r.upgrades,
        "max_body_bytes": r.max_body_bytes,
        "require_account": r.require_account,
        // Only on a route whose policies read the body (`form:`/`json:` keys).
        "key_body": r.key_body.map(|k| json!({
            "max_key_body_bytes": k.max_bytes,
            "on_large_key_body": match k.on_large {
                crate::config::OnLargeKeyBody::Reject => "reject",
                crate::config::OnLargeKeyBody::Missing => "missing",
            },
        })),
        "policies": policies,
    })
}

/// The mode a policy runs in on route `r` (as `limit/route_limits.rs` decides it): nothing
/// is asked on an `off` route; else the policy's own mode, else the route's.
fn effective_mode(r: &Route, p: &Policy) -> Mode {
    if r.mode == Mode::Off {
        Mode::Off
    } else {
        p.mode.unwrap_or(r.mode)
    }
}

/// One policy. `mode` is the policy's own (`null`: the route's); `/routes` replaces it
/// with the effective mode on that route and keeps the policy's own as `mode_override`.
fn policy(config: &Config, p: &Policy) -> Value {
    // As `limit/route_limits.rs`: central decides locally when there is no store.
    let effective_site = match p.site {
        Site::Central if config.store.kind == StoreKind::Memory => Site::Local,
        s => s,
    };
    let lease = (p.site == Site::Lease).then(|| {
        json!({
            "max": p.lease.max.get(),
            "ttl": duration(p.lease.ttl),
            "target": duration(p.lease.target),
        })
    });
    json!({
        "name": p.name,
        "algorithm": match p.algorithm {
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::LeakyBucket => "leaky_bucket",
            AlgorithmName::Concurrency => "concurrency",
        },
        "limit": p.limit.get(),
        "period": (!p.period.is_zero()).then(|| duration(p.period)),
        "period_ms": (!p.period.is_zero()).then_some(p.period.as_millis()),
        // Only gcra and token_bucket have a burst; the others' `1` is no number to act on.
        "burst": bursty(p.algorithm).then_some(p.burst.get()),
        "cost": p.cost.get(),
        "max_delay": (!p.max_delay.is_zero()).then(|| duration(p.max_delay)),
        "key": p.key.iter().map(key_part).collect::<Vec<_>>(),
        "site": p.site.name(),
        "effective_site": effective_site.name(),
        "local_first": p.local_first,
        "lease": lease,
        "max_keys": p.max_keys.get(),
        "mode": p.mode.map(mode),
        "show_values": p.show_values.iter().map(key_part).collect::<Vec<_>>(),
    })
}

/// The algorithms a burst means something to (`burst` is `null` for the others).
fn bursty(a: AlgorithmName) -> bool {
    matches!(a, AlgorithmName::Gcra | AlgorithmName::TokenBucket)
}

fn key_part(k: &KeyPart) -> String {
    k.to_string()
}

fn mode(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
        Mode::Off => "off",
    }
}

/// A stable human form: `1s`, `500ms`, `1m 30s` (humantime, as the config is read).
fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// `scheme://user:secret@host/...` → `scheme://user:***@host/...`; a lone user-info (often
/// a token) becomes `***`. Anything without user-info is returned as is.
pub fn mask_userinfo(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let masked = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:{MASK}"),
        None => MASK.to_string(),
    };
    format!("{}{masked}{}", &url[..start], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::mask_userinfo;

    #[test]
    fn user_info_is_masked() {
        assert_eq!(
            mask_userinfo("redis://:hunter2@r:6379/0"),
            "redis://:***@r:6379/0"
        );
        assert_eq!(
            mask_userinfo("rediss://bob:p@ss@r:6379"),
            "rediss://bob:***@r:6379"
        );
        assert_eq!(mask_userinfo("http://token@h/x@y"), "http://***@h/x@y");
        assert_eq!(mask_userinfo("redis://r:6379"), "redis://r:6379");
        assert_eq!(mask_userinfo("not a url"), "not a url");
    }
}
