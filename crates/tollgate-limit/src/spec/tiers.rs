//! A policy whose numbers depend on who the client is (free and paid plans, one partner
//! with a contract of its own): each tier, and each distinct pair of numbers an override
//! gives, is a *variant*, an ordinary [`Policy`] named `NAME@TIER` (or `NAME@=LIMIT-BURST`)
//! with keys of its own, so tiers work on every site with nothing site-specific.

use std::collections::BTreeMap;

use http::HeaderName;

use super::Policy;

/// Where a request's tier name comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierSource {
    /// A trusted header, stated once (set by an auth layer in front).
    Header(HeaderName),
    /// A claim of the verified `[account] jwt` token.
    Claim(String),
}

/// One tiered policy, typed.
#[derive(Debug, Clone)]
pub struct PolicyTiers {
    /// The base policy's name.
    pub policy: String,
    pub source: Option<TierSource>,
    /// Tier name → index into `variants`.
    pub tiers: Vec<(String, usize)>,
    /// Hashed account → index into `variants`; wins over the tier.
    pub overrides: Vec<(String, usize)>,
    /// The variants (tiers first, then overrides' own numbers), each a full policy.
    pub variants: Vec<Policy>,
}

/// Every tiered policy of the config, by base policy name.
#[derive(Debug, Clone, Default)]
pub struct Tiers {
    pub by_policy: BTreeMap<String, PolicyTiers>,
}

impl Tiers {
    /// Every variant of every tiered policy.
    pub fn variants(&self) -> impl Iterator<Item = &Policy> {
        self.by_policy.values().flat_map(|t| t.variants.iter())
    }
}
