//! Step 1 of the limit step: one ask per applicable policy of the route — exemptions
//! skipped, a tiered policy's variant picked, the key built and the request priced — or
//! why the request is refused (400, 401) before any policy is asked.

use std::net::IpAddr;
use std::sync::Arc;

use super::Limiter;
use crate::ask::Ask;
use crate::cost::request_cost;
use crate::keys::{KeyError, MissingKey, RequestFacts};
use crate::metrics::PolicyOutcome;
use crate::route_limits::{PolicyEntry, RouteLimits};
use crate::spec::Mode;

/// Why step 1 refuses a request before any policy is asked.
pub(super) enum Refusal {
    /// A key part or a price stated ambiguously or wrongly: 400 with this reason.
    BadRequest(String),
    /// A key part comes from a token that does not verify: 401.
    Unauthenticated,
    /// An `on_missing_key = "deny"` policy's account or claim is missing: 401.
    MissingCredential(MissingKey),
    /// An `on_missing_key = "deny"` policy's other key part is missing: 400.
    Missing(MissingKey),
}

/// What step 1 found for a request it does not refuse.
pub(super) struct Asked {
    pub asks: Vec<Ask>,
    /// The first policy that exempted the client, for the access log.
    pub exempted: Option<Arc<str>>,
    /// The first shadow `on_missing_key = "deny"` policy that would have refused the
    /// request (already counted and logged as a shadow denial), for the access log.
    pub would_refuse: Option<Arc<str>>,
}

impl From<KeyError> for Refusal {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Ambiguous(a) => Refusal::BadRequest(a.reason()),
            KeyError::Unverified => Refusal::Unauthenticated,
            KeyError::MissingCredential(m) => Refusal::MissingCredential(m),
            KeyError::Missing(m) => Refusal::Missing(m),
        }
    }
}

impl Limiter {
    /// Step 1: one ask per applicable policy (and, for the access log, the first policy
    /// that exempted the client or would have refused it in shadow), or why the request
    /// is refused.
    pub(super) fn asks(
        &self,
        limits: &RouteLimits,
        client: IpAddr,
        facts: &RequestFacts<'_>,
    ) -> Result<Asked, Refusal> {
        let mut asks = Vec::with_capacity(limits.entries.len());
        let (mut exempted, mut would_refuse) = (None, None);
        for (slot, e) in limits.entries.iter().enumerate() {
            if self.exempts(e.policy, client, facts) {
                limits.counters[slot].count_exempt();
                exempted.get_or_insert_with(|| self.sites.policies[e.policy].label.clone());
                continue;
            }
            // A tiered policy is asked as the variant this client's tier names. What
            // a client states wrongly (an account for an override, a price) refuses the
            // request (400) for an enforcing policy; a shadow one then does not apply.
            let enforcing = e.mode == Mode::Enforce;
            let policy = match self.tiers.pick(e.policy, facts, || self.keys.unverified()) {
                Ok(p) => p,
                Err(why) if enforcing => return Err(why.into()),
                Err(_) => continue,
            };
            let e = &PolicyEntry { policy, ..*e };
            let policy = &self.sites.policies[e.policy];
            match self.keys.key(policy, facts) {
                Ok(Some(key)) => match request_cost(policy, facts.headers) {
                    Ok(price) => {
                        let mut ask = Ask::new(*e, slot, key, facts.headroom, price);
                        ask.shown = self.keys.shown_key(policy, facts).map(Into::into);
                        asks.push(ask);
                    }
                    Err(why) if enforcing => return Err(Refusal::BadRequest(why)),
                    Err(_) => {}
                },
                Ok(None) => {}
                // An enforcing policy needs a part stated ambiguously (400) or read from a
                // token that does not verify (401): refuse before any policy is asked, so
                // nothing is spent.
                Err(why) if enforcing => return Err(why.into()),
                // A shadow `deny` policy would have refused a request lacking a part: a
                // shadow denial (counted, logged), forwarded as shadow denials are.
                Err(KeyError::MissingCredential(m) | KeyError::Missing(m)) => {
                    limits.counters[slot].count(PolicyOutcome::ShadowDeny);
                    self.sites.log_shadow_missing(policy, &limits.name, &m.what);
                    would_refuse.get_or_insert(m.policy);
                }
                // A shadow policy must not change what the client sees: it does not apply.
                Err(_) => {}
            }
        }
        Ok(Asked {
            asks,
            exempted,
            would_refuse,
        })
    }

    /// Whether policy `policy` does not apply to this client (`[exempt]`). An account stated
    /// ambiguously is no account here: it never buys an exemption.
    fn exempts(&self, policy: usize, client: IpAddr, facts: &RequestFacts<'_>) -> bool {
        let exempt = &self.exempt[policy];
        if exempt.is_empty() {
            return false;
        }
        let account = facts.account.as_ref().and_then(|a| a.as_deref().ok());
        exempt.covers(crate::keys::canonical(client), account)
    }
}
