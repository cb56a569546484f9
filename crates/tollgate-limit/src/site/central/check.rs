//! The central site's check step (step 3 of the walk in `check/mod.rs`): first what this
//! node can deny without the store (`site/local/check.rs`), then one script call decides and
//! spends every central key of the request (or the route's `on_store_error` decides when the
//! store cannot, `check/store.rs`). At the end a denied request's spends are refunded in the
//! background, and an admitted one remembers the keys it left empty (`empty.rs`) and owes the
//! store what the fallback spent.

use std::ops::ControlFlow;

use crate::ask::{Ask, Decided, Spent};
use crate::check::{Check, Stop};
use crate::site::central::empty::empty_wait;
use crate::site::central::{CentralItem, CentralSite};
use crate::site::{DecisionSite, End, Sites};
use crate::spec::Site;

/// The central site's step (its state: `Sites::central`, present when the store is Redis).
#[derive(Default)]
pub struct CentralStep;

impl DecisionSite for CentralStep {
    /// Without a store a central policy's entry is `local` (`route_limits.rs`): only the
    /// store's call waits.
    fn waits(&self, sites: &Sites, ask: &Ask) -> bool {
        ask.entry.site == Site::Central && sites.central.is_some()
    }

    /// Without the store, then one script call for every central key.
    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
        let Some(site) = check.sites.central.clone() else {
            return ControlFlow::Continue(());
        };
        let idx = check.indexes(|s| s == Site::Central);
        if idx.is_empty() {
            return ControlFlow::Continue(());
        }
        check.without_store();
        check.go_on()?;
        let items: Vec<CentralItem> = idx
            .iter()
            .map(|&i| central_item(check, &site, &check.asks[i]))
            .collect();
        // Read before the call: the store decided later, so times measured from here err
        // early ("denied until t" must never outlast what the store would deny).
        let sent = check.sites.local.now();
        let deadline = check.store_deadline(site.store().timeout());
        let results = match crate::store_time::timed(site.check_by(&items, deadline)).await {
            Ok(results) => results,
            Err(err) => return check.store_failed(&err, err.kind(), &idx),
        };
        let now = check.sites.local.now();
        let l = check.sites;
        for ((&i, item), r) in idx.iter().zip(items).zip(&results) {
            let ask = &mut check.asks[i];
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
        check.go_on()
    }

    /// Concurrency spends the request keeps are held until its response ends; the rest it
    /// does not keep are refunded. An admitted request remembers what it left empty and
    /// owes what the fallback spent.
    fn end(&self, check: &mut Check<'_>, end: &mut End) {
        let mut refund = Vec::new();
        // Looked at before it is moved: most asks spent nothing in the store.
        for ask in check
            .asks
            .iter_mut()
            .filter(|a| matches!(a.spent, Spent::Central(_)))
        {
            let keep = end.keeps(ask);
            match std::mem::take(&mut ask.spent) {
                Spent::Central(item) if keep => {
                    if check.sites.policies[ask.entry.policy]
                        .base()
                        .is_concurrency()
                    {
                        end.central_held.push(item);
                    }
                }
                // The refund moves the key back: what this node remembered is stale.
                Spent::Central(item) => refund.push((ask.key.clone(), item)),
                other => ask.spent = other,
            }
        }
        check.refund(refund);
        if end.enforce_ok {
            check.remember_empty();
            check.owe_fallback();
        }
    }
}

impl Check<'_> {
    /// Give back central spends in the background; the deny cache forgets those keys when
    /// the refund starts and when it has landed (see `deny_cache`).
    fn refund(&self, refunds: Vec<(String, CentralItem)>) {
        // Looked at first: the usual request refunds nothing, and takes no reference.
        if refunds.is_empty() {
            return;
        }
        let Some(site) = self.sites.central.clone() else {
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

/// `ask` as the central script sees it.
pub(crate) fn central_item(check: &Check<'_>, site: &CentralSite, ask: &Ask) -> CentralItem {
    let policy = &check.sites.policies[ask.entry.policy];
    CentralItem::new(
        site.key(&ask.key),
        &policy.spec,
        ask.headroom.get(),
        ask.cost,
        ask.entry.mode,
    )
}
