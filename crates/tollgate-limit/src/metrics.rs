//! Rate-limit metrics, registered at start-up beside the proxy's.
//!
//! Names are a contract: `tollgate_decisions_total{route,policy,outcome}` with outcome in
//! `allow`, `deny`, `shadow_deny`; `tollgate_limiter_keys{policy}`;
//! `tollgate_limiter_evictions_total{policy}`;
//! `tollgate_fallback_decisions_total{route,policy,on_store_error,reason}`: every key the
//! store (or its owner) could not decide, by what the route did instead and why.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// One decision's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub route: Arc<str>,
    pub policy: Arc<str>,
    pub outcome: &'static str,
}

/// One decision made without the store's (or an owner's) answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    route: Arc<str>,
    policy: Arc<str>,
    /// What the route did: `local` (decided on the L/N fallback), `open`, `closed`.
    on_store_error: &'static str,
    /// Why: the store error's kind (`timeout`, `breaker_open`, `redis`, `reply`,
    /// `unsettled`) or the owner's (`peer_timeout`, `peer_connect`, …).
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: Arc<str>,
}

/// What one policy decided for one request, as counted (the `outcome` label of
/// `tollgate_decisions_total`, and what `top/` records). Not the request's outcome: that is
/// [`crate::Outcome`], which one request has however many policies it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOutcome {
    Allow,
    Deny,
    /// A shadow-mode policy would have denied.
    ShadowDeny,
}

impl PolicyOutcome {
    pub fn label(self) -> &'static str {
        match self {
            PolicyOutcome::Allow => "allow",
            PolicyOutcome::Deny => "deny",
            PolicyOutcome::ShadowDeny => "shadow_deny",
        }
    }
}

/// Per-request counters.
#[derive(Clone)]
pub struct LimitMetrics {
    decisions: Family<DecisionLabels, Counter>,
    fallbacks: Family<FallbackLabels, Counter>,
}

impl LimitMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "tollgate_decisions",
            "Rate-limit decisions by route, policy and outcome (allow, deny, shadow_deny)",
            decisions.clone(),
        );
        // A series per reason seen: created on the error path only (the kinds are few).
        let fallbacks = Family::<FallbackLabels, Counter>::default();
        registry.register(
            "tollgate_fallback_decisions",
            "Keys decided without the store or their owner, by route, policy, what the route did (on_store_error) and why",
            fallbacks.clone(),
        );
        LimitMetrics {
            decisions,
            fallbacks,
        }
    }

    /// The counters of one (route, policy), one per outcome, created at start: every series
    /// is exported from the first scrape on (at 0), so rates and alerts work at once.
    pub fn counters(&self, route: &Arc<str>, policy: &Arc<str>) -> OutcomeCounters {
        let c = |outcome: &'static str| {
            let labels = DecisionLabels {
                route: route.clone(),
                policy: policy.clone(),
                outcome,
            };
            self.decisions.get_or_create(&labels).clone()
        };
        OutcomeCounters {
            allow: c(PolicyOutcome::Allow.label()),
            deny: c(PolicyOutcome::Deny.label()),
            shadow_deny: c(PolicyOutcome::ShadowDeny.label()),
            error_open: c("error_open"),
            error_closed: c("error_closed"),
            exempt: c("exempt"),
            fallbacks: self.fallbacks.clone(),
            route: route.clone(),
            policy: policy.clone(),
        }
    }
}

/// One (route, policy)'s decision counters, resolved at start so a decision is one atomic
/// increment instead of a label lookup.
#[derive(Clone)]
pub struct OutcomeCounters {
    allow: Counter,
    deny: Counter,
    shadow_deny: Counter,
    error_open: Counter,
    error_closed: Counter,
    /// `[exempt]`: the policy did not apply to the client.
    exempt: Counter,
    /// The fallback family and this pair's labels (the reasons are known only on error).
    fallbacks: Family<FallbackLabels, Counter>,
    route: Arc<str>,
    policy: Arc<str>,
}

impl OutcomeCounters {
    /// The request's client is exempt from the policy.
    pub fn count_exempt(&self) {
        self.exempt.inc();
    }

    pub fn count(&self, outcome: PolicyOutcome) {
        match outcome {
            PolicyOutcome::Allow => &self.allow,
            PolicyOutcome::Deny => &self.deny,
            PolicyOutcome::ShadowDeny => &self.shadow_deny,
        }
        .inc();
    }

    /// What has been counted so far (three atomic loads): the activity sampler
    /// (`admin/activity.rs`) reads these off the request path instead of counting twice.
    pub fn totals(&self) -> OutcomeTotals {
        OutcomeTotals {
            allow: self.allow.get(),
            deny: self.deny.get(),
            shadow_deny: self.shadow_deny.get(),
        }
    }

    /// A key decided without the store or its owner: `on_store_error` says how, `reason`
    /// why.
    pub fn count_fallback(&self, on_store_error: &'static str, reason: &'static str) {
        let labels = FallbackLabels {
            route: self.route.clone(),
            policy: self.policy.clone(),
            on_store_error,
            reason,
        };
        self.fallbacks.get_or_create(&labels).inc();
    }

    /// The store failed and the route failed open (`true`) or closed (`false`).
    pub fn count_store_error(&self, open: bool) {
        if open {
            &self.error_open
        } else {
            &self.error_closed
        }
        .inc();
    }
}

/// One (route, policy)'s decisions since start, as [`OutcomeCounters::totals`] read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutcomeTotals {
    pub allow: u64,
    pub deny: u64,
    pub shadow_deny: u64,
}

/// Per-policy state size, indexed by policy; handles cached so the hot path skips lookups.
pub struct PolicyGauges {
    keys: Vec<Gauge>,
    evictions: Vec<Counter>,
    /// The exported families (`None` when detached): a reloaded config's policies take
    /// their handles from them, so a kept policy keeps counting on the same series.
    families: Option<(Family<PolicyLabels, Gauge>, Family<PolicyLabels, Counter>)>,
}

impl PolicyGauges {
    pub fn register(registry: &mut Registry, names: &[Arc<str>]) -> Self {
        let keys = Family::<PolicyLabels, Gauge>::default();
        let evictions = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "tollgate_limiter_keys",
            "Keys held in local limiter state, by policy",
            keys.clone(),
        );
        registry.register(
            "tollgate_limiter_evictions",
            "Live keys evicted because a policy reached max_keys (each restarts full)",
            evictions.clone(),
        );
        Self::from_families(keys, evictions, names)
    }

    fn from_families(
        keys: Family<PolicyLabels, Gauge>,
        evictions: Family<PolicyLabels, Counter>,
        names: &[Arc<str>],
    ) -> Self {
        let label = |n: &Arc<str>| PolicyLabels { policy: n.clone() };
        PolicyGauges {
            keys: names
                .iter()
                .map(|n| keys.get_or_create(&label(n)).clone())
                .collect(),
            evictions: names
                .iter()
                .map(|n| evictions.get_or_create(&label(n)).clone())
                .collect(),
            families: Some((keys, evictions)),
        }
    }

    /// The same series for a reloaded config's policies (`names` in its order).
    pub fn renamed(&self, names: &[Arc<str>]) -> Self {
        match &self.families {
            Some((keys, evictions)) => Self::from_families(keys.clone(), evictions.clone(), names),
            None => Self::detached(names.len()),
        }
    }

    /// Gauges that nobody exports (unit tests, benches).
    pub fn detached(policies: usize) -> Self {
        PolicyGauges {
            keys: (0..policies).map(|_| Gauge::default()).collect(),
            evictions: (0..policies).map(|_| Counter::default()).collect(),
            families: None,
        }
    }

    pub fn keys_added(&self, policy: usize, n: i64) {
        self.keys[policy].inc_by(n);
    }

    pub fn keys_removed(&self, policy: usize, n: i64) {
        self.keys[policy].dec_by(n);
    }

    pub fn evicted(&self, policy: usize, n: u64) {
        if n > 0 {
            self.evictions[policy].inc_by(n);
        }
    }
}
