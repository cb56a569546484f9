//! tollgate as Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit` over the YAML `rls/` reads, deciding on the gateway's limiter (the same
//! handle, so the same sites, counters, `/limits` and metrics; a reload swaps both).
//!
//! A call's path: `bounds.rs` refuses what is malformed or too large (gRPC errors naming
//! the bound); `answer.rs` matches each descriptor (`RlsConfig::apply`), asks the limiter
//! for every counted one at once (`Limiter::check_keys`: all or nothing) and writes the
//! answer per descriptor; `server.rs` serves it, with `grpc.health.v1`, on one cleartext
//! HTTP/2 port (or over TLS, `tls.rs`) until shutdown; `json.rs` answers `POST /json` on `[rls] json_listen` as
//! envoyproxy/ratelimit does.

mod answer;
mod bounds;
mod json;
mod server;
mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;

use super::RlsConfig;
use crate::limit::LimiterHandle;

pub use server::serve;

/// What the service answers from besides the limiter: the YAML and its settings. Built by
/// the config (`[rls]`), swapped whole by a reload.
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

/// The service's state: the limiter's handle the gateway holds, and what it serves.
pub struct RlsState {
    limiter: Arc<LimiterHandle>,
    served: ArcSwap<Served>,
}

impl RlsState {
    pub fn new(limiter: Arc<LimiterHandle>, served: Served) -> Arc<Self> {
        Arc::new(RlsState {
            limiter,
            served: ArcSwap::from_pointee(served),
        })
    }

    /// A reload's YAML and settings (after the limiter's reload: a call between the two
    /// finds its rules' policies by name, `answer.rs`).
    pub fn reload(&self, served: Served) {
        self.served.store(Arc::new(served));
    }
}
