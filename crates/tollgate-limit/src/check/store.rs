//! The limit step's store-backed parts (see `check/mod.rs` for the walk): the lease step, the
//! central step, what a route's `on_store_error` does when the store cannot answer (the
//! same for central and leased keys), and what the L/N fallback owes the store.

use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::Instant;

use crate::admission::{Admission, Answer, Decision};
use crate::algorithm::Verdict;
use crate::ask::{Ask, Decided, Spent};
use crate::check::cache::empty_wait;
use crate::check::{Check, Stop};
use crate::site::central::{CentralItem, CentralSite};
use crate::site::lease::{LeaseItem, Take, Taken};
use crate::spec::OnStoreError;
use crate::spec::Site;

impl Check<'_> {
    /// Take the request's leased cells. An admitted take is the ask's spend (given back if
    /// the request ends denied, see `Check::end`).
    pub(crate) async fn lease(&mut self) -> ControlFlow<Stop> {
        let idx: Vec<usize> = self.indexes(|s| s == Site::Lease);
        if idx.is_empty() {
            return ControlFlow::Continue(());
        }
        let mut items: Vec<LeaseItem> = idx
            .iter()
            .map(|&i| self.lease_item(&self.asks[i]))
            .collect();
        let deadline = self.store_deadline(self.sites.lease.wait());
        let takes =
            match crate::store_time::timed(self.sites.lease.take(&mut items, deadline)).await {
                Ok(takes) => takes,
                Err(err) => return self.store_failed(&err, err.kind(), &idx),
            };
        for ((&i, item), take) in idx.iter().zip(items).zip(takes) {
            let ask = &mut self.asks[i];
            ask.decided = Some(match take {
                Take::Admitted { remaining } => {
                    let p = item.params;
                    // Time until this node's view is full again: the cells short of a burst.
                    let short = u64::from(p.burst).saturating_sub(remaining);
                    ask.spent = Spent::Lease(item);
                    Decided {
                        verdict: Verdict::Allow,
                        committed: true,
                        remaining,
                        reset_after: p.rate.ns_ceil(p.rate.cells(short)),
                        // The view gains a cell within one emission interval.
                        next_after: Some(if short == 0 {
                            0
                        } else {
                            p.rate.ns_ceil(p.rate.cells(1))
                        }),
                        error_open: false,
                    }
                }
                Take::Denied { retry_after } => Decided::denied(retry_after, 0, 0),
            });
        }
        self.go_on()
    }

    /// Without the store, then one script call for every central key.
    pub(crate) async fn central(&mut self) -> ControlFlow<Stop> {
        let Some(site) = self.sites.central.clone() else {
            return ControlFlow::Continue(());
        };
        let idx = self.indexes(|s| s == Site::Central);
        if idx.is_empty() {
            return ControlFlow::Continue(());
        }
        self.without_store();
        self.go_on()?;
        let items: Vec<CentralItem> = idx
            .iter()
            .map(|&i| central_item(self, &site, &self.asks[i]))
            .collect();
        // Read before the call: the store decided later, so times measured from here err
        // early ("denied until t" must never outlast what the store would deny).
        let sent = self.sites.local.now();
        let deadline = self.store_deadline(site.store().timeout());
        let results = match crate::store_time::timed(site.check_by(&items, deadline)).await {
            Ok(results) => results,
            Err(err) => return self.store_failed(&err, err.kind(), &idx),
        };
        let now = self.sites.local.now();
        let l = self.sites;
        for ((&i, item), r) in idx.iter().zip(items).zip(&results) {
            let ask = &mut self.asks[i];
            ask.decided = Some(Decided::from_central(r));
            let concurrency = l.policies[ask.entry.policy].base().is_concurrency();
            let full_at = sent.saturating_add(r.reset_after);
            // Only a request no other could undercut says when the key is free again.
            if !r.admitted && ask.enforcing() && !concurrency && r.wait > 0 && ask.cheapest {
                l.denied_until
                    .deny(&ask.key, sent.saturating_add(r.wait), full_at, now, sent);
            } else if r.admitted && ask.enforcing() {
                match empty_wait(&item, r).filter(|_| ask.cheapest) {
                    // Remembered once the request is sure to keep its spend.
                    Some(wait) => ask.empty = Some((sent.saturating_add(wait), full_at, sent)),
                    None => l.denied_until.forget(&ask.key),
                }
            }
            if r.committed {
                ask.spent = Spent::Central(item);
            }
        }
        self.go_on()
    }

    /// The request's one deadline on the store: `timeout` from its first step that may call
    /// it (a lease refill, then the central debit and check, each given what remains), so
    /// that no request waits longer than the store timeout in all.
    fn store_deadline(&mut self, timeout: Duration) -> Instant {
        *self
            .store_deadline
            .get_or_insert_with(|| Instant::now() + timeout)
    }

    /// The store (or a key's owner) could not decide the asks `idx`: apply the route's
    /// `on_store_error`.
    /// `reason` is the error's kind, for `tollgate_fallback_decisions_total`.
    pub(crate) fn store_failed(
        &mut self,
        err: &dyn std::fmt::Display,
        reason: &'static str,
        idx: &[usize],
    ) -> ControlFlow<Stop> {
        let fallback = self.route.on_store_error;
        self.sites.log_store_error(self.route_name, err, fallback);
        for &i in idx {
            let ask = &mut self.asks[i];
            (self.route.counters[ask.slot]).count_fallback(fallback.name(), reason);
            match fallback {
                OnStoreError::Open => ask.decided = Some(Decided::error_open()),
                OnStoreError::Closed => self.route.counters[ask.slot].count_store_error(false),
                OnStoreError::Local => ask.fallback = true,
            }
        }
        if fallback == OnStoreError::Closed {
            let policies: Vec<_> = idx
                .iter()
                .map(|&i| self.sites.policies[self.asks[i].entry.policy].name.clone())
                .collect();
            let decision = Decision {
                policy: policies.first().cloned(),
                site: idx.first().map(|&i| self.asks[i].entry.site.name()),
                key: idx.first().map(|&i| self.asks[i].key.clone()),
                retry_after: Some(self.sites.unavailable_retry),
                ..Decision::default()
            };
            let answer = Answer::Unavailable {
                retry_after: self.sites.unavailable_retry,
                policies,
            };
            let refused = Admission::new(answer, decision);
            return ControlFlow::Break(Stop::Refused(Box::new(refused)));
        }
        ControlFlow::Continue(())
    }

    /// Central and leased keys step 4 decided on the L/N fallback and spent: owed to the
    /// store, so that it counts them once this node reaches it again. Concurrency owes
    /// nothing (its fallback slot is released when the request ends).
    pub(crate) fn owe_fallback(&self) {
        let Some(site) = &self.sites.central else {
            return;
        };
        // An owner key's fallback owes nothing: no store counts it.
        let owed = |a: &&Ask| a.fallback && a.entry.site != Site::Owner;
        for ask in self.asks.iter().filter(owed) {
            let policy = &self.sites.policies[ask.entry.policy];
            if !ask.decided.is_some_and(|d| d.committed) || policy.base().is_concurrency() {
                continue;
            }
            // Spent on a share of one in N: each of the N nodes repays its share of the
            // installments (`store/installments.rs`).
            let nodes = policy.nodes().get();
            let item = if ask.entry.site == Site::Lease {
                // The lease coordinator keeps a GCRA arrival time (`lease.lua`): debit it
                // as one, at the lease's own interval and tolerance.
                let l = self.lease_item(ask).params;
                let interval_us = l.ns_ceil(l.interval()) as f64 / 1_000.0;
                let cost = f64::from(ask.cost);
                CentralItem {
                    key: site.key(&ask.key),
                    params: [1.0, 1.0, interval_us, f64::from(l.burst), cost, 0.0, 1.0],
                    slot: crate::site::central::no_slot(),
                }
            } else {
                central_item(self, site, ask)
            };
            site.store().owe_share(item.into(), nodes);
        }
    }

    /// Indexes of the asks decided at a site `site` matches.
    fn indexes(&self, site: impl Fn(Site) -> bool) -> Vec<usize> {
        (0..self.asks.len())
            .filter(|&i| site(self.asks[i].entry.site))
            .collect()
    }

    fn lease_item(&self, ask: &Ask) -> LeaseItem {
        let policy = &self.sites.policies[ask.entry.policy];
        LeaseItem {
            key: ask.key.clone(),
            policy: ask.entry.policy,
            max_keys: policy.max_keys,
            params: policy
                .lease_params(ask.headroom)
                .expect("lease entries exist only for lease policies"),
            cost: ask.cost,
            conformed: Taken::default(),
        }
    }
}

/// `ask` as the central script sees it.
fn central_item(check: &Check<'_>, site: &CentralSite, ask: &Ask) -> CentralItem {
    let policy = &check.sites.policies[ask.entry.policy];
    CentralItem::new(
        site.key(&ask.key),
        &policy.spec,
        ask.headroom.get(),
        ask.cost,
        ask.entry.mode,
    )
}
