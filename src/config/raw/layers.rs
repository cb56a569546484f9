//! `[layers.NAME]` as written: what a service that embeds the limiter as a tower layer
//! (`tollgate::layer`) enforces. A layer is a route without the routing: the service's own
//! router already chose the handler, so a layer keeps only a route's limit keys (same
//! names, same types, so one table reads like the other).

use serde::Deserialize;

use super::{Mode, OnStoreError};

/// `[layers.NAME]`: the policies one `RateLimitLayer` enforces, and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLayer {
    /// Names of `[policies.NAME]` this layer enforces; a request spends only if all allow.
    #[serde(default)]
    pub policies: Vec<String>,
    /// enforce | shadow | off for this layer's policies (a policy's own `mode` wins).
    #[serde(default)]
    pub mode: Mode,
    /// What central and lease policies do when the store is slow or down.
    #[serde(default)]
    pub on_store_error: OnStoreError,
    /// Requests without an account (with `[account] jwt`: without a token that verifies)
    /// are answered 401.
    #[serde(default)]
    pub require_account: bool,
}
