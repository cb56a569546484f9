//! tollgate as Envoy's rate limit service, first piece: envoyproxy/ratelimit's YAML read
//! unchanged, checked as it checks it, and its descriptor matching. No gRPC and no limiter
//! here: the result, [`RlsConfig`], names each rule as a policy ([`Rule::policy`]) with its
//! limit, and says per request descriptor which rule applies ([`RlsConfig::find`],
//! [`RlsConfig::apply`]) and under which key it counts ([`Match::key`]).
//!
//! The path: `load.rs` reads a file or a folder; `yaml/` decodes each file as written (types
//! as go-yaml v2 gives them, `scalar.rs`); `tree.rs` builds the domains' descriptor trees and
//! refuses what ratelimit refuses; `matcher.rs` finds a descriptor's rule; `apply.rs` weighs
//! a request's descriptors together (`replaces`); `unit.rs` is a limit's unit and period;
//! `error.rs` every problem, with file, line and descriptor path. `served.rs` is what the
//! service answers from (the YAML and `[rls]`'s settings); `service/` answers Envoy's
//! `ShouldRateLimit` from it on the gateway's limiter.

mod apply;
mod error;
mod load;
mod matcher;
mod scalar;
mod served;
pub mod service;
mod tree;
mod unit;
mod yaml;

#[cfg(test)]
mod tests;

pub use apply::Applied;
pub use error::{Problem, RlsError, RlsErrors};
pub use matcher::{Descriptor, Entry, Match};
pub use served::{Bounds, Domain, OnStoreError, Served};
pub use tree::{RlsConfig, Rule};
pub use unit::{Limit, Unit};
