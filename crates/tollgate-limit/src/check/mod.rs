//! The limit step (step 4 of the gateway's request path): one request's policies through
//! the caches and sites, all or nothing, in five steps of its own, numbered and named the
//! same in ARCHITECTURE.md ("Inside `limit/`"):
//!
//! 1. **asks** — one [`Ask`] per applicable policy (a policy whose key part is missing is
//!    skipped; a needed header stated ambiguously refuses the request, see
//!    `keys::Ambiguous`);
//! 2. **lease** — leased keys spend cells this node already holds (a key with none waits
//!    for one coordinator call; see `lease/`) — `check/store.rs`;
//! 3. **without the store** — a central key remembered as denied, or a local state that
//!    already denies (a local or split policy, or the node-local state in front of a
//!    `local_first` central policy), denies the request at once: no store call, nothing
//!    spent — `check/local.rs`; then **central** — one script call decides and spends every
//!    central key (or the route's `on_store_error` decides when the store cannot, for
//!    leased keys too) — `check/store.rs`; then **owner** — owner keys another node owns
//!    are asked of their owners (or `on_store_error` decides when one cannot answer) —
//!    `check/peer.rs`;
//! 4. **local** — (a stale gossip view first hears the peers' counts of its gossip keys:
//!    `check/gossip.rs`) local, split and gossip keys (and the store-outage L/N fallback, and the
//!    local-first mirrors) are decided and spent under their shard locks — `check/local.rs`;
//! 5. **the end** ([`Check::end`]) — the all-or-nothing rule ([`keeps`]) over what the
//!    store and the lease books spent: a denied request gives everything back, a shadow
//!    policy that would deny gives back the shadow spends; an admitted one remembers the
//!    central keys it left empty (`check/cache.rs`) and owes the store what the fallback
//!    spent (`store/debts.rs`); then `check/report.rs` turns the asks into the request's
//!    `Admission`, counted and logged.
//!
//! Why the local-first state can only deny what the store would deny too: it spends only
//! when the store admitted, so it counts a subset of what the store counted (this node's
//! admitted requests), and every algorithm here is monotone — fewer spends never deny more.

mod cache;
mod gossip;
mod local;
mod peer;
mod report;
mod store;

use std::num::NonZeroU64;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::admission::{Admission, Admitted, Answer};
use crate::ask::{Ask, Spent, keeps};
use crate::check::report::Reported;
use crate::permit::Permits;
use crate::route_limits::RouteLimits;
use crate::site::Sites;
use crate::site::central::CentralItem;
use crate::site::lease::LeaseItem;
use crate::site::local::CheckItem;
use crate::spec::Site;

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
    /// Steps 2–4, stopping early when an enforcing policy denies or the store refuses.
    pub(crate) async fn walk(&mut self) -> ControlFlow<Stop> {
        self.lease().await?;
        self.central().await?;
        self.owner().await?;
        self.gossip().await;
        self.local();
        ControlFlow::Continue(())
    }

    /// Whether [`Check::walk`] may wait on anything: only a lease, central, owner or
    /// gossip key can (each step above returns at once without one of its own, and the
    /// central step without a store: its policies are then local). Without one, the walk
    /// is [`Check::local`] alone.
    pub(crate) fn waits(&self) -> bool {
        self.asks.iter().any(|a| match a.entry.site {
            Site::Local | Site::Split => false,
            Site::Central => self.sites.central.is_some(),
            Site::Lease | Site::Owner | Site::Gossip => true,
        })
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

    /// Step 5: what the store and the lease books spent is kept or given back by
    /// [`keeps`]; an admitted request remembers the keys it left empty, owes what the
    /// fallback spent, and holds its concurrency cells until the response ends.
    pub(crate) fn end(mut self) -> Admission {
        let enforce_ok = !self.blocked();
        let all_ok = self
            .asks
            .iter()
            .all(|a| a.decided.is_none_or(|d| d.admitted()));
        let (mut refund, mut give_back, mut central_held) = (Vec::new(), Vec::new(), Vec::new());
        let mut owner_refund = Vec::new();
        let counted = self.counted(enforce_ok, all_ok);
        for ask in &mut self.asks {
            let keep = keeps(ask.entry.mode, enforce_ok, all_ok);
            match std::mem::take(&mut ask.spent) {
                Spent::Central(item) if keep => {
                    if self.sites.policies[ask.entry.policy]
                        .base()
                        .is_concurrency()
                    {
                        central_held.push(item);
                    }
                }
                // The refund moves the key back: what this node remembered is stale.
                Spent::Central(item) => refund.push((ask.key.clone(), item)),
                Spent::Lease(item) if !keep => give_back.push(item),
                Spent::Owner(owner, item) if !keep => owner_refund.push((owner, item)),
                Spent::Lease(_) | Spent::Owner(..) | Spent::Nothing => {}
            }
        }
        self.refund(refund);
        self.sites.lease.give_back(&give_back);
        self.refund_owners(owner_refund);
        let held = std::mem::take(&mut self.held);
        let permits = if enforce_ok {
            self.remember_empty();
            self.owe_fallback();
            self.permits(held, central_held)
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

    /// The store refused the request (fails closed): give back every leased cell and every
    /// owner's reservation.
    pub(crate) fn give_back_all(&mut self) {
        let owners = self.take_owner_spends();
        self.refund_owners(owners);
        let leased: Vec<LeaseItem> = self
            .asks
            .iter_mut()
            .filter_map(|a| match std::mem::take(&mut a.spent) {
                Spent::Lease(item) => Some(item),
                _ => None,
            })
            .collect();
        self.sites.lease.give_back(&leased);
    }

    /// Give back owner reservations at their owners, in the background; this node forgets
    /// what it remembered of those keys (the refund moves them back).
    fn refund_owners(&self, refunds: Vec<(std::net::SocketAddr, crate::site::fleet::KeyItem)>) {
        let Some(fleet) = self.sites.fleet.as_ref().filter(|_| !refunds.is_empty()) else {
            return;
        };
        refunds
            .iter()
            .for_each(|(_, item)| self.sites.denied_until.forget(&item.key));
        fleet.refund(refunds);
    }

    fn permits(&self, local: Vec<CheckItem>, central: Vec<CentralItem>) -> Permits {
        let permits = Permits::new(self.sites.local.clone(), local);
        match &self.sites.central {
            Some(site) => permits.with_central(site.clone(), central),
            None => permits,
        }
    }

    /// Give back central spends in the background; the deny cache forgets those keys when
    /// the refund starts and when it has landed (see `deny_cache`).
    fn refund(&self, refunds: Vec<(String, CentralItem)>) {
        let Some(site) = self.sites.central.clone().filter(|_| !refunds.is_empty()) else {
            return;
        };
        let (cache, local) = (self.sites.denied_until.clone(), self.sites.local.clone());
        let (keys, items): (Vec<String>, Vec<CentralItem>) = refunds.into_iter().unzip();
        let now = local.now();
        keys.iter().for_each(|k| cache.refunding(k, now));
        tokio::spawn(async move {
            site.refund(&items).await;
            let now = local.now();
            keys.iter().for_each(|k| cache.refunding(k, now));
        });
    }
}
