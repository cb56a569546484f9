//! What the admin API's `/activity` and `/status` read off the running limiter: the decision
//! counters as they stand, the store's breakers and the fleet's live peers. All of it is
//! read from state the request path keeps anyway, so asking costs the path nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use super::Limiter;
use crate::metrics::OutcomeTotals;
use crate::spec::Mode;

/// One (route, policy)'s decisions since start.
#[derive(Debug, Clone)]
pub struct DecisionTotals {
    pub route: Arc<str>,
    pub policy: Arc<str>,
    /// The policy's effective mode on the route: a shadow policy only ever shadow-denies.
    pub shadow: bool,
    pub totals: OutcomeTotals,
    /// What the counters held when the running config was built: where a pair that is new
    /// with it starts (its counters may have counted on an older config that had it).
    pub before: OutcomeTotals,
}

/// The fleet as this node sees it: itself, the peers answering and the ones that are not.
#[derive(Debug, Clone)]
pub struct FleetView {
    pub me: SocketAddr,
    pub live: Vec<SocketAddr>,
    pub down: Vec<SocketAddr>,
}

impl Limiter {
    /// Every (route, policy) the running config asks, in config order, with its counts.
    /// The counters outlive a reload (one per label set), so a kept pair keeps counting.
    pub fn decision_totals(&self) -> Vec<DecisionTotals> {
        self.routes
            .iter()
            .flat_map(|r| {
                let counted = r.counters.iter().zip(&r.counted_before);
                r.entries
                    .iter()
                    .zip(counted)
                    .map(|(e, (c, before))| DecisionTotals {
                        route: r.name.clone(),
                        policy: self.sites.policies[e.policy].name.clone(),
                        shadow: e.mode == Mode::Shadow,
                        totals: c.totals(),
                        before: *before,
                    })
            })
            .collect()
    }

    /// The fleet, when `[cluster] peer_listen` is set: live and silent peers, each sorted.
    pub fn fleet_view(&self) -> Option<FleetView> {
        let ring = &self.fleet()?.ring;
        let mut live = ring.live_others();
        live.sort_unstable();
        let mut down: Vec<SocketAddr> = ring
            .others()
            .into_iter()
            .filter(|a| !live.contains(a))
            .collect();
        down.sort_unstable();
        Some(FleetView {
            me: ring.me(),
            live,
            down,
        })
    }
}
