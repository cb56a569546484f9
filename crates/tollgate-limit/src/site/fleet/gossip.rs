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

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use hashbrown::{DefaultHashBuilder, HashTable};
use prometheus_client::metrics::counter::Counter;
use smallvec::SmallVec;

/// Keys the outbox holds.
pub const MAX_KEYS: usize = 100_000;

const SHARDS: usize = 16;

/// A key's bytes, inline up to 32 (an IPv4 key with its policy's prefix is about 20). A key
/// idle for an interval leaves the outbox, so with many clients nearly every request's key
/// is new to it: a heap key cost an allocation on the request's thread and a free on the
/// pushing one (a cross-thread free under mimalloc) per request (BENCHMARKS.md, issue 12).
type Key = SmallVec<[u8; 32]>;

/// One key's cells since the last push. Keyed by (policy, headroom, key): one hash per
/// record picks both the shard and the slot (the hasher is foldhash, randomly seeded, so a
/// client choosing its keys cannot aim them at one slot).
struct Entry {
    /// The policy by name: a record made by a request of an older config (a reload in
    /// between) still names the policy it spent on, whatever its index is now.
    policy: Arc<str>,
    headroom: u32,
    key: Key,
    cells: u64,
}

pub struct Outbox {
    shards: Vec<Mutex<HashTable<Entry>>>,
    hasher: DefaultHashBuilder,
    /// `tollgate_gossip_dropped_total`.
    pub dropped: Counter,
    /// `tollgate_gossip_sent_cells_total`: cells pushed, counted once per peer sent to.
    pub sent: Counter,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            hasher: Default::default(),
            dropped: Counter::default(),
            sent: Counter::default(),
        }
    }
}

impl Outbox {
    /// This node admitted `cost` cells of `key` (policy `policy`, at `headroom`).
    pub fn record(&self, policy: &Arc<str>, headroom: u32, key: &str, cost: u32) {
        let key = key.as_bytes();
        let hash = self.hasher.hash_one((&**policy, headroom, key));
        // The table's slot uses the low bits and its control bytes the top 7: the shard
        // takes bits from the middle.
        let shard = (hash >> 32) as usize % SHARDS;
        let mut shard = self.shards[shard].lock().unwrap_or_else(|e| e.into_inner());
        let same = |e: &Entry| {
            e.headroom == headroom
                && (Arc::ptr_eq(&e.policy, policy) || e.policy == *policy)
                && *e.key == *key
        };
        if let Some(e) = shard.find_mut(hash, same) {
            e.cells += u64::from(cost);
            return;
        }
        if shard.len() >= MAX_KEYS / SHARDS {
            self.dropped.inc_by(u64::from(cost));
            return;
        }
        let entry = Entry {
            policy: policy.clone(),
            headroom,
            key: Key::from_slice(key),
            cells: u64::from(cost),
        };
        let hasher = &self.hasher;
        shard.insert_unique(hash, entry, |e| {
            hasher.hash_one((&*e.policy, e.headroom, &e.key[..]))
        });
    }

    /// Hands `each(policy, headroom, key, cells)` every key's cells since the last take,
    /// zeroing them; keys with none since then are dropped. Called under each shard's lock
    /// in turn: `each` should only copy (it encodes the push). Keys are the UTF-8 bytes
    /// `record` was given.
    pub fn take(&self, mut each: impl FnMut(&Arc<str>, u32, &[u8], u64)) {
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            // Every tick takes every shard, busy or not: an empty one costs its lock only.
            if shard.is_empty() {
                continue;
            }
            shard.retain(|e| {
                if e.cells == 0 {
                    return false;
                }
                each(&e.policy, e.headroom, &e.key, std::mem::take(&mut e.cells));
                true
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(outbox: &Outbox) -> Vec<(String, u32, u64)> {
        let mut out = Vec::new();
        outbox.take(|policy, headroom, _, cells| out.push((policy.to_string(), headroom, cells)));
        out
    }

    #[test]
    fn the_outbox_adds_up_per_key_and_stays_bounded() {
        let outbox = Outbox::default();
        let (p, q): (Arc<str>, Arc<str>) = ("p".into(), "q".into());
        outbox.record(&p, 1, "a", 2);
        // Another Arc of the same name (a reloaded config's) adds to the same entry.
        outbox.record(&"p".into(), 1, "a", 3);
        outbox.record(&p, 4, "a", 1);
        outbox.record(&q, 1, "a", 7);
        let mut cells = taken(&outbox);
        cells.sort();
        let row = |n: &str, h, c| (n.to_string(), h, c);
        assert_eq!(cells, [row("p", 1, 5), row("p", 4, 1), row("q", 1, 7)]);
        assert!(taken(&outbox).is_empty(), "taken once");
        // Idle for a whole interval: the keys are gone, so the bound counts live keys.
        assert!(taken(&outbox).is_empty());
        assert!(outbox.shards.iter().all(|s| s.lock().unwrap().is_empty()));
        for i in 0..2 * MAX_KEYS {
            outbox.record(&p, 1, &i.to_string(), 1);
        }
        outbox.record(&p, 1, "0", 1);
        let kept = taken(&outbox);
        assert!(kept.len() <= MAX_KEYS, "{} keys held", kept.len());
        assert!(kept.len() > MAX_KEYS * 9 / 10, "{} keys held", kept.len());
        assert_eq!(
            outbox.dropped.get() as usize,
            2 * MAX_KEYS - kept.len(),
            "keys past the bound are dropped and counted"
        );
    }
}
