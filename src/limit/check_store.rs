//! The limit step's store-backed parts, beside `check.rs`: the lease step (step 3's leased
//! keys) and what a route's `on_store_error` does when the store cannot answer, the same
//! for central and leased keys.

use std::sync::Arc;

use super::admission::Admission;
use super::central::{CentralItem, StoreError};
use super::decided::{Decided, Pending};
use super::lease::{LeaseItem, Take};
use super::limiter::{Limiter, RoutePlan};
use super::local::{CheckItem, ItemResult};
use crate::config::{Mode, OnStoreError};

/// What the request does after a store failure.
pub(super) enum StoreFailure {
    /// `open`: the failed keys count as allowed.
    Open,
    /// `local`: the failed keys are decided by the L/N split in step 4.
    Fallback,
    /// `closed`: answer this (503) now.
    Refuse(Admission),
}

impl Limiter {
    /// Take the request's leased cells. Admitted takes are pushed to `leased` (given back if
    /// the request ends denied) and, for non-enforcing policies, to `shadow` too (given back
    /// if a shadow policy would deny: shadow keys spend only when everything allows).
    pub(super) async fn lease_step(
        &self,
        pending: &[Pending],
        decided: &mut [Option<Decided>],
        leased: &mut Vec<LeaseItem>,
        shadow: &mut Vec<LeaseItem>,
    ) -> Result<(), StoreError> {
        let idx: Vec<usize> = (0..pending.len())
            .filter(|&i| pending[i].entry.lease)
            .collect();
        let mut items: Vec<LeaseItem> = idx.iter().map(|&i| self.lease_item(&pending[i])).collect();
        let takes = self.lease.take(&mut items).await?;
        for ((&i, item), take) in idx.iter().zip(items).zip(takes) {
            decided[i] = Some(match take {
                Take::Admitted { remaining } => {
                    let p = item.params;
                    // Time until this node's view is full again: the cells short of a burst.
                    let short = u64::from(p.burst).saturating_sub(remaining);
                    let reset_after = p.rate.ns_ceil(p.rate.cells(short));
                    if pending[i].entry.mode != Mode::Enforce {
                        shadow.push(item.clone());
                    }
                    leased.push(item);
                    Decided {
                        admitted: true,
                        committed: true,
                        remaining,
                        reset_after,
                        ..Decided::default()
                    }
                }
                Take::Denied { retry_after } => Decided {
                    admitted: false,
                    wait: retry_after,
                    ..Decided::default()
                },
            });
        }
        Ok(())
    }

    fn lease_item(&self, p: &Pending) -> LeaseItem {
        let policy = &self.policies[p.entry.policy];
        LeaseItem {
            key: p.key.clone(),
            policy: p.entry.policy,
            max_keys: policy.max_keys,
            params: policy
                .lease_params(p.headroom)
                .expect("lease entries exist only for lease policies"),
            cost: policy.cost.get(),
            conformed: 0,
        }
    }

    /// The store could not decide the keys `idx`: apply the route's `on_store_error`.
    pub(super) fn store_failed(
        &self,
        route_name: &str,
        plan: &RoutePlan,
        err: &StoreError,
        pending: &[Pending],
        idx: &[usize],
        decided: &mut [Option<Decided>],
    ) -> StoreFailure {
        self.log_store_error(route_name, err, plan.on_store_error);
        match plan.on_store_error {
            OnStoreError::Open => {
                for &i in idx {
                    decided[i] = Some(Decided {
                        admitted: true,
                        error_open: true,
                        ..Decided::default()
                    });
                }
                StoreFailure::Open
            }
            OnStoreError::Closed => {
                for &i in idx {
                    plan.counters[pending[i].slot].count_store_error(false);
                }
                StoreFailure::Refuse(Admission {
                    unavailable: Some(self.unavailable_retry),
                    ..Admission::default()
                })
            }
            OnStoreError::Local => StoreFailure::Fallback,
        }
    }

    /// Central and leased keys step 4 decided on the L/N fallback and spent: owed to the
    /// store, so that it counts them once this node reaches it again. Concurrency owes
    /// nothing (its fallback slot is released when the request ends).
    pub(super) fn owe_fallback(
        &self,
        pending: &[Pending],
        local_idx: &[usize],
        items: &[CheckItem],
        results: &[ItemResult],
    ) {
        let Some(site) = &self.central else {
            return;
        };
        for ((&i, item), r) in local_idx.iter().zip(items).zip(results) {
            let p = &pending[i];
            let policy = &self.policies[p.entry.policy];
            if !item.fallback
                || !r.committed
                || !(p.entry.central || p.entry.lease)
                || policy.base().is_concurrency()
            {
                continue;
            }
            site.owe(if p.entry.lease {
                // The lease coordinator keeps a GCRA arrival time (`lease.lua`): debit it
                // as one, at the lease's own interval and tolerance.
                let l = self.lease_item(p).params;
                let interval_us = l.ns_ceil(l.interval()) as f64 / 1_000.0;
                CentralItem {
                    key: site.key(&p.key),
                    params: [
                        1.0,
                        1.0,
                        interval_us,
                        f64::from(l.burst),
                        f64::from(item.cost),
                        0.0,
                        1.0,
                    ],
                    slot: Arc::from("-"),
                }
            } else {
                self.central_item(p)
            });
        }
    }
}
