//! The limit step of the request path: keys → decision site → one [`Admission`].
//!
//! Rules, applied to the policies of the request's route whose key the request has:
//! - a request spends only if every **enforcing** policy allows it;
//! - shadow policies are decided too, and spend only when *every* policy (enforcing and
//!   shadow) allows, so their state evolves exactly as it would once enforced;
//! - a denied request spends nothing anywhere.
//!
//! The check is `async` although the local site answers at once: the central and lease sites
//! of later issues answer over the network and plug in behind the same call.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderMap, Method};
use prometheus_client::registry::Registry;
use tracing::warn;

use super::algorithm::{QuotaError, QuotaInfo, Verdict};
use super::clock::{Clock, Nanos};
use super::keys::KeyBuilder;
use super::local::{CheckItem, LocalStore};
use super::metrics::{LimitMetrics, Outcome, PolicyGauges};
use super::permit::Permits;
use super::policy::PolicyRuntime;
use crate::config::{Config, Mode};

/// What one enforcing policy says about a request, for the response headers.
#[derive(Debug, Clone)]
pub struct PolicyReport {
    /// Policy name: the header item's name.
    pub name: Arc<str>,
    /// The client's quota (with headroom): `q` and `w`.
    pub quota: QuotaInfo,
    /// `r`: requests it would admit right now.
    pub remaining: u64,
    /// `t` for allowed requests: nanoseconds until full again.
    pub reset_after: Nanos,
    /// Set when this policy denied: nanoseconds until this request would be admitted.
    pub retry_after: Option<Nanos>,
}

/// The limit step's answer for one request.
#[derive(Debug, Default)]
pub struct Admission {
    /// True when an enforcing policy denied: answer 429, do not forward.
    pub denied: bool,
    /// Leaky bucket: hold the request this long before forwarding.
    pub delay: Nanos,
    /// Enforcing policies that applied, in the route's order.
    pub report: Vec<PolicyReport>,
    /// Concurrency cells to give back when the response ends.
    pub permits: Permits,
}

impl Admission {
    /// The wait to announce on a denial: the longest of the denying policies' waits.
    pub fn retry_after(&self) -> Option<Nanos> {
        self.report.iter().filter_map(|r| r.retry_after).max()
    }
}

/// Rate-limits every route's requests.
pub struct Limiter {
    keys: KeyBuilder,
    policies: Arc<[PolicyRuntime]>,
    /// For each route (config order): its applicable policies and their effective mode.
    plans: Vec<Vec<(usize, Mode)>>,
    local: Arc<LocalStore>,
    metrics: LimitMetrics,
    /// Per policy: last time (clock nanos) a shadow denial was logged, to keep attacks
    /// from flooding the log (at most one line per policy per second).
    shadow_logged: Vec<AtomicU64>,
}

const SHADOW_LOG_EVERY: Nanos = 1_000_000_000;

impl Limiter {
    pub fn new(
        config: &Config,
        clock: Arc<dyn Clock>,
        registry: &mut Registry,
    ) -> Result<Self, QuotaError> {
        let keys = KeyBuilder::new(&config.client_ip, config.account.clone());
        let headrooms = keys.headrooms();
        let policies: Arc<[PolicyRuntime]> = config
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| PolicyRuntime::new(i, p, &headrooms))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        let names: Vec<Arc<str>> = policies.iter().map(|p| p.name.clone()).collect();
        let gauges = Arc::new(PolicyGauges::register(registry, &names));
        let plans = config
            .routes
            .iter()
            .map(|r| {
                if r.mode == Mode::Off {
                    return Vec::new();
                }
                r.policies
                    .iter()
                    .map(|&p| (p, policies[p].mode.unwrap_or(r.mode)))
                    .filter(|(_, m)| *m != Mode::Off)
                    .collect()
            })
            .collect();
        Ok(Limiter {
            keys,
            shadow_logged: policies.iter().map(|_| AtomicU64::new(0)).collect(),
            local: Arc::new(LocalStore::new(policies.clone(), clock, gauges)),
            policies,
            plans,
            metrics: LimitMetrics::register(registry),
        })
    }

    /// The local site, for tests and diagnostics.
    pub fn local(&self) -> &Arc<LocalStore> {
        &self.local
    }

    /// Index of a policy by name.
    pub fn policy_index(&self, name: &str) -> Option<usize> {
        self.policies.iter().position(|p| &*p.name == name)
    }

    /// Decide a request of route `route` (its index in the config).
    pub async fn check(
        &self,
        route: usize,
        route_name: &Arc<str>,
        client: IpAddr,
        method: &Method,
        headers: &HeaderMap,
    ) -> Admission {
        let plan = &self.plans[route];
        if plan.is_empty() {
            return Admission::default();
        }
        let facts = self.keys.facts(client, route_name, method, headers);
        let mut items = Vec::with_capacity(plan.len());
        let mut modes = Vec::with_capacity(plan.len());
        for &(p, mode) in plan {
            let policy = &self.policies[p];
            if let Some(key) = self.keys.key(policy, &facts) {
                items.push(CheckItem {
                    policy: p,
                    headroom: facts.headroom,
                    key,
                    cost: policy.cost.get(),
                });
                modes.push(mode);
            }
        }
        if items.is_empty() {
            return Admission::default();
        }
        let results = self.local.check(&items, |ds| {
            commit_plan(ds.iter().map(|d| d.verdict.admits()), &modes)
        });

        let mut admission = Admission::default();
        let mut held = Vec::new();
        for ((item, mode), r) in items.into_iter().zip(modes).zip(results) {
            let policy = &self.policies[item.policy];
            let admitted = r.decision.verdict.admits();
            let outcome = match (admitted, mode) {
                (true, _) => Outcome::Allow,
                (false, Mode::Shadow) => Outcome::ShadowDeny,
                (false, _) => Outcome::Deny,
            };
            self.metrics.decision(route_name, &policy.name, outcome);
            if outcome == Outcome::ShadowDeny {
                self.log_shadow_denial(policy, route_name, &item.key);
            }
            if r.committed && policy.algorithm(item.headroom).is_concurrency() {
                held.push(item.clone());
            }
            if mode != Mode::Enforce {
                continue;
            }
            let retry_after = match r.decision.verdict {
                Verdict::Deny { retry_after } => Some(retry_after),
                Verdict::Delay(d) => {
                    admission.delay = admission.delay.max(d);
                    None
                }
                Verdict::Allow => None,
            };
            admission.denied |= retry_after.is_some();
            admission.report.push(PolicyReport {
                name: policy.name.clone(),
                quota: policy.algorithm(item.headroom).quota(),
                remaining: r.snapshot.remaining,
                reset_after: r.snapshot.reset_after,
                retry_after,
            });
        }
        if admission.denied {
            admission.delay = 0;
        }
        admission.permits = Permits::new(self.local.clone(), held);
        admission
    }

    fn log_shadow_denial(&self, policy: &PolicyRuntime, route: &str, key: &str) {
        let now = self.local.now().max(1);
        let last = &self.shadow_logged[policy.index];
        let prev = last.load(Ordering::Relaxed);
        if (prev == 0 || now.saturating_sub(prev) >= SHADOW_LOG_EVERY)
            && last
                .compare_exchange(prev, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            warn!(policy = %policy.name, route, key, "shadow mode: would deny (logged at most once a second per policy; see tollgate_decisions_total)");
        }
    }
}

/// Which items to spend, given whether each admitted and its mode (see the module doc).
pub fn commit_plan(admits: impl Iterator<Item = bool>, modes: &[Mode]) -> Vec<bool> {
    let admits: Vec<bool> = admits.collect();
    let enforce_ok = admits
        .iter()
        .zip(modes)
        .all(|(&a, m)| a || *m != Mode::Enforce);
    let all_ok = admits.iter().all(|&a| a);
    modes
        .iter()
        .map(|m| all_ok || (enforce_ok && *m == Mode::Enforce))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_spends_all_or_nothing() {
        use Mode::*;
        assert_eq!(
            commit_plan([true, true].into_iter(), &[Enforce, Enforce]),
            vec![true, true]
        );
        assert_eq!(
            commit_plan([true, false].into_iter(), &[Enforce, Enforce]),
            vec![false, false]
        );
        // A shadow denial never blocks the enforcing spend, and spends no shadow state.
        assert_eq!(
            commit_plan([true, false, true].into_iter(), &[Enforce, Shadow, Shadow]),
            vec![true, false, false]
        );
        assert_eq!(
            commit_plan([false, true].into_iter(), &[Enforce, Shadow]),
            vec![false, false]
        );
        assert_eq!(
            commit_plan([true, true].into_iter(), &[Enforce, Shadow]),
            vec![true, true]
        );
    }
}
