//! The limiter as a tower `Layer` (feature `tower`): the limit step and tollgate's answers
//! in front of any tower service — an axum router, a tonic server, a hyper service — instead
//! of in front of an upstream, with no gateway, config file or server of its own.
//!
//! Its place in the request walk of ARCHITECTURE.md: the client, limit and respond steps
//! without the rest. The service's own router already chose a handler, so there is no
//! route table and no forwarding; a layer asks one route of the limiter's spec (its
//! `policies`, `mode`, `on_store_error`, `require_account`). The sites are the gateway's
//! too: `local` and `split` in this process, `central` and `lease` in Redis — two services
//! (or a service and a gateway) on one store and one `key_prefix` spend one budget.
//!
//! [`RateLimitLayer`] (`service.rs`: what a request goes through) is built from a
//! [`LimiterHandle`](crate::LimiterHandle) and a route; [`ClientAddr`] (`client.rs`) says
//! where the peer's address comes from, [`TrustedProxies`] (`client_ip.rs`) whose
//! forwarding header names the client instead, [`PathRules`] (`path.rs`) how the path is
//! made canonical. `answer/` writes refusals; `body.rs` is the response body they share.
//! The gateway's `tollgate::layer` builds these layers from a TOML file.

pub mod answer;
pub mod body;
mod client;
pub mod client_ip;
pub mod path;
mod service;

pub use answer::{HeadersWhere, ResponseHeaders};
pub use client::ClientAddr;
pub use client_ip::{ForwardedHeader, TrustedProxies};
pub use path::PathRules;
pub use service::{RateLimit, RateLimitLayer};
