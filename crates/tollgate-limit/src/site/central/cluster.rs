//! The central check on a Redis Cluster: a request whose keys live in several slots is
//! reserved slot group by slot group (see the module doc of `central`), and a group whose
//! call failed is undone by its **receipt**.
//!
//! A reservation that timed out may still run in Redis after the gateway gave up on it, and
//! spend: without an undo that budget would be lost until the key refilled. A plain refund
//! cannot be sent blind (if the reservation never ran, or was denied, it would give back
//! what was never spent, over-admitting), so each multi-slot reservation that spends writes
//! a receipt key in its own slot naming what it spent, and the undo (`refund_if`) refunds
//! exactly that and deletes the receipt. The undo follows the reservation on the same
//! connection, so it runs right after it if it runs at all; a receipt nobody claims (the
//! reservation's reply came in time) expires after 5 s (`RECEIPT_MS` in `check.lua`). The
//! price is one `SET` per spending group of a multi-slot request.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{CentralItem, CentralResult, CentralSite, decode, slot_id};
use crate::ask::keeps;
use crate::spec::Mode;
use crate::store::{StoreError, slot, slot_tag};

impl CentralSite {
    /// Decide and spend all-or-nothing across slot groups, in parallel.
    pub(super) async fn check_cluster(
        self: &Arc<Self>,
        items: &[CentralItem],
    ) -> Result<Vec<CentralResult>, StoreError> {
        let groups = by_slot(items);
        if groups.len() == 1 {
            // One slot: one atomic call, nothing to reserve.
            let reply = self.call("check", items).await;
            if let Err(e) = &reply {
                self.release_after_timeout(e, items);
            }
            return reply;
        }
        let calls = groups.iter().map(|(&slot, idx)| {
            let group: Vec<CentralItem> = idx.iter().map(|&i| items[i].clone()).collect();
            let receipt = self.receipt_key(slot);
            async move {
                let reply = self.reserve(&group, receipt.as_deref()).await;
                if let Err(e) = &reply {
                    self.undo_reservation(e, group, receipt);
                }
                reply
            }
        });
        let replies = join_all(calls).await;
        let mut results = vec![None; items.len()];
        let mut failure = None;
        for (idx, reply) in groups.values().zip(replies) {
            match reply {
                Ok(rs) => idx.iter().zip(rs).for_each(|(&i, r)| results[i] = Some(r)),
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            // Part of the request could not be decided: give back what the rest spent.
            let spent: Vec<CentralItem> = items
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_some_and(|r| r.committed))
                .map(|(it, _)| it.clone())
                .collect();
            self.spawn_refund(spent);
            return Err(e);
        }
        let results = results
            .into_iter()
            .map(|r| r.expect("every group answered"));
        Ok(self.all_or_nothing(items, results.collect()))
    }

    /// [`Self::check_cluster`] for a request with less than a store timeout left (it paid a
    /// debt, or waited on a lease refill): the calls run in a task of their own with their
    /// full timeouts (the breakers see the store's own latency, as `batch.rs` does), the
    /// request waits until `deadline`, and what they spent for a request gone by then is
    /// refunded, once (`refund.rs`), as a denied request's spends are.
    pub(super) async fn check_cluster_by(
        self: &Arc<Self>,
        items: &[CentralItem],
        deadline: Instant,
    ) -> Result<Vec<CentralResult>, StoreError> {
        let (tx, rx) = oneshot::channel();
        let (site, items) = (self.clone(), items.to_vec());
        tokio::spawn(async move {
            let answer = site.check_cluster(&items).await;
            if let Err(Ok(results)) = tx.send(answer) {
                let spent = items.iter().zip(&results).filter(|(_, r)| r.committed);
                site.spawn_refund(spent.map(|(it, _)| it.clone()).collect());
            }
        });
        self.answer_by(rx, deadline, "cluster check").await
    }

    /// The all-or-nothing rule the script applies per group, now over the whole request:
    /// spends the rule does not keep are refunded.
    fn all_or_nothing(
        self: &Arc<Self>,
        items: &[CentralItem],
        mut results: Vec<CentralResult>,
    ) -> Vec<CentralResult> {
        let enforce_ok = items
            .iter()
            .zip(&results)
            .all(|(it, r)| r.admitted || !it.enforcing());
        let all_ok = results.iter().all(|r| r.admitted);
        let mut undo = Vec::new();
        for (it, r) in items.iter().zip(results.iter_mut()) {
            let mode = if it.enforcing() {
                Mode::Enforce
            } else {
                Mode::Shadow
            };
            if r.committed && !keeps(mode, enforce_ok, all_ok) {
                r.committed = false;
                undo.push(it.clone());
            }
        }
        self.spawn_refund(undo);
        results
    }

    /// Give back `items` in the background: the request does not wait for its undo.
    fn spawn_refund(self: &Arc<Self>, items: Vec<CentralItem>) {
        if !items.is_empty() {
            let site = self.clone();
            tokio::spawn(async move { site.refund(&items).await });
        }
    }

    /// One slot group's reservation: with a receipt when one can be named in its slot.
    async fn reserve(
        &self,
        group: &[CentralItem],
        receipt: Option<&str>,
    ) -> Result<Vec<CentralResult>, StoreError> {
        let Some(receipt) = receipt else {
            return self.call("check", group).await;
        };
        let reply: redis::Value = self.call_with_receipt("reserve", group, receipt).await?;
        decode(&reply, group.len())
    }

    /// A reservation failed: it may still run, or have run, and spent. With a receipt, ask
    /// the store to give back exactly what it spent (nothing if it never ran); without one,
    /// release its concurrency slots only (a refund sent blind could over-admit).
    fn undo_reservation(
        self: &Arc<Self>,
        err: &StoreError,
        group: Vec<CentralItem>,
        receipt: Option<String>,
    ) {
        let Some(receipt) = receipt else {
            self.release_after_timeout(err, &group);
            return;
        };
        if matches!(err, StoreError::BreakerOpen) {
            return; // never sent
        }
        let site = self.clone();
        tokio::spawn(async move {
            let _ = site
                .call_with_receipt::<redis::Value>("refund_if", &group, &receipt)
                .await;
        });
    }

    async fn call_with_receipt<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        items: &[CentralItem],
        receipt: &str,
    ) -> Result<T, StoreError> {
        let call = self.script_call_with(op, items, Some(receipt));
        self.store.run(call).await
    }

    /// A fresh receipt key in `slot` (`None` if the key prefix's own hash tag would move it
    /// to another slot: that group then goes without one).
    fn receipt_key(&self, slot: u16) -> Option<String> {
        let tag = slot_tag(slot)?;
        let key = self.store.key(&format!("receipt:{{{tag}}}{}", slot_id()));
        (self::slot(key.as_bytes()) == slot).then_some(key)
    }
}

/// Item indexes grouped by Redis Cluster slot.
pub(super) fn by_slot(items: &[CentralItem]) -> BTreeMap<u16, Vec<usize>> {
    crate::store::by_slot(items.iter().map(|it| it.key.as_str()))
}
