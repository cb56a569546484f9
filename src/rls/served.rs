//! What Envoy's rate limit service answers from besides the limiter: the YAML and `[rls]`'s
//! settings for it, built by the config (`config/rls.rs`) and swapped whole by a reload.
//! Here, beside the YAML, so that the config reads them without reaching the service
//! (`service/`), which sits above the request path's modules.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::RlsConfig;

/// The YAML and its settings.
#[derive(Debug, Clone)]
pub struct Served {
    pub yaml: Arc<RlsConfig>,
    /// Every domain of the YAML.
    pub domains: BTreeMap<String, Domain>,
    pub bounds: Bounds,
    /// `[rls] headers`: the draft RateLimit headers in `response_headers_to_add`.
    pub headers: bool,
}

/// One domain's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain {
    pub on_store_error: OnStoreError,
}

/// Bounds on one call, each named in its refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `[rls] max_descriptors`: more descriptors are `RESOURCE_EXHAUSTED`.
    pub max_descriptors: usize,
    /// `[rls] max_entries`: more entries in one descriptor are `RESOURCE_EXHAUSTED`.
    pub max_entries: usize,
    /// `[rls] max_value_bytes`: a longer domain, key or value is `INVALID_ARGUMENT`.
    pub max_value_bytes: usize,
}

impl Bounds {
    /// The largest request these bounds admit, with room for protobuf's framing: what the
    /// server decodes at most, so a call past the bounds is refused before it is held.
    pub fn max_message_bytes(&self) -> usize {
        let entry = 2 * self.max_value_bytes + 16;
        let descriptor = self.max_entries * entry + 64;
        (self.max_descriptors * descriptor + self.max_value_bytes + 64).min(4 << 20)
    }
}

/// `[rls] on_store_error`: a route's three, and `error`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Answered OK, uncounted.
    #[default]
    Open,
    /// Answered OVER_LIMIT.
    Closed,
    /// Decided on this node's share of the limit.
    Local,
    /// gRPC `UNAVAILABLE`: Envoy's `failure_mode_deny` decides.
    Error,
}
