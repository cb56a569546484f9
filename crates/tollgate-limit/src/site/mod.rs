//! The decision sites: each folder holds one site's state and its check step, and the step
//! implements [`DecisionSite`]; [`WALK`] lists them in the order the limit step walks them
//! (`check/mod.rs`). Adding a site is its folder, one entry in [`WALK`] and its config name
//! (`spec::Site`); ARCHITECTURE.md, "Adding a decision site".
//!
//! Also the handles one limit check decides with ([`Sites`]): the policies, the decision
//! sites' state, the deny cache and the rate-limited logs. The limiter owns one; each
//! `Check` borrows it, so the check steps read exactly what they use and nothing else of
//! the limiter.

pub mod central;
pub mod fleet;
pub mod lease;
pub mod local;
#[cfg(test)]
mod tests;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{error, warn};

use crate::ask::{Ask, keeps};
use crate::check::{Check, Stop};
use crate::clock::Nanos;
use crate::deny_cache::DenyCache;
use crate::policy::PolicyRuntime;
use crate::site::central::{CentralItem, CentralSite, CentralStep};
use crate::site::fleet::{FleetSite, GossipStep, OwnerStep};
use crate::site::lease::{LeaseSite, LeaseStep};
use crate::site::local::{LocalStep, LocalStore};
use crate::spec::OnStoreError;

/// [`Walk`], the type, and [`WALK`], its one value, from one list.
macro_rules! walk {
    ($($step:ident),+ $(,)?) => {
        /// The decision sites in the order the limit step walks them: an earlier site's
        /// denial stops the walk before a later one spends (the lease and the store before
        /// the owners, all of them before the local step, which decides and spends all or
        /// nothing with what they decided, and so stays last).
        pub(crate) type Walk = ($($step,)+);

        /// The walk's sites: zero-sized steps, so `&WALK` is a `'static` borrow of nothing.
        pub(crate) const WALK: Walk = ($($step,)+);
    };
}

// A new site is one entry here.
walk!(LeaseStep, CentralStep, OwnerStep, GossipStep, LocalStep);

/// One decision site as the limit step walks it: a zero-sized step whose state is in
/// [`Sites`] (or, for a site a test adds, in the step itself). The walk is generic over a
/// fixed list ([`Walk`], a tuple): static dispatch, no box, no allocation of its own.
///
/// A site decides the request's asks of it together (one script call for every central
/// key, one message per owner), so each method sees the whole [`Check`].
pub(crate) trait DecisionSite {
    /// Whether `ask` is this site's and deciding it may wait (on the store, a lease
    /// coordinator, a peer). A request none of whose asks waits skips the walk: the local
    /// step alone decides it (`Check::local`), so say `false` only for asks this site
    /// leaves to that step.
    fn waits(&self, sites: &Sites, ask: &Ask) -> bool;

    /// Decide the request's asks of this site (those earlier sites left undecided), and
    /// record what it spent outside this node's local state in their `spent`. `Break`
    /// stops the walk: an enforcing policy denied ([`Check::go_on`]), or the store failed
    /// and the route fails closed.
    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop>;

    /// The end of a walk (`Check::end`): keep or give back what this site spent, by
    /// [`End::keeps`]; an admitted request's site also keeps what it learned (a key left
    /// empty) and owes what the fallback spent.
    fn end(&self, _check: &mut Check<'_>, _end: &mut End) {}

    /// The store refused the request (it fails closed): give back everything this site
    /// spent.
    fn give_back_all(&self, _check: &mut Check<'_>) {}
}

/// What a walk's end tells each site, and what they hand back for the request's permits.
pub(crate) struct End {
    /// No enforcing policy denied: the request is admitted.
    pub enforce_ok: bool,
    /// No policy at all, shadow ones included, denied.
    pub all_ok: bool,
    /// Central concurrency cells the admitted request holds until its response ends.
    pub central_held: Vec<CentralItem>,
}

impl End {
    /// Whether `ask`'s spend is kept (the all-or-nothing rule, [`keeps`]).
    pub fn keeps(&self, ask: &Ask) -> bool {
        keeps(ask.entry.mode, self.enforce_ok, self.all_ok)
    }
}

/// A list of sites is a site: each in turn, stopping at the first `Break`.
macro_rules! site_list {
    ($($s:ident . $i:tt),+) => {
        impl<$($s: DecisionSite),+> DecisionSite for ($($s,)+) {
            fn waits(&self, sites: &Sites, ask: &Ask) -> bool {
                $(self.$i.waits(sites, ask))||+
            }

            async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
                $(self.$i.decide(check).await?;)+
                ControlFlow::Continue(())
            }

            fn end(&self, check: &mut Check<'_>, end: &mut End) {
                $(self.$i.end(check, end);)+
            }

            fn give_back_all(&self, check: &mut Check<'_>) {
                $(self.$i.give_back_all(check);)+
            }
        }
    };
}

site_list!(A.0, B.1);
site_list!(A.0, B.1, C.2, D.3, E.4);

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
