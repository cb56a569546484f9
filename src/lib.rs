//! tollgate: an HTTP reverse proxy with distributed rate limiting built in.
//!
//! A request walks (ARCHITECTURE.md has each hop and the import rules): [`server`]
//! (listeners, TLS, connections), [`proxy`] (the per-request stack: client, canonical,
//! [`router`], limit, forward, observe), which asks [`limit`] (keys, algorithms, decision
//! sites) and has [`respond`] turn errors and 429s into HTTP; [`admin`] answers health and
//! metrics. [`layer`] puts the limit step and its answers in front of another tower
//! service. [`config`] is read once at start; [`body`] and [`shutdown`] are shared by
//! every layer. [`cli`] (`demo`, `simulate`, `replay`) and [`certs`] serve the command line.
//! [`rls`] reads envoyproxy/ratelimit's YAML for the rate limit service Envoy calls.

#![forbid(unsafe_code)]

mod admin;
/// The response body every answer is sent in (`tollgate_limit::layer::body`).
use tollgate_limit::layer::body;
#[cfg(feature = "dev-certs")]
pub mod certs;
pub mod cli;
pub mod config;
pub mod layer;
/// The path canonicalizer, the first step of every request (`tollgate_limit::layer::path`:
/// the layer's `path` keys read the same canonical path).
pub use tollgate_limit::layer::path as normalize;
mod proxy;
mod respond;
pub mod rls;
mod router;
pub mod server;
pub mod telemetry;

/// The limiter (crates/tollgate-limit), under the name the request path gives its step.
pub use tollgate_limit as limit;
pub use tollgate_limit::shutdown;
