//! The handles one limit check decides with ([`Sites`]): the policies, the decision sites,
//! the deny cache and the rate-limited logs. The limiter owns one; each `Check` borrows it,
//! so the check files read exactly what they use and nothing else of the limiter.

pub mod central;
pub mod fleet;
pub mod lease;
pub mod local;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{error, warn};

use crate::clock::Nanos;
use crate::deny_cache::DenyCache;
use crate::policy::PolicyRuntime;
use crate::site::central::CentralSite;
use crate::site::fleet::FleetSite;
use crate::site::lease::LeaseSite;
use crate::site::local::LocalStore;
use crate::spec::OnStoreError;

pub(crate) struct Sites {
    pub policies: Arc<[PolicyRuntime]>,
    /// Each policy's fingerprint (`fleet::fingerprint`), as owner asks carry it.
    pub specs: Arc<[u64]>,
    pub local: Arc<LocalStore>,
    /// Present when the store is Redis (with `memory`, central policies decide locally).
    pub central: Option<Arc<CentralSite>>,
    /// Leased keys' books and their coordinator (Redis with a Redis store, else in-process).
    pub lease: Arc<LeaseSite>,
    /// The peer transport's sites (owner, gossip), when `[cluster] peer_listen` is set.
    pub fleet: Option<Arc<FleetSite>>,
    /// Central and owner denials remembered until their wait is over.
    pub denied_until: Arc<DenyCache>,
    /// `Retry-After` of a fail-closed 503: the breaker's cooldown.
    pub unavailable_retry: Nanos,
    pub logs: Logs,
    /// Who is being denied: every decision is counted here (`top/`).
    pub top: crate::top::TopKeys,
}

/// Log lines an attack could otherwise flood: at most one a second each.
pub(crate) struct Logs {
    /// Per policy: last time (clock nanos) a shadow denial was logged.
    shadow_logged: Vec<AtomicU64>,
    /// Last time a store error was logged.
    store_error_logged: AtomicU64,
    /// Store errors not logged since that line.
    store_error_suppressed: AtomicU64,
}

const LOG_EVERY: Nanos = 1_000_000_000;

impl Logs {
    pub fn new(policies: usize) -> Self {
        Logs {
            shadow_logged: (0..policies).map(|_| AtomicU64::new(0)).collect(),
            store_error_logged: AtomicU64::new(0),
            store_error_suppressed: AtomicU64::new(0),
        }
    }
}

impl Sites {
    pub fn log_shadow_denial(&self, policy: &PolicyRuntime, route: &str, key: &str) {
        if once_a_second(&self.logs.shadow_logged[policy.index], self.local.now()) {
            warn!(policy = %policy.name, route, key, "shadow mode: would deny (logged at most once a second per policy; see tollgate_decisions_total)");
        }
    }

    /// A shadow `on_missing_key = "deny"` policy would have refused a request lacking
    /// `what` (at most once a second per policy, with the shadow denials).
    pub fn log_shadow_missing(&self, policy: &PolicyRuntime, route: &str, what: &str) {
        if once_a_second(&self.logs.shadow_logged[policy.index], self.local.now()) {
            warn!(policy = %policy.name, route, missing = what, "shadow mode: would refuse a request without this key part (logged at most once a second per policy; see tollgate_decisions_total)");
        }
    }

    pub fn log_store_error(
        &self,
        route: &str,
        err: &dyn std::fmt::Display,
        fallback: OnStoreError,
    ) {
        let logs = &self.logs;
        if once_a_second(&logs.store_error_logged, self.local.now()) {
            let suppressed = logs.store_error_suppressed.swap(0, Ordering::Relaxed);
            error!(route, error = %err, ?fallback, suppressed, "store unavailable; deciding without it (logged at most once a second; suppressed: errors since the last line)");
        } else {
            logs.store_error_suppressed.fetch_add(1, Ordering::Relaxed);
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
