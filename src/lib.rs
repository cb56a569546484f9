//! tollgate: an HTTP reverse proxy with distributed rate limiting built in.
//!
//! Modules follow a request's path through the gateway:
//! [`config`] (read once at start) → [`server`] (listeners, TLS, shutdown) →
//! [`proxy`] (the per-request stack: client, [`router`], forward) → [`limit`] (keys,
//! algorithms, decision sites) → [`respond`] (errors and 429s as HTTP) → [`admin`]
//! (metrics and health). [`demo`], [`simulate`] and [`certs`] serve the command line.

pub mod admin;
pub mod certs;
pub mod config;
pub mod demo;
pub mod limit;
pub mod normalize;
pub mod proxy;
pub mod respond;
pub mod router;
pub mod server;
pub mod simulate;
pub mod telemetry;
