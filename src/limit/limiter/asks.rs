//! Step 1 of the limit step: one ask per applicable policy of the route — exemptions
//! skipped, a tiered policy's variant picked, the key built and the request priced — or
//! why the request is refused (400) before any policy is asked.

use std::net::IpAddr;

use super::Limiter;
use crate::config::Mode;
use crate::limit::ask::Ask;
use crate::limit::cost::request_cost;
use crate::limit::keys::RequestFacts;
use crate::limit::route_limits::{PolicyEntry, RouteLimits};

impl Limiter {
    /// Step 1: one ask per applicable policy, or why a key part is ambiguous (a 400).
    pub(super) fn asks(
        &self,
        limits: &RouteLimits,
        client: IpAddr,
        facts: &RequestFacts<'_>,
    ) -> Result<Vec<Ask>, String> {
        let mut asks = Vec::with_capacity(limits.entries.len());
        for (slot, e) in limits.entries.iter().enumerate() {
            if self.exempts(e.policy, client, facts) {
                limits.counters[slot].count_exempt();
                continue;
            }
            // A tiered policy is asked as the variant this client's tier names. What
            // a client states wrongly (an account for an override, a price) refuses the
            // request (400) for an enforcing policy; a shadow one then does not apply.
            let enforcing = e.mode == Mode::Enforce;
            let policy = match self.tiers.pick(e.policy, facts) {
                Ok(p) => p,
                Err(why) if enforcing => return Err(why),
                Err(_) => continue,
            };
            let e = &PolicyEntry { policy, ..*e };
            let policy = &self.sites.policies[e.policy];
            match self.keys.key(policy, facts) {
                Ok(Some(key)) => match request_cost(policy, facts.headers) {
                    Ok(price) => asks.push(Ask::new(*e, slot, key, facts.headroom, price)),
                    Err(why) if enforcing => return Err(why),
                    Err(_) => {}
                },
                Ok(None) => {}
                // An enforcing policy needs a header stated ambiguously: refuse (400) before
                // any policy is asked, so nothing is spent.
                Err(ambiguous) if e.mode == Mode::Enforce => return Err(ambiguous.reason()),
                // A shadow policy must not change what the client sees: it does not apply.
                Err(_) => {}
            }
        }
        Ok(asks)
    }

    /// Whether policy `policy` does not apply to this client (`[exempt]`). An account stated
    /// ambiguously is no account here: it never buys an exemption.
    fn exempts(&self, policy: usize, client: IpAddr, facts: &RequestFacts<'_>) -> bool {
        let exempt = &self.exempt[policy];
        if exempt.is_empty() {
            return false;
        }
        let account = facts.account.as_ref().and_then(|a| a.as_deref().ok());
        exempt.covers(crate::limit::keys::canonical(client), account)
    }
}
