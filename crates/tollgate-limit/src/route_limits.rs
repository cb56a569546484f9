//! A route's policies as the limit step walks them, built once from the config: for each
//! policy, its effective mode and the one site that decides it.

use std::sync::Arc;

use super::metrics::{LimitMetrics, OutcomeCounters, OutcomeTotals};
use super::policy::PolicyRuntime;
use crate::spec::{self, Mode, OnStoreError, RouteSpec, Site};

/// One policy of one route.
#[derive(Debug, Clone, Copy)]
pub(super) struct PolicyEntry {
    /// Index into the limiter's policies.
    pub policy: usize,
    /// Effective mode (the policy's own, else the route's); never `Off` (those are left out).
    pub mode: Mode,
    /// The site that decides it: the policy's own, but `central` on the memory store is
    /// `local` (no store shares it).
    pub site: Site,
    /// A `central` entry on a Redis store whose policy is `local_first`: this node's state,
    /// which counts a subset of what Redis counted, denies first without a call. The one
    /// fact of an entry's site the config's [`Site`] does not carry; false at every other
    /// site, so that local-first without a store cannot be built.
    pub local_first: bool,
}

impl PolicyEntry {
    /// Has node-local state that can deny before any store call: local, split and gossip
    /// policies, and local-first mirrors of central ones.
    pub fn has_local_state(&self) -> bool {
        matches!(self.site, Site::Local | Site::Split | Site::Gossip) || self.local_first
    }
}

/// A route's policies and what to do when the store fails.
#[derive(Clone)]
pub(super) struct RouteLimits {
    /// The route's name: what its decision counters are labelled with.
    pub name: Arc<str>,
    pub entries: Vec<PolicyEntry>,
    /// Decision counters, aligned with `entries`.
    pub counters: Vec<OutcomeCounters>,
    /// What each counter held when this config was built (a pair a reload adds may have
    /// counted before, on an older config): `/activity` counts a new pair from here.
    pub counted_before: Vec<OutcomeTotals>,
    pub on_store_error: OnStoreError,
    /// 401 for a request without a (verified) account, before any policy.
    pub require_account: bool,
}

impl RouteLimits {
    /// `route`'s entries; `redis`: the store is Redis (else central policies decide locally).
    pub fn new(
        route: &RouteSpec,
        policies: &[PolicyRuntime],
        redis: bool,
        metrics: &LimitMetrics,
    ) -> Self {
        let entries: Vec<PolicyEntry> = if route.mode == Mode::Off {
            Vec::new()
        } else {
            route
                .policies
                .iter()
                .map(|&p| {
                    let (site, local_first) = site_of(&policies[p].spec, redis);
                    PolicyEntry {
                        policy: p,
                        mode: policies[p].mode.unwrap_or(route.mode),
                        site,
                        local_first,
                    }
                })
                .filter(|e| e.mode != Mode::Off)
                .collect()
        };
        let name: Arc<str> = Arc::from(route.name.as_str());
        let counters: Vec<OutcomeCounters> = entries
            .iter()
            .map(|e| metrics.counters(&name, &policies[e.policy].name))
            .collect();
        RouteLimits {
            counted_before: counters.iter().map(OutcomeCounters::totals).collect(),
            counters,
            name,
            entries,
            on_store_error: route.on_store_error,
            require_account: route.require_account,
        }
    }
}

impl RouteLimits {
    /// This route asks limiter policy `policy` in shadow mode.
    pub fn runs_in_shadow(&self, policy: usize) -> bool {
        self.entries
            .iter()
            .any(|e| e.policy == policy && e.mode == Mode::Shadow)
    }
}

/// Where `spec` is decided, and whether local-first; `redis`: the store is Redis (else
/// central is local).
pub(super) fn site_of(spec: &spec::Policy, redis: bool) -> (Site, bool) {
    match spec.site {
        Site::Central if redis => (Site::Central, spec.local_first),
        Site::Central => (Site::Local, false),
        site => (site, false),
    }
}
