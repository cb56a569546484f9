//! Gossip counters' outbox: the cells this node admitted per key since its last send,
//! pushed to every live peer each `gossip_interval` (only keys active in that interval).
//!
//! Every admitted gossip request adds to it, so it is sharded by key (16 locks, each held
//! for one map update) and allocates nothing for a key it already holds: a push reads and
//! zeroes the counts, and only a key idle for a whole interval is dropped (the next
//! request of a busy key finds its entry still there).
//!
//! Bounded: at most [`MAX_KEYS`] keys are held; the spends of further keys are not
//! reported (the other nodes under-count them by at most one interval's worth) and are
//! counted in `tollgate_gossip_dropped_total`.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;

/// Keys the outbox holds.
pub const MAX_KEYS: usize = 100_000;

const SHARDS: usize = 16;

/// One shard: per (policy index, headroom), each key's cells since the last push.
type Shard = HashMap<(usize, u32), HashMap<Box<str>, u64>>;

/// One key's cells, as a push takes them.
pub struct Delta {
    pub policy: usize,
    pub headroom: u32,
    pub key: String,
    pub cells: u64,
}

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
    /// This node admitted `cost` cells of `key` (policy `policy`, at `headroom`).
    pub fn record(&self, policy: usize, headroom: u32, key: &str, cost: u32) {
        let shard = (self.hasher.hash_one(key) as usize) % SHARDS;
        let mut shard = self.shards[shard].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cells) = shard
            .get_mut(&(policy, headroom))
            .and_then(|keys| keys.get_mut(key))
        {
            *cells += u64::from(cost);
            return;
        }
        let held: usize = shard.values().map(HashMap::len).sum();
        if held >= MAX_KEYS / SHARDS {
            self.dropped.inc_by(u64::from(cost));
            return;
        }
        shard
            .entry((policy, headroom))
            .or_default()
            .insert(key.into(), u64::from(cost));
    }

    /// Every key's cells since the last take; keys with none since then are dropped.
    pub fn take(&self) -> Vec<Delta> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (&(policy, headroom), keys) in shard.iter_mut() {
                keys.retain(|key, cells| {
                    if *cells == 0 {
                        return false;
                    }
                    out.push(Delta {
                        policy,
                        headroom,
                        key: key.to_string(),
                        cells: std::mem::take(cells),
                    });
                    true
                });
            }
            shard.retain(|_, keys| !keys.is_empty());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_adds_up_per_key_and_stays_bounded() {
        let outbox = Outbox::default();
        outbox.record(0, 1, "a", 2);
        outbox.record(0, 1, "a", 3);
        outbox.record(0, 4, "a", 1);
        let mut items = outbox.take();
        items.sort_by_key(|i| i.headroom);
        let cells: Vec<(u32, u64)> = items.iter().map(|i| (i.headroom, i.cells)).collect();
        assert_eq!(cells, [(1, 5), (4, 1)]);
        assert!(outbox.take().is_empty(), "taken once");
        // Idle for a whole interval: the keys are gone, so the bound counts live keys.
        assert!(outbox.take().is_empty());
        for i in 0..2 * MAX_KEYS {
            outbox.record(0, 1, &i.to_string(), 1);
        }
        outbox.record(0, 1, "0", 1);
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
