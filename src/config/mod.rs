//! Configuration: read once at start, before any listener exists.
//!
//! Loading is two passes, as in rathole, each in its folder: serde turns the TOML into
//! [`raw::RawConfig`] (`raw/`; `deny_unknown_fields` catches typos), then [`validate`]
//! (`validate/`) turns that into a typed [`Config`] (`types.rs`) the rest of the gateway can
//! trust, collecting every problem with its key path. The sections with rules of their own
//! (`jwt.rs`, `tiers.rs`, `spend.rs`, …) keep both passes in one file.

mod backends;
mod error;
mod exempt;
pub mod header_names;
mod health;
mod jwt;
mod key_body;
mod load;
mod raw;
mod rls;
mod rls_policies;
mod spend;
mod store_sentinel;
mod store_tls;
mod telemetry;
mod tiers;
mod types;
mod upstream_tls;
mod validate;
mod warnings;

pub use backends::{Balance, Outlier, Retry};
pub use error::{ConfigError, Problem};
pub use health::HealthCheck;
pub use key_body::{KeyBodyRules, OnLargeKeyBody};
pub use load::{load_file, parse_str};
pub use rls::Rls;
pub use telemetry::Telemetry;
pub use types::*;
pub use upstream_tls::UpstreamTls;
pub use validate::validate;

// The limiter's own types, which validation builds: the config names them as its own.
pub use crate::limit::spec::{
    Account, AlgorithmName, BodyField, Cluster, Exempt, Exemptions, Jwt, KeyPart, LeaseKnobs,
    MAX_PERIOD, MIN_PERIOD, Mode, OnMissingKey, OnStoreError, OnUnverified, Policy, PolicyTiers,
    RouteSpec, Site, Spend, Store, StoreKind, StoreTls, TierSource, Tiers, keyed_hash,
};

/// The sample configuration shipped with tollgate, embedded so `tollgate demo` runs anywhere.
pub const SAMPLE: &str = include_str!("../../config.toml");
