//! Gossip counters' outbox: the cells this node admitted per key since its last send,
//! pushed to every live peer each `gossip_interval` (only keys active in that interval).
//!
//! Bounded: at most [`MAX_KEYS`] keys wait per interval; the spends of further keys are not
//! reported (the other nodes under-count them by at most one interval's worth) and are
//! counted in `tollgate_gossip_dropped_total`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;

use super::codec::KeyItem;

/// Keys one interval's outbox holds.
pub const MAX_KEYS: usize = 100_000;

/// (policy name, its fingerprint, headroom, key) → cells.
type Pending = HashMap<(Arc<str>, u64, u32, Box<str>), u64>;

#[derive(Default)]
pub struct Outbox {
    pending: Mutex<Pending>,
    /// `tollgate_gossip_dropped_total`.
    pub dropped: Counter,
    /// `tollgate_gossip_sent_cells_total`: cells pushed, counted once per peer sent to.
    pub sent: Counter,
}

impl Outbox {
    /// This node admitted `cost` cells of `key`.
    pub fn record(&self, policy: &Arc<str>, spec: u64, headroom: u32, key: &str, cost: u32) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let full = pending.len() >= MAX_KEYS;
        // The lookup by a borrowed key needs the whole tuple; building it is one string
        // copy, which a key already in the outbox then discards.
        let k = (policy.clone(), spec, headroom, Box::<str>::from(key));
        match pending.get_mut(&k) {
            Some(cells) => *cells += u64::from(cost),
            None if full => {
                self.dropped.inc_by(u64::from(cost));
            }
            None => {
                pending.insert(k, u64::from(cost));
            }
        }
    }

    /// Everything recorded since the last take, as items (a count above `u32::MAX` is
    /// split over several).
    pub fn take(&self) -> Vec<KeyItem> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let mut items = Vec::with_capacity(pending.len());
        for ((policy, spec, headroom, key), mut cells) in pending {
            while cells > 0 {
                let cost = u32::try_from(cells).unwrap_or(u32::MAX);
                cells -= u64::from(cost);
                items.push(KeyItem {
                    policy: policy.clone(),
                    spec,
                    headroom,
                    cost,
                    key: key.to_string(),
                });
            }
        }
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_adds_up_per_key_and_stays_bounded() {
        let outbox = Outbox::default();
        let p: Arc<str> = "p".into();
        outbox.record(&p, 9, 1, "a", 2);
        outbox.record(&p, 9, 1, "a", 3);
        outbox.record(&p, 9, 4, "a", 1);
        let mut items = outbox.take();
        items.sort_by_key(|i| i.headroom);
        let costs: Vec<(u32, u32)> = items.iter().map(|i| (i.headroom, i.cost)).collect();
        assert_eq!(costs, [(1, 5), (4, 1)]);
        assert!(outbox.take().is_empty(), "taken once");
        for i in 0..MAX_KEYS + 10 {
            outbox.record(&p, 9, 1, &i.to_string(), 1);
        }
        outbox.record(&p, 9, 1, "0", 1);
        assert_eq!(outbox.dropped.get(), 10, "keys past the bound are dropped");
        assert_eq!(outbox.take().len(), MAX_KEYS, "a known key still adds up");
    }
}
