//! What the limiter limits, in its own types: policies, key parts, the store, the fleet,
//! exemptions, tiers, and the set of policies each route (or tower layer) asks. The
//! gateway's config builds a [`LimiterSpec`] after validating its TOML file; the limiter
//! reads nothing else, so it runs without the gateway (the tower layer) and the gateway's
//! config, server and proxy stay above it.

mod account;
mod bounds;
mod exempt;
mod names;
mod policy;
mod store;
mod tiers;

use std::num::NonZeroU32;

use ipnet::IpNet;

pub use account::{Account, Jwt, OnUnverified, default_hash_key, hash_key_of, keyed_hash};
pub use bounds::{MAX_PERIOD, MIN_PERIOD};
pub use exempt::{Exempt, Exemptions};
pub use names::{AlgorithmName, Mode, OnMissingKey, OnStoreError, Site, StoreKind};
pub use policy::{BodyField, KeyPart, LeaseKnobs, Policy, Spend};
pub use store::{Cluster, FallbackRepay, Store, StoreTls};
pub use tiers::{PolicyTiers, TierSource, Tiers};

/// Everything a [`Limiter`](super::Limiter) is built from.
#[derive(Debug, Clone)]
pub struct LimiterSpec {
    /// How a client address becomes an `ip` key part.
    pub ip_keys: IpKeys,
    /// `[account]`, when some policy may key on the account.
    pub account: Option<Account>,
    /// Policies in name order; [`RouteSpec::policies`] index into it.
    pub policies: Vec<Policy>,
    /// Each route (or layer) and the policies it asks, in the order written.
    pub routes: Vec<RouteSpec>,
    pub store: Store,
    /// N of the L/N split before membership says otherwise.
    pub expected_nodes: NonZeroU32,
    pub cluster: Cluster,
    pub exempt: Exemptions,
    /// Each policy's tiers and overrides: the variants a request chooses from.
    pub tiers: Tiers,
}

/// The client address as a key part: IPv6 folded to its network, and shared-address ranges
/// (CGNAT) given headroom. Which address is the client's (trusted proxies, forwarding
/// headers) is the proxy's business, decided before the limiter sees it.
#[derive(Debug, Clone, Default)]
pub struct IpKeys {
    /// IPv6 clients are keyed by their network of this length.
    pub ipv6_prefix: u8,
    /// Shared-address ranges and the multiplier of ip-keyed limits there, most specific
    /// first.
    pub shared_ranges: Vec<(IpNet, NonZeroU32)>,
}

/// The policies one route of the gateway (or one tower layer) asks, and what it does when
/// they cannot be asked.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    /// Labels its decision counters.
    pub name: String,
    /// Indexes into [`LimiterSpec::policies`].
    pub policies: Vec<usize>,
    /// The policies' mode unless a policy sets its own.
    pub mode: Mode,
    pub on_store_error: OnStoreError,
    /// 401 for a request without a (verified) account, before any policy.
    pub require_account: bool,
}
