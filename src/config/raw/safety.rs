//! The request-safety keys of the TOML file as written: how the gateway makes a request
//! canonical before routing, and how long and how large a client may be. Part of the
//! user-facing contract (names never change, keys are only added).

use serde::Deserialize;

pub use crate::normalize::{EscapedSlashes, PathParameters};

/// `client_ip.forwarded_header` (the limiter's layer reads it too).
pub use tollgate_limit::layer::ForwardedHeader;

/// `server.method_override`: what `X-HTTP-Method-Override`, `X-Method-Override` and
/// `X-HTTP-Method` (in any `_`/`-` spelling) do. Rails, Laravel, Express and ASP.NET run the
/// method such a header names, so a request routed and limited by its own method would run
/// as another one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MethodOverride {
    /// Removed from every request: the method on the request line is the one routed,
    /// limited and run.
    #[default]
    Drop,
    /// The named method is the request's: routed, limited and forwarded as the method
    /// (the header itself is not forwarded), or 400 when it names none or several.
    Route,
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
