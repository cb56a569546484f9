//! The lease site's check step (step 2 of the walk in `check/mod.rs`): the request's leased
//! keys spend cells this node already holds (a key with none waits for one coordinator call,
//! within the request's store deadline); a denied request gives them back at the end.

use std::ops::ControlFlow;

use crate::algorithm::Verdict;
use crate::ask::{Ask, Decided, Spent};
use crate::check::{Check, Stop};
use crate::site::lease::{LeaseItem, Take, Taken};
use crate::site::{DecisionSite, End, Sites};
use crate::spec::Site;

/// The lease site's step (its state: `Sites::lease`).
#[derive(Default)]
pub struct LeaseStep;

impl DecisionSite for LeaseStep {
    fn waits(&self, _: &Sites, ask: &Ask) -> bool {
        ask.entry.site == Site::Lease
    }

    /// Take the request's leased cells. An admitted take is the ask's spend (given back if
    /// the request ends denied, see `Check::end`).
    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
        let idx: Vec<usize> = check.indexes(|s| s == Site::Lease);
        if idx.is_empty() {
            return ControlFlow::Continue(());
        }
        let mut items: Vec<LeaseItem> = idx
            .iter()
            .map(|&i| check.lease_item(&check.asks[i]))
            .collect();
        let deadline = check.store_deadline(check.sites.lease.wait());
        let takes =
            match crate::store_time::timed(check.sites.lease.take(&mut items, deadline)).await {
                Ok(takes) => takes,
                Err(err) => return check.store_failed(&err, err.kind(), &idx),
            };
        for ((&i, item), take) in idx.iter().zip(items).zip(takes) {
            let ask = &mut check.asks[i];
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
        check.go_on()
    }

    /// A cell the request does not keep goes back to this node's book.
    fn end(&self, check: &mut Check<'_>, end: &mut End) {
        let give_back: Vec<LeaseItem> = check
            .asks
            .iter_mut()
            .filter(|a| !end.keeps(a))
            .filter_map(|a| take_lease(&mut a.spent))
            .collect();
        check.sites.lease.give_back(&give_back);
    }

    fn give_back_all(&self, check: &mut Check<'_>) {
        let leased: Vec<LeaseItem> = check
            .asks
            .iter_mut()
            .filter_map(|a| take_lease(&mut a.spent))
            .collect();
        check.sites.lease.give_back(&leased);
    }
}

/// `spent`'s leased cells, taken out of it (any other spend stays).
fn take_lease(spent: &mut Spent) -> Option<LeaseItem> {
    // Looked at before it is moved: most asks spent nothing here.
    if !matches!(spent, Spent::Lease(_)) {
        return None;
    }
    match std::mem::take(spent) {
        Spent::Lease(item) => Some(item),
        other => {
            *spent = other;
            None
        }
    }
}

impl Check<'_> {
    pub(crate) fn lease_item(&self, ask: &Ask) -> LeaseItem {
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
