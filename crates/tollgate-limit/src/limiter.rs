//! The limiter: every route's policies, the sites that decide them, and the caches in front.
//! [`Limiter::check`] (in `check/`) is the limit step of the request path.

use std::num::NonZeroU32;
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::algorithm::QuotaError;
use super::carry::{PolicyCarry, describe, refusal};
use super::clock::Clock;
use super::deny_cache::DenyCache;
use super::keys::KeyBuilder;
use super::metrics::{LimitMetrics, PolicyGauges};
use super::policy::PolicyRuntime;
use super::route_limits::RouteLimits;
use super::site::central::{CHECK_LUA, CentralSite};
use super::site::fleet::{FleetSite, fingerprint};
use super::site::lease::LeaseSite;
use super::site::local::LocalStore;
use super::site::{Logs, Sites};
use super::store::RedisStore;
use super::store::metrics::StoreMetrics;
use super::tiers::TierTable;
use super::top::{Seed, TopKeys};

mod asks;
mod decide;
mod given;
mod nodes;
mod status;
use crate::spec::{Exempt, LimiterSpec, StoreKind};
pub use decide::{At, Checked};
pub use given::{KeyAsk, KeyAskError, KeyResult, Keyed};
pub use status::{DecisionTotals, FleetView};

/// Why the limiter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error(transparent)]
    Quota(#[from] QuotaError),
    #[error("store: {0}")]
    Store(#[from] redis::RedisError),
    /// A reload asks for what this limiter cannot carry without a fresh budget.
    #[error("{0}")]
    Refused(String),
    /// A spec the limiter cannot run as written (`limiter/given.rs`).
    #[error("{0}")]
    Spec(String),
}

/// Rate-limits every route's requests.
pub struct Limiter {
    keys: KeyBuilder,
    /// For each route (config order).
    routes: Vec<RouteLimits>,
    /// What each check decides with.
    sites: Sites,
    /// `tollgate_cluster_nodes`: N of the L/N split, shared by every limiter of the process
    /// (a reloaded one starts at it). Who may change it, and when, is the
    /// [`LimiterHandle`](crate::LimiterHandle)'s business.
    nodes_gauge: Gauge,
    /// The decision counters, registered once: a reloaded limiter counts on them too.
    metrics: LimitMetrics,
    /// The per-policy series, registered once (a reload takes its policies' handles).
    gauges: Arc<PolicyGauges>,
    /// Per policy: the clients it never applies to (`[exempt]` and its own).
    exempt: Vec<Exempt>,
    /// Which variant of a tiered policy each request is asked under.
    tiers: TierTable,
}

/// Keys remembered as denied, across policies.
const DENY_CACHE_KEYS: usize = 100_000;

impl Limiter {
    pub fn new(
        spec: impl Into<LimiterSpec>,
        clock: Arc<dyn Clock>,
        registry: &mut Registry,
    ) -> Result<Self, LimiterError> {
        let spec = &spec.into();
        given::check_spec(spec)?;
        let keys = KeyBuilder::new(&spec.ip_keys, spec.account.clone());
        let policies = build_policies(spec, &keys, spec.expected_nodes)?;
        let names: Vec<Arc<str>> = policies.iter().map(|p| p.name.clone()).collect();
        let gauges = Arc::new(PolicyGauges::register(registry, &names));
        // One store for every site and membership: the fallback's debts are paid through
        // the central check script's `debit`.
        let store = match spec.store.kind {
            StoreKind::Memory => None,
            _ => {
                let metrics = StoreMetrics::register(registry);
                let debit = redis::Script::new(CHECK_LUA);
                Some(Arc::new(RedisStore::new(
                    &spec.store,
                    clock.clone(),
                    metrics,
                    debit,
                )?))
            }
        };
        let central = store.clone().map(|s| Arc::new(CentralSite::new(s)));
        let metrics = LimitMetrics::register(registry);
        let nodes_gauge = Gauge::default();
        nodes_gauge.set(i64::from(spec.expected_nodes.get()));
        registry.register(
            "tollgate_cluster_nodes",
            "Gateways sharing the limits (N of the L/N split): membership, else expected_nodes",
            nodes_gauge.clone(),
        );
        let lease = Arc::new(
            match store {
                Some(s) => LeaseSite::redis(s, clock.clone(), spec.store.timeout),
                None => LeaseSite::memory(clock.clone()),
            }
            .with_gauges(gauges.clone()),
        );
        let top = Seed::new(clock.clone());
        let local = Arc::new(LocalStore::new(policies.clone(), clock, gauges.clone()));
        let fleet = FleetSite::new(
            &spec.cluster,
            spec.store.timeout,
            local.clone(),
            policies.clone(),
            registry,
        );
        let parts = Parts {
            policies,
            local,
            central,
            lease,
            fleet,
            top,
        };
        Ok(Self::assemble(
            spec,
            keys,
            parts,
            nodes_gauge,
            metrics,
            gauges,
        ))
    }

    /// The limiter of a reloaded `config` (validated, with this one's `[store]` and
    /// `[cluster]`): the same store, fleet and metrics, this node's current N, and each
    /// kept policy's very state (`local/reload.rs` says what changed policies keep). The
    /// fleet answers peers from the new policies at once. The caller swaps the result in:
    /// [`LimiterHandle::reload`](crate::LimiterHandle::reload) does, in step with N.
    pub fn reload(
        &self,
        spec: impl Into<LimiterSpec>,
    ) -> Result<(Limiter, Vec<PolicyCarry>), LimiterError> {
        let spec = &spec.into();
        given::check_spec(spec)?;
        let keys = KeyBuilder::new(&spec.ip_keys, spec.account.clone());
        let store = self.sites.central.is_some();
        for new in spec.policies.iter().chain(spec.tiers.variants()) {
            let old = self.sites.policies.iter().find(|o| *o.name == *new.name);
            if let Some(why) = refusal(old.map(|o| &o.spec), new, store) {
                return Err(LimiterError::Refused(why));
            }
        }
        let policies = build_policies(spec, &keys, self.nodes())?;
        let names: Vec<Arc<str>> = policies.iter().map(|p| p.name.clone()).collect();
        let gauges = Arc::new(self.gauges.renamed(&names));
        let rekeyed = |p: &PolicyRuntime| self.keys.rekeys(&keys, &p.key);
        let (local, carried) = self
            .sites
            .local
            .reload(policies.clone(), gauges.clone(), &rekeyed);
        let local = Arc::new(local);
        let lease = Arc::new(self.sites.lease.reloaded().with_gauges(gauges.clone()));
        let fleet = self.sites.fleet.clone();
        if let Some(f) = &fleet {
            f.rebind(local.clone(), policies.clone());
        }
        let report = names
            .into_iter()
            .zip(carried)
            .zip(&spec.policies)
            .map(|((policy, local), new)| {
                let old = self.sites.policies.iter().find(|o| o.name == policy);
                let rekeyed = old.is_some_and(|o| self.keys.rekeys(&keys, &o.key));
                let state = describe(old.map(|o| &o.spec), new, local, store, rekeyed);
                PolicyCarry { policy, state }
            })
            .collect();
        let parts = Parts {
            policies,
            local,
            central: self.sites.central.clone(),
            lease,
            fleet,
            top: self.sites.top.seed(),
        };
        let (metrics, gauge) = (self.metrics.clone(), self.nodes_gauge.clone());
        let limiter = Self::assemble(spec, keys, parts, gauge, metrics, gauges);
        Ok((limiter, report))
    }

    fn assemble(
        spec: &LimiterSpec,
        keys: KeyBuilder,
        parts: Parts,
        nodes_gauge: Gauge,
        metrics: LimitMetrics,
        gauges: Arc<PolicyGauges>,
    ) -> Limiter {
        let Parts {
            policies,
            local,
            central,
            lease,
            fleet,
            top,
        } = parts;
        let routes: Vec<RouteLimits> = spec
            .routes
            .iter()
            .map(|r| RouteLimits::new(r, &policies, central.is_some(), &metrics))
            .collect();
        let shadow = |i| routes.iter().any(|r| r.runs_in_shadow(i));
        let sites = Sites {
            top: TopKeys::new(top, &policies, shadow),
            logs: Logs::new(policies.len()),
            specs: policies.iter().map(|p| fingerprint(&p.spec)).collect(),
            local,
            fleet,
            lease,
            central,
            denied_until: Arc::new(DenyCache::new(
                DENY_CACHE_KEYS,
                super::clock::duration_to_nanos(spec.store.timeout),
            )),
            unavailable_retry: super::clock::duration_to_nanos(spec.store.breaker_cooldown),
            policies,
        };
        let exempt = spec
            .policies
            .iter()
            .map(|p| spec.exempt.for_policy(&p.name))
            .collect();
        Limiter {
            keys,
            routes,
            sites,
            nodes_gauge,
            metrics,
            gauges,
            exempt,
            tiers: TierTable::new(spec).0,
        }
    }

    /// Make this thread's store connection and load the scripts before the first request
    /// (`RedisStore::warm`): call it on every thread that will decide (each worker has its
    /// own connection) before saying ready. Waits at most the store's connect timeout;
    /// `Ok` without a store.
    pub async fn warm(&self) -> Result<(), crate::store::StoreError> {
        let Some(store) = self.store() else {
            return Ok(());
        };
        let scripts = [
            redis::Script::new(CHECK_LUA),
            redis::Script::new(crate::site::lease::LEASE_LUA),
            redis::Script::new(crate::membership::MEMBERSHIP_LUA),
        ];
        let within = store.timeout().max(crate::store::CONNECT_TIMEOUT);
        store.warm(&scripts, within).await
    }

    /// The local site, for tests and benches (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn local(&self) -> &Arc<LocalStore> {
        &self.sites.local
    }

    /// The central site, when the store is Redis: for tests (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn central(&self) -> Option<&Arc<CentralSite>> {
        self.sites.central.as_ref()
    }

    /// The store every site shares, when it is Redis (membership meets in it).
    pub fn store(&self) -> Option<&Arc<RedisStore>> {
        self.sites.central.as_deref().map(CentralSite::store)
    }

    /// The owner and gossip sites' fleet, when `[cluster] peer_listen` is set.
    pub fn fleet(&self) -> Option<&Arc<FleetSite>> {
        self.sites.fleet.as_ref()
    }

    /// The lease site: for tests (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn lease(&self) -> &Arc<LeaseSite> {
        &self.sites.lease
    }

    /// Index of a policy by name.
    pub fn policy_index(&self, name: &str) -> Option<usize> {
        self.sites.policies.iter().position(|p| &*p.name == name)
    }

    /// Which variant of a tiered policy a request is asked under (the admin API asks too).
    pub(super) fn tiers(&self) -> &TierTable {
        &self.tiers
    }

    /// What every check decides with (the admin API reads keys through it).
    pub(super) fn sites(&self) -> &Sites {
        &self.sites
    }

    /// How requests become keys.
    pub(super) fn keys(&self) -> &KeyBuilder {
        &self.keys
    }

    /// The header accounts are read from, when `[account]` is set.
    pub(super) fn account_header(&self) -> Option<&http::HeaderName> {
        self.keys.account_header()
    }

    /// Keys currently remembered as denied.
    pub fn denied_keys(&self) -> usize {
        self.sites.denied_until.len()
    }
}

/// The sites a limiter is assembled from (fresh at start, carried over by a reload).
struct Parts {
    policies: Arc<[PolicyRuntime]>,
    local: Arc<LocalStore>,
    central: Option<Arc<CentralSite>>,
    lease: Arc<LeaseSite>,
    fleet: Option<Arc<FleetSite>>,
    top: Seed,
}

/// Every policy of `config` at `nodes` gateways, then the variants of its tiered ones.
fn build_policies(
    spec: &LimiterSpec,
    keys: &KeyBuilder,
    nodes: NonZeroU32,
) -> Result<Arc<[PolicyRuntime]>, QuotaError> {
    let headrooms = keys.headrooms();
    let (_, variants) = TierTable::new(spec);
    Ok(spec
        .policies
        .iter()
        .chain(&variants)
        .enumerate()
        .map(|(i, p)| PolicyRuntime::with_nodes(i, p, &headrooms, nodes))
        .collect::<Result<Vec<_>, _>>()?
        .into())
}

#[cfg(test)]
impl Limiter {
    /// A `GET` of route `route` from `client`, walked through `sites` instead of
    /// `site::WALK`: how a test walks a decision site of its own (`site/tests.rs`).
    pub(crate) async fn check_through<S: crate::site::DecisionSite>(
        &self,
        route: usize,
        client: std::net::IpAddr,
        sites: &S,
    ) -> crate::admission::Admission {
        use crate::check::{Check, Stop};
        let limits = &self.routes[route];
        let (method, headers) = (http::Method::GET, http::HeaderMap::new());
        let target = crate::keys::Target::default();
        let facts = self
            .keys
            .facts(client, &limits.name, &method, target, &headers);
        let Ok(asked) = self.asks(limits, client, &facts) else {
            panic!("the test's requests are not refused before their asks");
        };
        let mut check = Check {
            sites: &self.sites,
            route: limits,
            route_name: &limits.name,
            asks: asked.asks,
            held: Vec::new(),
            store_deadline: None,
        };
        match check.walk_with(sites).await {
            std::ops::ControlFlow::Break(Stop::Refused(refused)) => *refused,
            _ => check.end_with(sites),
        }
    }
}
