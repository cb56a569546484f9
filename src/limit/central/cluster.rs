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
use std::sync::{Arc, OnceLock};

use futures_util::future::join_all;

use super::{CentralItem, CentralResult, CentralSite, StoreError, decode, slot_id};

/// Slots of a Redis Cluster.
const SLOTS: usize = 16384;

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
        let spent: Vec<CentralItem> = items
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_some_and(|r| r.committed))
            .map(|(it, _)| it.clone())
            .collect();
        if let Some(e) = failure {
            // Part of the request could not be decided: give back what the rest spent.
            self.refund(&spent).await;
            return Err(e);
        }
        let mut results: Vec<CentralResult> = results
            .into_iter()
            .map(|r| r.expect("every group answered"))
            .collect();
        // The same plan the script applies per group, now over the whole request.
        let enforce_ok = items
            .iter()
            .zip(&results)
            .all(|(it, r)| r.admitted || !it.enforcing());
        let all_ok = results.iter().all(|r| r.admitted);
        let mut undo = Vec::new();
        for (it, r) in items.iter().zip(results.iter_mut()) {
            let keep = all_ok || (enforce_ok && it.enforcing());
            if r.committed && !keep {
                r.committed = false;
                undo.push(it.clone());
            }
        }
        self.refund(&undo).await;
        Ok(results)
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
        let reply = self.call_with_receipt("reserve", group, receipt).await?;
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
            let _ = site.call_with_receipt("refund_if", &group, &receipt).await;
        });
    }

    async fn call_with_receipt(
        &self,
        op: &'static str,
        items: &[CentralItem],
        receipt: &str,
    ) -> Result<Vec<i64>, StoreError> {
        let mut keys: Vec<String> = items.iter().map(|it| it.key.clone()).collect();
        keys.push(receipt.to_string());
        let args: Vec<String> = items.iter().flat_map(CentralItem::args).collect();
        self.store.eval_script(&self.script, op, &keys, &args).await
    }

    /// A fresh receipt key in `slot` (`None` if the key prefix's own hash tag would move it
    /// to another slot: that group then goes without one).
    fn receipt_key(&self, slot: u16) -> Option<String> {
        let tag = slot_tag(slot)?;
        let key = format!("{}receipt:{{{tag}}}{}", self.prefix, slot_id());
        (self::slot(key.as_bytes()) == slot).then_some(key)
    }
}

/// Item indexes grouped by Redis Cluster slot.
pub(super) fn by_slot(items: &[CentralItem]) -> BTreeMap<u16, Vec<usize>> {
    let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        groups.entry(slot(it.key.as_bytes())).or_default().push(i);
    }
    groups
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of the key, or of its `{hash tag}`.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&len| len > 0)
                .map(|len| &rest[..len])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % SLOTS as u16
}

/// A short hash tag that lands in `slot`: the smallest decimal number that does, found once
/// for all slots (about 170 000 CRCs, a few milliseconds, on a cluster's first multi-slot
/// request). Hand-written: no crate publishes this table.
fn slot_tag(slot: u16) -> Option<&'static str> {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut left = SLOTS;
        for n in 0u32..10_000_000 {
            let tag = n.to_string();
            let s = usize::from(self::slot(tag.as_bytes()));
            if tags[s].is_empty() {
                tags[s] = tag;
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
        tags
    });
    let tag = tags[usize::from(slot)].as_str();
    (!tag.is_empty()).then_some(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `redis-cli CLUSTER KEYSLOT`.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"123456789"), 12739);
    }

    #[test]
    fn every_slot_has_a_tag_that_lands_in_it() {
        for s in 0..SLOTS as u16 {
            let tag = slot_tag(s).expect("a tag for every slot");
            assert_eq!(slot(format!("tg:receipt:{{{tag}}}x").as_bytes()), s);
        }
    }
}
