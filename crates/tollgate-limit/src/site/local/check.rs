//! The local site's check step (see `check/mod.rs` for the walk): what this node can deny
//! before any store call (the central step asks it first), and the walk's last step, which
//! decides and spends the local state (local, split and gossip keys, this node's own owner
//! keys, the L/N fallback, local-first mirrors) under its shard locks, all or nothing with
//! what the earlier sites decided.

use std::ops::ControlFlow;

use crate::ask::{Ask, Decided, local_spends};
use crate::check::{Check, Stop};
use crate::site::local::{CheckItem, INLINE, Spends};
use crate::site::{DecisionSite, Sites};
use crate::spec::Site;

/// The local site's step (its state: `Sites::local`). Never waits: a request whose asks are
/// all decided here skips the walk and runs [`Check::local`] alone.
#[derive(Default)]
pub struct LocalStep;

impl DecisionSite for LocalStep {
    fn waits(&self, _: &Sites, _: &Ask) -> bool {
        false
    }

    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
        check.local();
        ControlFlow::Continue(())
    }
}
use crate::spec::Mode;

/// One entry per local ask of a request, inline as the local site's results are.
type Asked<T> = smallvec::SmallVec<[T; INLINE]>;

/// One item of step 4: which ask it answers, and whether it mirrors a central spend.
struct LocalAsk {
    ask: usize,
    mirror: bool,
}

impl Check<'_> {
    /// Before the central call: the denied-until cache and the local states that decide
    /// without the store. Nothing is spent here.
    pub(crate) fn without_store(&mut self) {
        let l = self.sites;
        let now = l.local.now();
        for ask in self.asks.iter_mut() {
            if ask.entry.site == Site::Central
                && ask.enforcing()
                && let Some((left, reset_after)) = l.denied_until.denied_for(&ask.key, now)
            {
                ask.decided = Some(Decided::denied(left, 0, reset_after));
            }
        }
        if self.blocked() {
            return;
        }
        let idx: Vec<usize> = (0..self.asks.len())
            .filter(|&i| self.asks[i].entry.has_local_state())
            .collect();
        if idx.is_empty() {
            return;
        }
        let items: Vec<CheckItem> = idx
            .iter()
            .map(|&i| self.check_item(&self.asks[i], self.asks[i].entry.site == Site::Split))
            .collect();
        let results = l
            .local
            .check(&items, |ds| Spends::from_elem(false, ds.len()));
        for (&i, r) in idx.iter().zip(&results) {
            let ask = &mut self.asks[i];
            if ask.enforcing() && !r.decision.verdict.admits() {
                ask.decided = Some(Decided::from_local(r));
            }
        }
    }

    /// Step 4: local and split policies, stored ones on the L/N fallback, and local-first
    /// mirrors of central policies the store admitted, decided and spent all or nothing
    /// with what the store already decided.
    pub(crate) fn local(&mut self) {
        // Inline for a route's usual handful of policies: four vectors a request, each an
        // allocation, were a fifth of this step's instructions (callgrind, one local GCRA).
        // Each item borrows its ask's key (moved, given back below): a copy of it was an
        // allocation and a free a request.
        let (who, items): (Asked<LocalAsk>, Asked<CheckItem>) = self
            .asks
            .iter_mut()
            .enumerate()
            .filter_map(|(i, ask)| {
                let (mirror, split) = match ask.entry.site {
                    Site::Local | Site::Gossip => (false, false),
                    Site::Split => (false, true),
                    _ if ask.fallback => (false, true),
                    // This node owns it (the owner step decided every remote one).
                    Site::Owner if ask.decided.is_none() => (false, false),
                    Site::Central
                        if ask.entry.local_first && ask.decided.is_some_and(|d| d.committed) =>
                    {
                        (true, false)
                    }
                    _ => return None,
                };
                let mut item = item_of(ask, split, String::new());
                std::mem::swap(&mut item.key, &mut ask.key);
                Some((LocalAsk { ask: i, mirror }, item))
            })
            .unzip();
        if items.is_empty() {
            return;
        }
        let outside_enforce_ok = !self.blocked();
        let outside_all_ok = self
            .asks
            .iter()
            .all(|a| a.decided.is_none_or(|d| d.admitted()));
        let modes: Asked<Mode> = who.iter().map(|w| self.asks[w.ask].entry.mode).collect();
        let mirror: Asked<bool> = who.iter().map(|w| w.mirror).collect();
        let results = self.sites.local.check(&items, |ds| {
            local_spends(ds, &modes, &mirror, outside_enforce_ok, outside_all_ok)
        });
        for ((w, mut item), r) in who.iter().zip(items).zip(&results) {
            let policy = &self.sites.policies[item.policy];
            let ask = &mut self.asks[w.ask];
            if r.committed
                && ask.entry.site == Site::Gossip
                && let Some(fleet) = &self.sites.fleet
            {
                fleet.record(&policy.name, item.headroom.get(), &item.key, item.cost);
            }
            if !w.mirror {
                ask.decided = Some(Decided::from_local(r));
            }
            if r.committed && policy.algorithm(item.headroom).is_concurrency() {
                ask.key.clone_from(&item.key);
                self.held.push(item);
            } else {
                std::mem::swap(&mut ask.key, &mut item.key);
            }
        }
    }

    /// `ask` as the local site sees it; `split`: decide at L/N.
    pub(crate) fn check_item(&self, ask: &Ask, split: bool) -> CheckItem {
        item_of(ask, split, ask.key.clone())
    }
}

/// `ask` as the local site sees it, under `key`; `split`: decide at L/N.
fn item_of(ask: &Ask, split: bool, key: String) -> CheckItem {
    CheckItem {
        policy: ask.entry.policy,
        headroom: ask.headroom,
        key,
        cost: ask.cost,
        fallback: split,
    }
}
