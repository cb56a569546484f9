//! The owner site's check step (step 3 of the walk in `check/mod.rs`, after the central one): the request's owner keys
//! that another node owns are asked of their owners, one message per owner (coalesced with
//! other requests' asks by the transport); the keys this node owns are decided in the local
//! step, in the same state its peers' asks reach. An owner that admits has spent: the end
//! gives it back if the request ends denied (all or nothing across owners, as across the
//! slot groups of a Redis Cluster). An owner that cannot answer within the store `timeout`
//! is a store failure: the route's `on_store_error` decides.

use std::net::SocketAddr;
use std::ops::ControlFlow;

use futures_util::future::join_all;

use crate::ask::{Ask, Decided, Spent};
use crate::check::{Check, Stop};
use crate::site::fleet::{FleetSite, KeyItem, OwnerReply};
use crate::site::{DecisionSite, End, Sites};
use crate::spec::Site;

/// The owner site's step (its state: `Sites::fleet`, with `[cluster] peer_listen`).
#[derive(Default)]
pub struct OwnerStep;

impl DecisionSite for OwnerStep {
    /// An owner key may be another node's (which node owns it is known only in the walk).
    fn waits(&self, _: &Sites, ask: &Ask) -> bool {
        ask.entry.site == Site::Owner
    }

    /// Ask every remote owner at once; a denial remembered from an earlier answer stops the
    /// request before any call.
    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
        // Most requests have no owner key: they pay one scan of their asks, nothing more.
        if !check.asks.iter().any(|a| a.entry.site == Site::Owner) {
            return ControlFlow::Continue(());
        }
        let Some(fleet) = check.sites.fleet.clone() else {
            return ControlFlow::Continue(());
        };
        let now = check.sites.local.now();
        // Before owners are picked: a stall found here quarantines this node (its keys go
        // to their interim owners), and a hand-back window is seen (`fleet/rejoin.rs`).
        let handing_back = fleet.owner_view(now);
        let groups = check.remote_owners(fleet.ring.me(), now, |key| fleet.ring.owner(key));
        let spec = |policy: usize| check.sites.specs[policy];
        check.go_on()?;
        let (back_idx, back_items) = match handing_back {
            Some(epoch) => check.hand_back_items(&fleet, epoch),
            None => (Vec::new(), Vec::new()),
        };
        if groups.is_empty() && back_items.is_empty() {
            return ControlFlow::Continue(());
        }
        let items: Vec<Vec<KeyItem>> = groups
            .iter()
            .map(|(_, idx)| {
                idx.iter()
                    .map(|&i| check.key_item(&check.asks[i], spec(check.asks[i].entry.policy)))
                    .collect()
            })
            .collect();
        // Read before the calls: a remembered denial errs early, never late.
        let sent = check.sites.local.now();
        // The hand-back runs beside the asks, so a request waits one call timeout at most.
        let back = async {
            match (handing_back, back_items.is_empty()) {
                (Some(epoch), false) => fleet.hand_back(epoch, &back_items).await,
                _ => Vec::new(),
            }
        };
        let asks = join_all(
            groups
                .iter()
                .zip(&items)
                .map(|((owner, _), items)| fleet.ask(*owner, items)),
        );
        let (heard, answers) =
            crate::store_time::timed(futures_util::future::join(back, asks)).await;
        for (i, count) in back_idx.into_iter().zip(heard) {
            if let Some(Some(target)) = count {
                let local = check.check_item(&check.asks[i], false);
                check.sites.local.catch_up(&local, target);
            }
        }
        let now = check.sites.local.now();
        let mut failures = Vec::new();
        for (((owner, idx), items), answer) in groups.into_iter().zip(items).zip(answers) {
            let answers = match answer {
                Ok(answers) => answers,
                Err(e) => {
                    failures.push((e, idx));
                    continue;
                }
            };
            for ((i, item), a) in idx.into_iter().zip(items).zip(answers) {
                let ask = &mut check.asks[i];
                let d = Decided::from_owner(a);
                if let OwnerReply::Denied {
                    retry_after,
                    reset_after,
                    ..
                } = a
                    && ask.enforcing()
                    && ask.cheapest
                {
                    let until = sent.saturating_add(retry_after);
                    let full_at = sent.saturating_add(reset_after);
                    check
                        .sites
                        .denied_until
                        .deny(&ask.key, until, full_at, now, sent);
                }
                if d.committed {
                    ask.spent = Spent::Owner(owner, item);
                }
                ask.decided = Some(d);
            }
        }
        for (e, idx) in failures {
            check.store_failed(&e, e.kind(), &idx)?;
        }
        check.go_on()
    }

    /// A reservation the request does not keep is given back at its owner.
    fn end(&self, check: &mut Check<'_>, end: &mut End) {
        let refunds = check
            .asks
            .iter_mut()
            .filter(|a| !end.keeps(a))
            .filter_map(|a| take_owner(&mut a.spent))
            .collect();
        check.refund_owners(refunds);
    }

    fn give_back_all(&self, check: &mut Check<'_>) {
        let refunds = check
            .asks
            .iter_mut()
            .filter_map(|a| take_owner(&mut a.spent))
            .collect();
        check.refund_owners(refunds);
    }
}

/// `spent`'s owner reservation, taken out of it (any other spend stays).
fn take_owner(spent: &mut Spent) -> Option<(SocketAddr, KeyItem)> {
    // Looked at before it is moved: most asks spent nothing there.
    if !matches!(spent, Spent::Owner(..)) {
        return None;
    }
    match std::mem::take(spent) {
        Spent::Owner(owner, item) => Some((owner, item)),
        other => {
            *spent = other;
            None
        }
    }
}

impl Check<'_> {
    /// The owner asks that another node owns, grouped by owner; enforcing ones this node
    /// remembers as denied are decided here instead.
    fn remote_owners(
        &mut self,
        me: SocketAddr,
        now: crate::clock::Nanos,
        owner_of: impl Fn(&str) -> SocketAddr,
    ) -> Vec<(SocketAddr, Vec<usize>)> {
        let cache = &self.sites.denied_until;
        let mut groups: Vec<(SocketAddr, Vec<usize>)> = Vec::new();
        for (i, ask) in self.asks.iter_mut().enumerate() {
            if ask.entry.site != Site::Owner {
                continue;
            }
            let owner = owner_of(&ask.key);
            if owner == me {
                continue;
            }
            if ask.enforcing()
                && let Some((left, reset_after)) = cache.denied_for(&ask.key, now)
            {
                ask.decided = Some(Decided::denied(left, 0, reset_after));
                continue;
            }
            match groups.iter_mut().find(|(o, _)| *o == owner) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((owner, vec![i])),
            }
        }
        groups
    }

    /// In a hand-back window (`fleet/rejoin.rs`): the owner keys this node decides that it
    /// has not taken up since the window opened, as items to ask their interim owner's count
    /// of (this node then spends what it lacks of it; never a denial by itself).
    fn hand_back_items(
        &self,
        fleet: &FleetSite,
        epoch: crate::clock::Nanos,
    ) -> (Vec<usize>, Vec<KeyItem>) {
        let me = fleet.ring.me();
        (0..self.asks.len())
            .filter(|&i| {
                let ask = &self.asks[i];
                let name = &self.sites.policies[ask.entry.policy].name;
                ask.entry.site == Site::Owner
                    && ask.decided.is_none()
                    && fleet.ring.owner(&ask.key) == me
                    && !fleet.handed_back(epoch, name, ask.headroom.get(), &ask.key)
            })
            .map(|i| {
                let spec = self.sites.specs[self.asks[i].entry.policy];
                let mut item = self.key_item(&self.asks[i], spec);
                item.cost = 0;
                (i, item)
            })
            .unzip()
    }

    fn key_item(&self, ask: &Ask, spec: u64) -> KeyItem {
        let policy = &self.sites.policies[ask.entry.policy];
        KeyItem {
            policy: policy.name.clone(),
            spec,
            headroom: ask.headroom.get(),
            cost: ask.cost,
            key: ask.key.clone(),
        }
    }

    /// Give back owner reservations at their owners, in the background; this node forgets
    /// what it remembered of those keys (the refund moves them back).
    fn refund_owners(&self, refunds: Vec<(SocketAddr, KeyItem)>) {
        let Some(fleet) = self.sites.fleet.as_ref().filter(|_| !refunds.is_empty()) else {
            return;
        };
        refunds
            .iter()
            .for_each(|(_, item)| self.sites.denied_until.forget(&item.key));
        fleet.refund(refunds);
    }
}
