//! Step 5 of the request path, **forward**: the upstream side of the proxy. Everything a
//! request meets after the limit step admitted it, on its way to a backend and back:
//!
//! - `forward.rs` (`Forwarder`): the step's door, a request in, the upstream's answer out;
//! - `outgoing.rs`: the request made ready without awaiting (path, headers, version, body);
//! - `pool.rs` (`Pool`, `UpstreamSlots`): which URL of an upstream, by `balance.rs` among
//!   those `outlier.rs` has not ejected and `health.rs` finds healthy;
//! - `send.rs`: the send, on the worker's own HTTP/1.1 connections (`h1pool.rs`) or
//!   hyper-util's client for TLS (`tls.rs`, its verifier `verify.rs`) and HTTP/2, again
//!   when `retry.rs` says so;
//! - `watchdog.rs`: both bodies watched for silence, the request's for size;
//! - `upgrade.rs`: the tunnel after a `101`;
//! - `metrics.rs`: what each upstream URL was sent and how it answered.
//!
//! Nothing here decides whether a request may pass: that is done before (steps 1–4,
//! `proxy/mod.rs`), and any error returned here is answered by `respond` (step 6).

mod balance;
pub(super) mod forward;
mod h1pool;
pub mod health;
pub mod metrics;
mod outgoing;
mod outlier;
mod pool;
mod retry;
mod send;
mod tls;
mod upgrade;
mod verify;
mod watchdog;

pub use pool::{Pool, UpstreamSlots};
