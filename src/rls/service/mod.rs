//! tollgate as Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit` over the YAML `rls/` reads, deciding on the gateway's limiter (the same
//! handle, so the same sites, counters, `/limits` and metrics; a reload swaps both).
//!
//! A call's path: `bounds.rs` refuses what is malformed or too large (gRPC errors naming
//! the bound); `answer.rs` matches each descriptor (`RlsConfig::apply`), asks the limiter
//! for every counted one at once (`Limiter::check_keys`: all or nothing) and writes the
//! answer per descriptor; `server.rs` serves it, with `grpc.health.v1`, on one cleartext
//! HTTP/2 port (or over TLS, `tls.rs`) until shutdown, each call's access-log line
//! written by `log.rs`; `json.rs` answers `POST /json` on `[rls] json_listen` as
//! envoyproxy/ratelimit does.

mod answer;
mod bounds;
mod json;
mod log;
mod server;
mod tls;

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Served;
use crate::limit::LimiterHandle;

pub use server::serve;

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
