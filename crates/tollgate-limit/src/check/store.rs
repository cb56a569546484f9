//! What the store-backed sites share (see `check/mod.rs` for the walk): the request's one
//! deadline on the store, what a route's `on_store_error` does when the store (or an owner)
//! cannot answer (the same for central, leased and owner keys), and what the L/N fallback
//! owes the store. The steps themselves are in `site/lease/check.rs`,
//! `site/central/check.rs` and `site/fleet/owner_check.rs`.

use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::Instant;

use crate::admission::{Admission, Answer, Decision};
use crate::ask::{Ask, Decided};
use crate::check::{Check, Stop};
use crate::site::central::CentralItem;
use crate::site::central::check::central_item;
use crate::spec::{OnStoreError, Site};

impl Check<'_> {
    /// The request's one deadline on the store: `timeout` from its first step that may call
    /// it (a lease refill, then the central debit and check, each given what remains), so
    /// that no request waits longer than the store timeout in all.
    pub(crate) fn store_deadline(&mut self, timeout: Duration) -> Instant {
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
    pub(crate) fn indexes(&self, site: impl Fn(Site) -> bool) -> Vec<usize> {
        (0..self.asks.len())
            .filter(|&i| site(self.asks[i].entry.site))
            .collect()
    }
}
