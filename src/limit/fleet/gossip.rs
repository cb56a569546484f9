//! Gossip counters' outbox: the cells this node admitted per key since its last send,
//! pushed to every live peer each `gossip_interval` (only keys active in that interval).
//!
//! Every admitted gossip request adds to it, so it is sharded by key (16 locks, each held
//! for one map update; a key already in the outbox costs no allocation), and the push
//! takes each shard's map whole.
//!
//! Bounded: at most [`MAX_KEYS`] keys wait per interval; the spends of further keys are not
//! reported (the other nodes under-count them by at most one interval's worth) and are
//! counted in `tollgate_gossip_dropped_total`.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;

use super::codec::KeyItem;

/// Keys one interval's outbox holds.
pub const MAX_KEYS: usize = 100_000;

const SHARDS: usize = 16;

/// Which policy, as sent: its name, its fingerprint, and the key's headroom.
type Policy = (Arc<str>, u64, u32);

/// One shard: per policy and headroom, each key's cells.
type Shard = HashMap<Policy, HashMap<Box<str>, u64>>;

pub struct Outbox {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
    /// `tollgate_gossip_dropped_total`.
    pub dropped: Counter,
    /// `tollgate_gossip_sent_cells_total`: cells pushed, counted once per peer sent to.
    pub sent: Counter,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            dropped: Counter::default(),
            sent: Counter::default(),
        }
    }
}

impl Outbox {
    /// This node admitted `cost` cells of `key`.
    pub fn record(&self, policy: &Arc<str>, spec: u64, headroom: u32, key: &str, cost: u32) {
        let shard = (self.hasher.hash_one(key) as usize) % SHARDS;
        let mut shard = self.shards[shard].lock().unwrap_or_else(|e| e.into_inner());
        let per_shard = MAX_KEYS / SHARDS;
        let held: usize = shard.values().map(HashMap::len).sum();
        let keys = shard.entry((policy.clone(), spec, headroom)).or_default();
        match keys.get_mut(key) {
            Some(cells) => *cells += u64::from(cost),
            None if held >= per_shard => {
                self.dropped.inc_by(u64::from(cost));
            }
            None => {
                keys.insert(key.into(), u64::from(cost));
            }
        }
    }

    /// Everything recorded since the last take, as items (a count above `u32::MAX` is
    /// split over several).
    pub fn take(&self) -> Vec<KeyItem> {
        let mut items = Vec::new();
        for shard in &self.shards {
            let taken = std::mem::take(&mut *shard.lock().unwrap_or_else(|e| e.into_inner()));
            for ((policy, spec, headroom), keys) in taken {
                for (key, mut cells) in keys {
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
        for i in 0..2 * MAX_KEYS {
            outbox.record(&p, 9, 1, &i.to_string(), 1);
        }
        outbox.record(&p, 9, 1, "0", 1);
        let kept = outbox.take();
        assert!(kept.len() <= MAX_KEYS, "{} keys held", kept.len());
        assert!(kept.len() > MAX_KEYS * 9 / 10, "{} keys held", kept.len());
        assert_eq!(
            outbox.dropped.get() as usize,
            2 * MAX_KEYS - kept.len(),
            "keys past the bound are dropped and counted"
        );
    }
}
