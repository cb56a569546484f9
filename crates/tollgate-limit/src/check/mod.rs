//! The limit step (step 4 of the gateway's request path): one request's policies through
//! the caches and sites, all or nothing, in five steps of its own, numbered and named the
//! same in ARCHITECTURE.md ("Inside `limit/`"). Steps 2–4 walk the decision sites in the
//! order `site::WALK` lists them, each a [`DecisionSite`] whose step is in its folder:
//!
//! 1. **asks** — one [`Ask`] per applicable policy (a policy whose key part is missing is
//!    skipped; a needed header stated ambiguously refuses the request, see
//!    `keys::Ambiguous`);
//! 2. **lease** — leased keys spend cells this node already holds (a key with none waits
//!    for one coordinator call; see `lease/`) — `site/lease/check.rs`;
//! 3. **without the store** — a central key remembered as denied, or a local state that
//!    already denies (a local or split policy, or the node-local state in front of a
//!    `local_first` central policy), denies the request at once: no store call, nothing
//!    spent — `site/local/check.rs`; then **central** — one script call decides and spends
//!    every central key (or the route's `on_store_error` decides when the store cannot, for
//!    leased keys too: `check/store.rs`) — `site/central/check.rs`; then **owner** — owner
//!    keys another node owns are asked of their owners (or `on_store_error` decides when one
//!    cannot answer) — `site/fleet/owner_check.rs`;
//! 4. **local** — (a stale gossip view first hears the peers' counts of its gossip keys:
//!    `site/fleet/gossip_check.rs`) local, split and gossip keys (and the store-outage L/N
//!    fallback, and the local-first mirrors) are decided and spent under their shard locks —
//!    `site/local/check.rs`;
//! 5. **the end** ([`Check::end`]) — each site's [`DecisionSite::end`] applies the
//!    all-or-nothing rule (`ask::keeps`) to what it spent: a denied request gives everything
//!    back, a shadow policy that would deny gives back the shadow spends; an admitted one
//!    remembers the central keys it left empty (`site/central/empty.rs`) and owes the store
//!    what the fallback spent (`check/store.rs`, `store/debts.rs`); then `check/report.rs`
//!    turns the asks into the request's `Admission`, counted and logged.
//!
//! Why the local-first state can only deny what the store would deny too: it spends only
//! when the store admitted, so it counts a subset of what the store counted (this node's
//! admitted requests), and every algorithm here is monotone — fewer spends never deny more.

mod report;
mod store;

use std::num::NonZeroU64;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::admission::{Admission, Admitted, Answer};
use crate::ask::Ask;
use crate::check::report::Reported;
use crate::permit::Permits;
use crate::route_limits::RouteLimits;
use crate::site::central::CentralItem;
use crate::site::local::CheckItem;
use crate::site::{DecisionSite, End, Sites, WALK};

/// One request's walk through the limit step.
pub(crate) struct Check<'a> {
    pub sites: &'a Sites,
    pub route: &'a RouteLimits,
    pub route_name: &'a Arc<str>,
    pub asks: Vec<Ask>,
    /// Local concurrency cells step 4 spent: released when the response ends.
    pub held: Vec<CheckItem>,
    /// The request's one deadline on the store, set when it first reaches the store: the
    /// lease step and the central step share the `[store] timeout` (`check/store.rs`).
    pub store_deadline: Option<tokio::time::Instant>,
}

/// Why a walk stopped before step 4.
pub(crate) enum Stop {
    /// An enforcing policy denied: the end decides the rest.
    Denied,
    /// The store failed and the route fails closed: answer this (503). Boxed: the walk's
    /// every step returns a `ControlFlow<Stop>`, which stays small for the usual case.
    Refused(Box<Admission>),
}

impl Check<'_> {
    /// Steps 2–4: every site of [`WALK`] in its order, stopping early when an enforcing
    /// policy denies or the store refuses. Not an `async fn`: the list's own future is the
    /// walk's, not moved into one more (each `.await` moves the callee's future into the
    /// caller's, see `benches/future_sizes.sh`).
    pub(crate) fn walk(&mut self) -> impl Future<Output = ControlFlow<Stop>> + '_ {
        WALK.decide(self)
    }

    /// [`Check::walk`] through `sites` (a test walks a site of its own in front of them).
    #[cfg(test)]
    pub(crate) async fn walk_with<S: DecisionSite>(&mut self, sites: &S) -> ControlFlow<Stop> {
        sites.decide(self).await
    }

    /// Whether [`Check::walk`] may wait on anything: only a lease, central, owner or
    /// gossip key can (and a central one only with a store: without one its policies are
    /// local; see each site's [`DecisionSite::waits`]). Without one, the walk is
    /// [`Check::local`] alone.
    pub(crate) fn waits(&self) -> bool {
        self.asks.iter().any(|a| WALK.waits(self.sites, a))
    }

    /// An enforcing policy denied.
    pub fn blocked(&self) -> bool {
        self.asks.iter().any(Ask::blocks)
    }

    /// Continue unless an enforcing policy denied.
    pub fn go_on(&self) -> ControlFlow<Stop> {
        match self.blocked() {
            true => ControlFlow::Break(Stop::Denied),
            false => ControlFlow::Continue(()),
        }
    }

    /// Step 5 after [`Check::walk`]: see [`Check::end_with`].
    pub(crate) fn end(self) -> Admission {
        self.end_with(&WALK)
    }

    /// Step 5: what each of `sites` spent is kept or given back by its
    /// [`DecisionSite::end`]; an admitted request holds its concurrency cells until the
    /// response ends.
    pub(crate) fn end_with<S: DecisionSite>(mut self, sites: &S) -> Admission {
        let enforce_ok = !self.blocked();
        let all_ok = self
            .asks
            .iter()
            .all(|a| a.decided.is_none_or(|d| d.admitted()));
        let counted = self.counted(enforce_ok, all_ok);
        let mut end = End {
            enforce_ok,
            all_ok,
            central_held: Vec::new(),
        };
        sites.end(&mut self, &mut end);
        let held = std::mem::take(&mut self.held);
        let permits = if enforce_ok {
            self.permits(held, end.central_held)
        } else {
            // Released now (a denied request holds nothing).
            drop(self.permits(held, Vec::new()));
            Permits::default()
        };
        let Reported {
            report,
            delay,
            decision,
            admitted_as,
        } = self.report();
        // The deciding ask is an enforcing denial exactly when an enforcing policy denied.
        debug_assert_eq!(admitted_as.is_some(), enforce_ok);
        let answer = match admitted_as {
            Some(how) => Answer::Admit(Admitted {
                report,
                delay: NonZeroU64::new(delay),
                permits,
                counted,
                how,
            }),
            None => Answer::Deny { report },
        };
        Admission::new(answer, decision)
    }

    /// The store refused the request (fails closed): every site gives back what it spent
    /// (leased cells, owners' reservations).
    pub(crate) fn give_back_all(&mut self) {
        WALK.give_back_all(self);
    }

    fn permits(&self, local: Vec<CheckItem>, central: Vec<CentralItem>) -> Permits {
        // The usual request holds nothing: no store's reference count taken and dropped.
        if local.is_empty() && central.is_empty() {
            return Permits::default();
        }
        let permits = Permits::new(self.sites.local.clone(), local);
        match &self.sites.central {
            Some(site) => permits.with_central(site.clone(), central),
            None => permits,
        }
    }
}
