//! The limiter: every route's policies, the sites that decide them, and the caches in front.
//! [`Limiter::check`] (in `check.rs`) is the limit step of the request path.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::{error, warn};

use super::algorithm::QuotaError;
use super::central::CentralSite;
use super::central::metrics::StoreMetrics;
use super::clock::{Clock, Nanos};
use super::deny_cache::DenyCache;
use super::keys::KeyBuilder;
use super::lease::LeaseSite;
use super::local::LocalStore;
use super::metrics::{LimitMetrics, OutcomeCounters, PolicyGauges};
use super::policy::PolicyRuntime;
use crate::config::{Config, Mode, OnStoreError, Site, StoreKind};

/// One policy of one route, as the check walks it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PlanEntry {
    pub policy: usize,
    /// Effective mode (the policy's own, else the route's).
    pub mode: Mode,
    /// Decided by the central site (a `central` policy with a Redis store).
    pub central: bool,
    /// Central with a node-local state in front.
    pub local_first: bool,
    /// Decided from cells leased from the coordinator (Redis, or this process).
    pub lease: bool,
    /// Decided locally at limit/N (N from membership).
    pub split: bool,
}

/// A route's policies and what to do when the store fails.
#[derive(Clone)]
pub(super) struct RoutePlan {
    pub entries: Vec<PlanEntry>,
    /// Decision counters, aligned with `entries`.
    pub counters: Vec<OutcomeCounters>,
    pub on_store_error: OnStoreError,
}

/// Why the limiter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error(transparent)]
    Quota(#[from] QuotaError),
    #[error("store: {0}")]
    Store(#[from] redis::RedisError),
}

/// Rate-limits every route's requests.
pub struct Limiter {
    pub(super) keys: KeyBuilder,
    pub(super) policies: Arc<[PolicyRuntime]>,
    /// For each route (config order).
    pub(super) plans: Vec<RoutePlan>,
    pub(super) local: Arc<LocalStore>,
    /// Present when the store is Redis (with `memory`, central policies decide locally).
    pub(super) central: Option<Arc<CentralSite>>,
    /// Leased keys' books and their coordinator (Redis with a Redis store, else in-process).
    pub(super) lease: Arc<LeaseSite>,
    /// `tollgate_cluster_nodes`: N of the L/N split.
    nodes_gauge: Gauge,
    /// Central denials remembered until their wait is over.
    pub(super) denied_until: DenyCache,
    /// `Retry-After` of a fail-closed 503: the breaker's cooldown.
    pub(super) unavailable_retry: Nanos,
    /// Per policy: last time (clock nanos) a shadow denial was logged, to keep attacks
    /// from flooding the log (at most one line per policy per second).
    shadow_logged: Vec<AtomicU64>,
    /// Last time a store error was logged (same reason).
    store_error_logged: AtomicU64,
    /// Store errors not logged since that line.
    store_error_suppressed: AtomicU64,
}

const LOG_EVERY: Nanos = 1_000_000_000;
/// Keys remembered as denied, across policies.
const DENY_CACHE_KEYS: usize = 100_000;

impl Limiter {
    pub fn new(
        config: &Config,
        clock: Arc<dyn Clock>,
        registry: &mut Registry,
    ) -> Result<Self, LimiterError> {
        let keys = KeyBuilder::new(&config.client_ip, config.account.clone());
        let headrooms = keys.headrooms();
        let policies: Arc<[PolicyRuntime]> = config
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| PolicyRuntime::with_nodes(i, p, &headrooms, config.expected_nodes))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        let names: Vec<Arc<str>> = policies.iter().map(|p| p.name.clone()).collect();
        let gauges = Arc::new(PolicyGauges::register(registry, &names));
        let central = match config.store.kind {
            StoreKind::Memory => None,
            _ => {
                let metrics = StoreMetrics::register(registry);
                Some(Arc::new(CentralSite::new(
                    &config.store,
                    clock.clone(),
                    metrics,
                )?))
            }
        };
        let metrics = LimitMetrics::register(registry);
        let nodes_gauge = Gauge::default();
        nodes_gauge.set(i64::from(config.expected_nodes.get()));
        registry.register(
            "tollgate_cluster_nodes",
            "Gateways sharing the limits (N of the L/N split): membership, else expected_nodes",
            nodes_gauge.clone(),
        );
        let plans = config
            .routes
            .iter()
            .map(|r| RoutePlan {
                on_store_error: r.on_store_error,
                counters: Vec::new(),
                entries: if r.mode == Mode::Off {
                    Vec::new()
                } else {
                    r.policies
                        .iter()
                        .map(|&p| {
                            let spec = &policies[p].spec;
                            let central = central.is_some() && spec.site == Site::Central;
                            PlanEntry {
                                policy: p,
                                mode: policies[p].mode.unwrap_or(r.mode),
                                central,
                                local_first: central && spec.local_first,
                                lease: spec.site == Site::Lease,
                                split: spec.site == Site::Split,
                            }
                        })
                        .filter(|e| e.mode != Mode::Off)
                        .collect()
                },
            })
            .collect::<Vec<RoutePlan>>()
            .into_iter()
            .zip(&config.routes)
            .map(|(mut plan, r)| {
                let route: Arc<str> = Arc::from(r.name.as_str());
                plan.counters = plan
                    .entries
                    .iter()
                    .map(|e| metrics.counters(&route, &policies[e.policy].name))
                    .collect();
                plan
            })
            .collect();
        let lease = Arc::new(
            match &central {
                Some(site) => LeaseSite::redis(site.clone(), clock.clone(), config.store.timeout),
                None => LeaseSite::memory(clock.clone()),
            }
            .with_gauges(gauges.clone()),
        );
        Ok(Limiter {
            keys,
            lease,
            nodes_gauge,
            shadow_logged: policies.iter().map(|_| AtomicU64::new(0)).collect(),
            store_error_logged: AtomicU64::new(0),
            store_error_suppressed: AtomicU64::new(0),
            local: Arc::new(LocalStore::new(policies.clone(), clock, gauges)),
            central,
            denied_until: DenyCache::new(
                DENY_CACHE_KEYS,
                super::clock::duration_to_nanos(config.store.timeout),
            ),
            unavailable_retry: super::clock::duration_to_nanos(config.store.breaker_cooldown),
            policies,
            plans,
        })
    }

    /// The local site, for tests and diagnostics.
    pub fn local(&self) -> &Arc<LocalStore> {
        &self.local
    }

    /// The central site, when the store is Redis.
    pub fn central(&self) -> Option<&Arc<CentralSite>> {
        self.central.as_ref()
    }

    /// The lease site.
    pub fn lease(&self) -> &Arc<LeaseSite> {
        &self.lease
    }

    /// Membership says `nodes` gateways share the limits: rescale every L/N split (the
    /// `split` policies and the store-outage fallback). Returns whether anything changed.
    pub fn set_nodes(&self, nodes: NonZeroU32) -> bool {
        let mut changed = false;
        for p in self.policies.iter() {
            if p.set_nodes(nodes) {
                self.local.clear_split(p.index);
                changed = true;
            }
        }
        self.nodes_gauge.set(i64::from(nodes.get()));
        changed
    }

    /// N of the L/N split now.
    pub fn nodes(&self) -> NonZeroU32 {
        self.policies.first().map_or(NonZeroU32::MIN, |p| p.nodes())
    }

    /// Index of a policy by name.
    pub fn policy_index(&self, name: &str) -> Option<usize> {
        self.policies.iter().position(|p| &*p.name == name)
    }

    /// Keys currently remembered as denied.
    pub fn denied_keys(&self) -> usize {
        self.denied_until.len()
    }

    pub(super) fn log_shadow_denial(&self, policy: &PolicyRuntime, route: &str, key: &str) {
        if once_a_second(&self.shadow_logged[policy.index], self.local.now()) {
            warn!(policy = %policy.name, route, key, "shadow mode: would deny (logged at most once a second per policy; see tollgate_decisions_total)");
        }
    }

    pub(super) fn log_store_error(
        &self,
        route: &str,
        err: &dyn std::fmt::Display,
        fallback: OnStoreError,
    ) {
        if once_a_second(&self.store_error_logged, self.local.now()) {
            let suppressed = self.store_error_suppressed.swap(0, Ordering::Relaxed);
            error!(route, error = %err, ?fallback, suppressed, "store unavailable; deciding without it (logged at most once a second; suppressed: errors since the last line)");
        } else {
            self.store_error_suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// True at most once per second per `last` (a CAS keeps racing threads to one winner).
fn once_a_second(last: &AtomicU64, now: Nanos) -> bool {
    let now = now.max(1);
    let prev = last.load(Ordering::Relaxed);
    (prev == 0 || now.saturating_sub(prev) >= LOG_EVERY)
        && last
            .compare_exchange(prev, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}
