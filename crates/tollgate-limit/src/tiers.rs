//! Step 1, for tiered policies: which variant of the policy (`spec/tiers.rs`) a request is
//! asked under. An override for the request's account wins; else the tier its header or
//! token claim names; else (no tier, an unknown one, a header stated twice) the policy's own
//! numbers. The variant is then asked like any policy, on any site.

use std::collections::HashMap;

use http::HeaderMap;

use super::keys::{KeyError, RequestFacts, Token};
use crate::spec::{LimiterSpec, Policy, TierSource};

/// One tiered policy's choices, as indexes into the limiter's policy list.
#[derive(Debug)]
struct Choice {
    source: Option<TierSource>,
    tiers: HashMap<String, usize>,
    /// Hashed account → variant.
    overrides: HashMap<String, usize>,
}

/// Per base policy (by index), its choices when it has tiers or overrides.
#[derive(Debug, Default)]
pub(super) struct TierTable {
    by_base: Vec<Option<Choice>>,
}

impl TierTable {
    /// The table for `config`, and the variants to append to its policies (in order, from
    /// index `config.policies.len()`).
    pub fn new(spec: &LimiterSpec) -> (Self, Vec<Policy>) {
        let mut variants = Vec::new();
        let by_base = spec
            .policies
            .iter()
            .map(|p| {
                let t = spec.tiers.by_policy.get(&p.name)?;
                let first = spec.policies.len() + variants.len();
                variants.extend(t.variants.iter().cloned());
                let at = |(k, i): &(String, usize)| (k.clone(), first + i);
                Some(Choice {
                    source: t.source.clone(),
                    tiers: t.tiers.iter().map(at).collect(),
                    overrides: t.overrides.iter().map(at).collect(),
                })
            })
            .collect();
        (TierTable { by_base }, variants)
    }

    /// The policy to ask in place of `base` for this request; `Err` (a 400) when the
    /// policy has overrides and the request states its account ambiguously: as no account
    /// it would escape an override that lowers its limit; `Err` (a 401, unless
    /// `on_unverified = "shared"`) when the tier is a claim of a token that does not verify.
    pub fn pick(
        &self,
        base: usize,
        facts: &RequestFacts<'_>,
        unverified: impl FnOnce() -> Result<&'static str, KeyError>,
    ) -> Result<usize, KeyError> {
        let Some(Some(c)) = self.by_base.get(base) else {
            return Ok(base);
        };
        let account = match &facts.account {
            Some(Err(ambiguous)) if !c.overrides.is_empty() => {
                return Err(ambiguous.clone().into());
            }
            Some(a) => a.as_deref().ok(),
            None => None,
        };
        if let Some(&v) = account.and_then(|a| c.overrides.get(a)) {
            return Ok(v);
        }
        let tier = match &c.source {
            Some(TierSource::Header(h)) => single(facts.headers, h),
            Some(TierSource::Claim(name)) => match &facts.token {
                // Shared: the policy's own numbers.
                Token::Unverified => unverified().map(|_| None)?,
                Token::Ambiguous(a) => return Err(a.clone().into()),
                t => t
                    .claims()
                    .and_then(|c| c.get(name))
                    .and_then(crate::spec::Jwt::claim_text),
            },
            None => None,
        };
        Ok(tier.and_then(|t| c.tiers.get(&t).copied()).unwrap_or(base))
    }
}

/// A tier header's one value; none when absent, repeated or not text (the policy's own
/// numbers then apply: an auth layer sets this header once).
fn single(headers: &HeaderMap, name: &http::HeaderName) -> Option<String> {
    let mut all = headers.get_all(name).into_iter();
    let v = all.next()?;
    if all.next().is_some() {
        return None;
    }
    v.to_str().ok().map(|s| s.trim().to_string())
}
