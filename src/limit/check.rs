//! The limit step: one request's keys through the caches and sites, all or nothing.
//!
//! 1. **keys** — one per applicable policy (a policy whose key part is missing is skipped;
//!    a needed header stated ambiguously refuses the request, see `keys::Ambiguous`);
//! 2. **without the store** — a central key remembered as denied, or a local state that
//!    already denies (a local policy, or the node-local state in front of a `local_first`
//!    central policy), denies the request at once: no store call, nothing spent;
//! 3. **lease** — leased keys spend cells this node already holds (a key with none waits
//!    for one coordinator call; see `lease/`); **central** — one script call decides and
//!    spends every central key (or the route's `on_store_error` decides when the store
//!    cannot, for both);
//! 4. **local** — local and split keys (and the store-outage L/N fallback, and the
//!    local-first mirrors) are decided and spent under their shard locks; if they now deny
//!    (a race with another request since step 2), the central spend is refunded. What the
//!    fallback spent is owed to the store, paid before this node next decides there
//!    (`central/debts.rs`).
//!
//! Then `check_cache` remembers the central keys an admission left empty, and `check_report`
//! turns what was decided into the request's `Admission`, counted and logged.
//!
//! A request that ends denied (or refused for a store outage) gives its leased cells back
//! to this node's books (`check`, the one place that sees every exit).
//!
//! Why the local-first state can only deny what the store would deny too: it spends only
//! when the store admitted, so it counts a subset of what the store counted (this node's
//! admitted requests), and every algorithm here is monotone — fewer spends never deny more.

use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, Method};

use super::admission::Admission;
use super::central::CentralItem;
use super::check_cache::empty_wait;
use super::check_store::StoreFailure;
use super::clock::Nanos;
use super::decided::{Decided, Pending, any_enforce_denied, local_plan};
use super::lease::LeaseItem;
use super::limiter::Limiter;
use super::local::{CheckItem, Plan};
use super::permit::Permits;
use crate::config::Mode;

impl Limiter {
    /// Decide a request of route `route` (its index in the config).
    pub async fn check(
        &self,
        route: usize,
        route_name: &Arc<str>,
        client: IpAddr,
        method: &Method,
        headers: &HeaderMap,
    ) -> Admission {
        let mut leased = Vec::new();
        let admission = self
            .decide(route, route_name, client, method, headers, &mut leased)
            .await;
        if (admission.denied || admission.unavailable.is_some()) && !leased.is_empty() {
            self.lease.give_back(&leased);
        }
        admission
    }

    /// [`Limiter::check`] without the give-back; `leased` collects the cells taken.
    async fn decide(
        &self,
        route: usize,
        route_name: &Arc<str>,
        client: IpAddr,
        method: &Method,
        headers: &HeaderMap,
        leased: &mut Vec<LeaseItem>,
    ) -> Admission {
        let plan = &self.plans[route];
        if plan.entries.is_empty() {
            return Admission::default();
        }
        let facts = self.keys.facts(client, route_name, method, headers);
        let mut pending: Vec<Pending> = Vec::with_capacity(plan.entries.len());
        for (slot, e) in plan.entries.iter().enumerate() {
            match self.keys.key(&self.policies[e.policy], &facts) {
                Ok(Some(key)) => pending.push(Pending {
                    entry: *e,
                    slot,
                    key,
                    headroom: facts.headroom,
                }),
                Ok(None) => {}
                // An enforcing policy needs a header stated ambiguously: refuse (400) before
                // any policy is asked, so nothing is spent.
                Err(ambiguous) if e.mode == Mode::Enforce => {
                    return Admission {
                        ambiguous: Some(ambiguous.reason()),
                        ..Admission::default()
                    };
                }
                // A shadow policy must not change what the client sees: it does not apply.
                Err(_) => {}
            }
        }
        if pending.is_empty() {
            return Admission::default();
        }
        let mut decided: Vec<Option<Decided>> = vec![None; pending.len()];
        let mut fallback = false;
        let mut central_spent: Vec<CentralItem> = Vec::new();
        let mut central_shadow_spent: Vec<CentralItem> = Vec::new();
        let mut central_held: Vec<CentralItem> = Vec::new();
        let mut lease_shadow: Vec<LeaseItem> = Vec::new();
        // Central keys the store admitted and left too empty for the next request:
        // (pending index, denied until, full at).
        let mut empty: Vec<(usize, Nanos, Nanos)> = Vec::new();

        if pending.iter().any(|p| p.entry.lease) {
            match self
                .lease_step(&pending, &mut decided, leased, &mut lease_shadow)
                .await
            {
                Ok(()) if any_enforce_denied(&pending, &decided) => {
                    return self.finish(route, route_name, &pending, &decided, Permits::default());
                }
                Ok(()) => {}
                Err(err) => {
                    let idx: Vec<usize> = (0..pending.len())
                        .filter(|&i| pending[i].entry.lease)
                        .collect();
                    match self.store_failed(route_name, plan, &err, &pending, &idx, &mut decided) {
                        StoreFailure::Refuse(a) => return a,
                        StoreFailure::Fallback => fallback = true,
                        StoreFailure::Open => {}
                    }
                }
            }
        }

        if let Some(site) = self
            .central
            .as_ref()
            .filter(|_| pending.iter().any(|p| p.entry.central))
        {
            // 2. without the store
            self.answer_without_store(&pending, &mut decided);
            if any_enforce_denied(&pending, &decided) {
                return self.finish(route, route_name, &pending, &decided, Permits::default());
            }
            // 3. central
            let idx: Vec<usize> = (0..pending.len())
                .filter(|&i| pending[i].entry.central)
                .collect();
            let items: Vec<CentralItem> = idx
                .iter()
                .map(|&i| self.central_item(&pending[i]))
                .collect();
            // Read before the call: the store decided later, so times measured from here
            // err early ("denied until t" must never outlast what the store would deny).
            let sent = self.local.now();
            match site.check(&items).await {
                Ok(results) => {
                    let now = self.local.now();
                    for ((&i, item), r) in idx.iter().zip(&items).zip(&results) {
                        decided[i] = Some(Decided::from_central(r));
                        let p = &pending[i];
                        let concurrency = self.policies[p.entry.policy].base().is_concurrency();
                        let full_at = sent.saturating_add(r.reset_after);
                        if !r.admitted
                            && p.entry.mode == Mode::Enforce
                            && !concurrency
                            && r.wait > 0
                        {
                            self.denied_until.deny(
                                &p.key,
                                sent.saturating_add(r.wait),
                                full_at,
                                now,
                            );
                        } else if r.admitted && p.entry.mode == Mode::Enforce {
                            match empty_wait(item, r) {
                                // Remembered once the request is sure to keep its spend.
                                Some(wait) => empty.push((i, sent.saturating_add(wait), full_at)),
                                None => self.denied_until.forget(&p.key),
                            }
                        }
                        if r.committed {
                            central_spent.push(item.clone());
                            if p.entry.mode != Mode::Enforce {
                                central_shadow_spent.push(item.clone());
                            }
                            if concurrency {
                                central_held.push(item.clone());
                            }
                        }
                    }
                    if any_enforce_denied(&pending, &decided) {
                        return self.finish(
                            route,
                            route_name,
                            &pending,
                            &decided,
                            Permits::default(),
                        );
                    }
                }
                Err(err) => {
                    match self.store_failed(route_name, plan, &err, &pending, &idx, &mut decided) {
                        StoreFailure::Refuse(a) => return a,
                        StoreFailure::Fallback => fallback = true,
                        StoreFailure::Open => {}
                    }
                }
            }
        }

        // 4. local
        let (local_idx, items, mirror): (Vec<usize>, Vec<CheckItem>, Vec<bool>) =
            self.local_items(&pending, &decided, fallback);
        if items.is_empty() {
            self.remember_empty(&pending, &empty);
            let permits = self.permits(Vec::new(), central_held);
            return self.finish(route, route_name, &pending, &decided, permits);
        }
        let outside_enforce_ok = !any_enforce_denied(&pending, &decided);
        let outside_all_ok = decided.iter().all(|d| d.is_none_or(|d| d.admitted));
        let modes: Vec<Mode> = local_idx.iter().map(|&i| pending[i].entry.mode).collect();
        let results = self.local.check(&items, |ds| {
            local_plan(ds, &modes, &mirror, outside_enforce_ok, outside_all_ok)
        });
        let mut held = Vec::new();
        for (((&i, item), r), &is_mirror) in local_idx.iter().zip(&items).zip(&results).zip(&mirror)
        {
            if r.committed
                && self.policies[item.policy]
                    .algorithm(item.headroom)
                    .is_concurrency()
            {
                held.push(item.clone());
            }
            if !is_mirror {
                decided[i] = Some(Decided::from_local(r));
            }
        }
        if any_enforce_denied(&pending, &decided) {
            // Denied here after the store spent: give the store its cells back.
            drop(self.permits(held, Vec::new()));
            self.spawn_refund(central_spent);
            // The refund moves these keys back: whatever this node remembered may be stale.
            for (i, d) in decided.iter().enumerate() {
                if pending[i].entry.central && d.is_some_and(|d| d.committed) {
                    self.denied_until.forget(&pending[i].key);
                }
            }
            return self.finish(route, route_name, &pending, &decided, Permits::default());
        }
        if fallback {
            self.owe_fallback(&pending, &local_idx, &items, &results);
        }
        if !decided.iter().all(|d| d.is_none_or(|d| d.admitted)) {
            // A shadow policy would deny: shadow keys must not have spent.
            self.spawn_refund(central_shadow_spent);
            self.lease.give_back(&lease_shadow);
        }
        self.remember_empty(&pending, &empty);
        let permits = self.permits(held, central_held);
        self.finish(route, route_name, &pending, &decided, permits)
    }

    /// Step 2: the denied-until cache and the local states that decide without the store.
    fn answer_without_store(&self, pending: &[Pending], decided: &mut [Option<Decided>]) {
        let now = self.local.now();
        for (p, d) in pending.iter().zip(decided.iter_mut()) {
            if p.entry.central
                && p.entry.mode == Mode::Enforce
                && let Some((left, reset_after)) = self.denied_until.denied_for(&p.key, now)
            {
                *d = Some(Decided {
                    admitted: false,
                    wait: left,
                    reset_after,
                    ..Decided::default()
                });
            }
        }
        if any_enforce_denied(pending, decided) {
            return;
        }
        // Local and split keys, and local-first mirrors (leased keys have no local state).
        let idx: Vec<usize> = (0..pending.len())
            .filter(|&i| {
                let e = &pending[i].entry;
                (!e.central && !e.lease) || e.local_first
            })
            .collect();
        if idx.is_empty() {
            return;
        }
        let items: Vec<CheckItem> = idx
            .iter()
            .map(|&i| self.check_item(&pending[i], pending[i].entry.split))
            .collect();
        let results = self
            .local
            .check(&items, |ds| Plan::from_elem(false, ds.len()));
        for (&i, r) in idx.iter().zip(&results) {
            if pending[i].entry.mode == Mode::Enforce && !r.decision.verdict.admits() {
                decided[i] = Some(Decided::from_local(r));
            }
        }
    }

    /// Step 4's items: local policies, central ones on the L/N fallback, and local-first
    /// mirrors of central policies the store admitted.
    fn local_items(
        &self,
        pending: &[Pending],
        decided: &[Option<Decided>],
        fallback: bool,
    ) -> (Vec<usize>, Vec<CheckItem>, Vec<bool>) {
        let (mut idx, mut items, mut mirror) = (Vec::new(), Vec::new(), Vec::new());
        for (i, p) in pending.iter().enumerate() {
            let (take, is_mirror, use_fallback) = if p.entry.split {
                (true, false, true)
            } else if !p.entry.central && !p.entry.lease {
                (true, false, false)
            } else if fallback && decided[i].is_none() {
                (true, false, true)
            } else {
                (
                    p.entry.central
                        && p.entry.local_first
                        && decided[i].is_some_and(|d| d.committed),
                    true,
                    false,
                )
            };
            if take {
                idx.push(i);
                items.push(self.check_item(p, use_fallback));
                mirror.push(is_mirror);
            }
        }
        (idx, items, mirror)
    }

    fn check_item(&self, p: &Pending, fallback: bool) -> CheckItem {
        CheckItem {
            policy: p.entry.policy,
            headroom: p.headroom,
            key: p.key.clone(),
            cost: self.policies[p.entry.policy].cost.get(),
            fallback,
        }
    }

    pub(super) fn central_item(&self, p: &Pending) -> CentralItem {
        let policy = &self.policies[p.entry.policy];
        let site = self
            .central
            .as_ref()
            .expect("central entries exist only with a central site");
        CentralItem::new(
            site.key(&p.key),
            &policy.spec,
            p.headroom.get(),
            policy.cost.get(),
            p.entry.mode,
        )
    }

    fn permits(&self, local: Vec<CheckItem>, central: Vec<CentralItem>) -> Permits {
        let permits = Permits::new(self.local.clone(), local);
        match &self.central {
            Some(site) => permits.with_central(site.clone(), central),
            None => permits,
        }
    }

    fn spawn_refund(&self, items: Vec<CentralItem>) {
        if let (Some(site), false) = (self.central.clone(), items.is_empty()) {
            tokio::spawn(async move { site.refund(&items).await });
        }
    }
}
