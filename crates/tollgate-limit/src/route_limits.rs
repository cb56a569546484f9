//! A route's policies as the limit step walks them, built once from the config: for each
//! policy, its effective mode and the one site that decides it.

use std::sync::Arc;

use super::metrics::{LimitMetrics, OutcomeCounters, OutcomeTotals};
use super::policy::PolicyRuntime;
use crate::spec::{self, Mode, OnStoreError, RouteSpec};

/// Where one policy of a route is decided. One variant per site, so that impossible
/// combinations (leased and central at once, local-first without a store) cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Site {
    /// This node's own state (also `central` policies on the memory store).
    Local,
    /// This node's own state at `limit / N`, N from membership.
    Split,
    /// One script call to Redis decides; `local_first`: this node's state, which counts a
    /// subset of what Redis counted, denies first without a call.
    Central { local_first: bool },
    /// Cells leased from the coordinator (Redis, or this process on the memory store).
    Lease,
    /// The key's owner in the fleet decides (this node's own state when it is the owner).
    Owner,
    /// This node's own state, which also counts what the other nodes gossiped.
    Gossip,
}

impl Site {
    /// As `GET /routes` and the admin API name it.
    pub fn name(self) -> &'static str {
        match self {
            Site::Local => "local",
            Site::Split => "split",
            Site::Central { .. } => "central",
            Site::Lease => "lease",
            Site::Owner => "owner",
            Site::Gossip => "gossip",
        }
    }

    /// Has node-local state that can deny before any store call: local and split policies,
    /// and local-first mirrors of central ones.
    pub fn has_local_state(self) -> bool {
        matches!(
            self,
            Site::Local | Site::Split | Site::Gossip | Site::Central { local_first: true }
        )
    }
}

/// One policy of one route.
#[derive(Debug, Clone, Copy)]
pub(super) struct PolicyEntry {
    /// Index into the limiter's policies.
    pub policy: usize,
    /// Effective mode (the policy's own, else the route's); never `Off` (those are left out).
    pub mode: Mode,
    pub site: Site,
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
                .map(|&p| PolicyEntry {
                    policy: p,
                    mode: policies[p].mode.unwrap_or(route.mode),
                    site: site_of(&policies[p].spec, redis),
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

/// Where `spec` is decided; `redis`: the store is Redis (else central is local).
pub(super) fn site_of(spec: &spec::Policy, redis: bool) -> Site {
    match spec.site {
        spec::Site::Central if redis => Site::Central {
            local_first: spec.local_first,
        },
        spec::Site::Local | spec::Site::Central => Site::Local,
        spec::Site::Split => Site::Split,
        spec::Site::Lease => Site::Lease,
        spec::Site::Owner => Site::Owner,
        spec::Site::Gossip => Site::Gossip,
    }
}
