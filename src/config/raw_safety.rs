//! The request-safety keys of the TOML file as written: how the gateway makes a request
//! canonical before routing, and how long and how large a client may be. Part of the
//! user-facing contract (names never change, keys are only added).

use serde::Deserialize;

/// `server.escaped_slashes`: what to do with `%2F`, `%5C` and `\` in a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscapedSlashes {
    /// 400: a backend that decodes them would see segments the router never saw.
    #[default]
    Reject,
    /// Keep them encoded (`%2F`, `%5C`; a raw `\` is sent as `%5C`): they never match
    /// across a segment boundary, but a backend that decodes them sees a `/`.
    Keep,
}

/// `server.path_parameters`: what to do with `;` in a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathParameters {
    /// 400: Java servlet containers drop `;params` from segments, so `/api;/login` would be
    /// `/api/login` to them and `/api;` to the router.
    #[default]
    Reject,
    /// Keep `;` as an ordinary character of its segment (backends that do not strip it).
    Keep,
}

/// `client_ip.forwarded_header`: the one forwarding header believed from trusted proxies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (what most load balancers append).
    #[default]
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// `Forwarded: for=…` (RFC 7239).
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// Defaults of the safety keys, next to the other defaults' style.
pub(super) mod defaults {
    pub fn idle_timeout() -> String {
        "60s".into()
    }
    pub fn body_timeout() -> String {
        "30s".into()
    }
    pub fn max_connections() -> u64 {
        10_000
    }
    /// Envoy's cluster circuit-breaker default for connections and requests.
    pub fn upstream_max_connections() -> u64 {
        1024
    }
    pub fn upgrades() -> Vec<String> {
        vec!["websocket".into()]
    }
}
