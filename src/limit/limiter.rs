//! The limiter: every route's policies, the sites that decide them, and the caches in front.
//! [`Limiter::check`] (in `check.rs`) is the limit step of the request path.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::{error, warn};

use super::algorithm::QuotaError;
use super::central::{CHECK_LUA, CentralSite};
use super::clock::{Clock, Nanos};
use super::deny_cache::DenyCache;
use super::keys::KeyBuilder;
use super::lease::LeaseSite;
use super::local::LocalStore;
use super::metrics::{LimitMetrics, PolicyGauges};
use super::policy::PolicyRuntime;
use super::route_limits::RouteLimits;
use super::store::RedisStore;
use super::store::metrics::StoreMetrics;
use crate::config::{Config, OnStoreError, StoreKind};

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
    pub(super) routes: Vec<RouteLimits>,
    pub(super) local: Arc<LocalStore>,
    /// Present when the store is Redis (with `memory`, central policies decide locally).
    pub(super) central: Option<Arc<CentralSite>>,
    /// Leased keys' books and their coordinator (Redis with a Redis store, else in-process).
    pub(super) lease: Arc<LeaseSite>,
    /// `tollgate_cluster_nodes`: N of the L/N split.
    nodes_gauge: Gauge,
    /// Central denials remembered until their wait is over.
    pub(super) denied_until: Arc<DenyCache>,
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
        // One store for every site and membership: the fallback's debts are paid through
        // the central check script's `debit`.
        let store = match config.store.kind {
            StoreKind::Memory => None,
            _ => {
                let metrics = StoreMetrics::register(registry);
                let debit = redis::Script::new(CHECK_LUA);
                Some(Arc::new(RedisStore::new(
                    &config.store,
                    clock.clone(),
                    metrics,
                    debit,
                )?))
            }
        };
        let central = store.clone().map(|s| Arc::new(CentralSite::new(s)));
        let metrics = LimitMetrics::register(registry);
        let nodes_gauge = Gauge::default();
        nodes_gauge.set(i64::from(config.expected_nodes.get()));
        registry.register(
            "tollgate_cluster_nodes",
            "Gateways sharing the limits (N of the L/N split): membership, else expected_nodes",
            nodes_gauge.clone(),
        );
        let routes = config
            .routes
            .iter()
            .map(|r| RouteLimits::new(r, &policies, central.is_some(), &metrics))
            .collect();
        let lease = Arc::new(
            match store {
                Some(s) => LeaseSite::redis(s, clock.clone(), config.store.timeout),
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
            denied_until: Arc::new(DenyCache::new(
                DENY_CACHE_KEYS,
                super::clock::duration_to_nanos(config.store.timeout),
            )),
            unavailable_retry: super::clock::duration_to_nanos(config.store.breaker_cooldown),
            policies,
            routes,
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

    /// The store every site shares, when it is Redis (membership meets in it).
    pub fn store(&self) -> Option<&Arc<RedisStore>> {
        self.central.as_deref().map(CentralSite::store)
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
