//! `[policies.NAME.tiers]`, `tier_header` / `tier_claim` and `[policies.NAME.overrides]`:
//! a policy whose numbers depend on who the client is (free and paid plans, one partner
//! with a contract of its own).
//!
//! Each tier, and each distinct pair of numbers an override gives, becomes a *variant*: an
//! ordinary [`Policy`] named `NAME@TIER` (or `NAME@=LIMIT-BURST`), validated with exactly the
//! policy's own rules and messages (under `policies.NAME.tiers.TIER`), with keys of its own.
//! The limit step picks one variant per request and asks it like any policy, so tiers work
//! on every site (local, split, central, lease, owner, gossip) with nothing site-specific;
//! `@` cannot appear in a policy name, so a variant never collides with one.

use std::collections::BTreeMap;

use http::HeaderName;
use serde::Deserialize;

use super::raw::RawPolicy;
use super::validate::Validator;
use super::{Account, Policy, PolicyTiers, TierSource, Tiers};

/// `tiers.NAME = { limit, burst }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    pub limit: u64,
    pub burst: Option<u64>,
}

/// `overrides."ACCOUNT" = { tier }` or `{ limit, burst }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOverride {
    pub tier: Option<String>,
    pub limit: Option<u64>,
    pub burst: Option<u64>,
}

impl Validator {
    /// The tiers and overrides of every policy that has some.
    pub(super) fn tiers(
        &mut self,
        raw: &BTreeMap<String, RawPolicy>,
        account: Option<&Account>,
    ) -> Tiers {
        let by_policy = raw
            .iter()
            .filter(|(_, p)| {
                !p.tiers.is_empty()
                    || !p.overrides.is_empty()
                    || p.tier_header.is_some()
                    || p.tier_claim.is_some()
            })
            .map(|(name, p)| (name.clone(), self.policy_tiers(name, p, account)))
            .collect();
        Tiers { by_policy }
    }

    fn policy_tiers(
        &mut self,
        name: &str,
        p: &RawPolicy,
        account: Option<&Account>,
    ) -> PolicyTiers {
        let at = |k: &str| format!("policies.{name}.{k}");
        let source = self.tier_source(name, p, account);
        let mut t = PolicyTiers {
            policy: name.to_string(),
            source,
            tiers: Vec::new(),
            overrides: Vec::new(),
            variants: Vec::new(),
        };
        for (tier, raw) in &p.tiers {
            if tier.is_empty()
                || !tier
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
            {
                self.fail(
                    &at("tiers"),
                    format!("tier `{tier}`: names may use only letters, digits, `_` and `-`"),
                );
                continue;
            }
            let numbers = (raw.limit, raw.burst);
            if let Some(v) = self.variant(name, &format!("tiers.{tier}"), tier, p, numbers) {
                t.tiers.push((tier.clone(), t.variants.len()));
                t.variants.push(v);
            }
        }
        if t.source.is_some() && p.tiers.is_empty() {
            self.fail(
                &at("tiers"),
                "is empty: a tier source needs tiers to choose from",
            );
        }
        self.overrides(name, p, account, &mut t);
        let unsourced = p.tier_header.is_none() && p.tier_claim.is_none();
        if unsourced && !p.tiers.is_empty() && t.overrides.is_empty() {
            self.fail(
                &at("tiers"),
                "are never chosen: set tier_header or tier_claim, or name a tier in overrides",
            );
        }
        t
    }

    fn tier_source(
        &mut self,
        name: &str,
        p: &RawPolicy,
        account: Option<&Account>,
    ) -> Option<TierSource> {
        let at = |k: &str| format!("policies.{name}.{k}");
        match (&p.tier_header, &p.tier_claim) {
            (Some(_), Some(_)) => {
                self.fail(
                    &at("tier_claim"),
                    "choose one of tier_header and tier_claim",
                );
                None
            }
            (Some(h), None) => match HeaderName::from_bytes(h.as_bytes()) {
                Ok(h) => Some(TierSource::Header(h)),
                Err(_) => {
                    self.fail(
                        &at("tier_header"),
                        format!("`{h}` is not a valid header name"),
                    );
                    None
                }
            },
            (None, Some(c)) if c.is_empty() => {
                self.fail(&at("tier_claim"), "must name a claim");
                None
            }
            (None, Some(c)) if account.and_then(|a| a.jwt.as_ref()).is_none() => {
                if !self.account_failed {
                    self.fail(
                        &at("tier_claim"),
                        format!(
                            "claim `{c}` needs [account] jwt to verify the token it comes from"
                        ),
                    );
                }
                None
            }
            (None, Some(c)) => Some(TierSource::Claim(c.clone())),
            (None, None) => None,
        }
    }

    fn overrides(
        &mut self,
        name: &str,
        p: &RawPolicy,
        account: Option<&Account>,
        t: &mut PolicyTiers,
    ) {
        let at = format!("policies.{name}.overrides");
        if account.is_none() && !p.overrides.is_empty() {
            if self.no_account(account) {
                self.fail(
                    &at,
                    "lists accounts but there is no [account] section to read them from",
                );
            }
            return;
        }
        for (who, o) in &p.overrides {
            let key = format!("{at}.\"{who}\"");
            let Some(hash) = self.account_hash(&key, who, account) else {
                continue;
            };
            if t.overrides.iter().any(|(h, _)| *h == hash) {
                self.fail(
                    &key,
                    "names an account another override already names (raw or as its hash)",
                );
                continue;
            }
            let variant = match (&o.tier, o.limit) {
                (Some(tier), None) if o.burst.is_none() => {
                    match t.tiers.iter().find(|(n, _)| n == tier) {
                        Some(&(_, i)) => i,
                        None => {
                            self.fail(
                                &key,
                                format!("names tier `{tier}`, which `tiers` does not define"),
                            );
                            continue;
                        }
                    }
                }
                (None, Some(limit)) => {
                    let burst = o.burst;
                    let label = format!("={limit}-{}", burst.unwrap_or(limit));
                    match t
                        .variants
                        .iter()
                        .position(|v| v.name == format!("{name}@{label}"))
                    {
                        Some(i) => i,
                        None => {
                            let Some(v) =
                                self.variant(name, "overrides", &label, p, (limit, burst))
                            else {
                                continue;
                            };
                            t.variants.push(v);
                            t.variants.len() - 1
                        }
                    }
                }
                _ => {
                    self.fail(&key, "takes either `tier` or its own `limit` (and `burst`)");
                    continue;
                }
            };
            t.overrides.push((hash, variant));
        }
    }

    /// The policy with these numbers, checked by the policy's own rules under `at`.
    fn variant(
        &mut self,
        name: &str,
        at: &str,
        label: &str,
        p: &RawPolicy,
        (limit, burst): (u64, Option<u64>),
    ) -> Option<Policy> {
        let raw = RawPolicy {
            limit,
            burst,
            tier_header: None,
            tier_claim: None,
            tiers: BTreeMap::new(),
            overrides: BTreeMap::new(),
            ..p.clone()
        };
        let mut v = self.policy(&format!("{name}.{at}"), &raw)?;
        v.name = format!("{name}@{label}");
        Some(v)
    }
}
