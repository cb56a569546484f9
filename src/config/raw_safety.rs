//! The request-safety keys of the TOML file as written: how the gateway makes a request
//! canonical before routing, and how long and how large a client may be. Part of the
//! user-facing contract (names never change, keys are only added).

use serde::Deserialize;

pub use crate::normalize::{EscapedSlashes, PathParameters};

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
