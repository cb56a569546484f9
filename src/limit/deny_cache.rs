//! "Denied until t": when the central site denies a key with a wait of t, this node denies
//! that key locally until t without asking the store again, so attack traffic costs no round
//! trips. Safe because nothing can make a denied key admissible sooner than its own wait:
//! other nodes' spends only push it later. (Concurrency denials are not cached: their slots
//! free up at no predictable time.)
//!
//! When a denial runs out, the first request to see it asks the store and the others keep
//! being denied until that one call answers (or `probe` passes): without this, every
//! concurrent connection of an abusive client raced to the store at each expiry, 64 calls
//! where one suffices (benches/load.sh measured 0.116 calls per request). The store can
//! admit at most what refilled since the expiry, which that one call takes. A denial long
//! expired (beyond `probe` after its end) is just forgotten: the key may have refilled.
//!
//! Bounded: at most `capacity` keys; a full shard first drops expired entries, then its
//! oldest-by-hash half (a forgotten entry only costs one more store call).

use std::hash::BuildHasher;
use std::sync::Mutex;

use hashbrown::{DefaultHashBuilder, HashMap};

use super::clock::Nanos;

const SHARDS: usize = 16;

/// One remembered denial.
#[derive(Debug, Clone, Copy)]
struct Denial {
    /// Denied until then.
    until: Nanos,
    /// A request is asking the store since the denial ran out; others wait until this.
    probing_until: Nanos,
}

pub struct DenyCache {
    shards: Box<[Mutex<HashMap<String, Denial>>]>,
    hasher: DefaultHashBuilder,
    /// Entries per shard.
    per_shard: usize,
    /// How long one store call may take (the store timeout): the probe's window.
    probe: Nanos,
}

impl DenyCache {
    pub fn new(capacity: usize, probe: Nanos) -> Self {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: DefaultHashBuilder::default(),
            per_shard: (capacity / SHARDS).max(1),
            probe: probe.max(1),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, HashMap<String, Denial>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nanoseconds left of a cached denial of `key`, if any. `None` means "ask the store";
    /// right after a denial ran out only one caller gets `None` per probe window.
    pub fn denied_for(&self, key: &str, now: Nanos) -> Option<Nanos> {
        let mut shard = self.shard(key);
        let d = shard.get_mut(key)?;
        if d.until > now {
            return Some(d.until - now);
        }
        if d.probing_until > now {
            return Some(d.probing_until - now);
        }
        if now - d.until >= self.probe {
            shard.remove(key);
            return None;
        }
        d.probing_until = now.saturating_add(self.probe);
        None
    }

    /// The store admitted `key`: nothing to remember.
    pub fn forget(&self, key: &str) {
        self.shard(key).remove(key);
    }

    /// Remember that `key` is denied until `until`.
    pub fn deny(&self, key: &str, until: Nanos, now: Nanos) {
        let mut shard = self.shard(key);
        if shard.len() >= self.per_shard && !shard.contains_key(key) {
            shard.retain(|_, d| d.until > now);
            if shard.len() >= self.per_shard {
                let drop: Vec<String> = shard.keys().take(shard.len() / 2 + 1).cloned().collect();
                for k in drop {
                    shard.remove(&k);
                }
            }
        }
        shard.insert(
            key.to_owned(),
            Denial {
                until,
                probing_until: 0,
            },
        );
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denies_until_then_lets_one_probe_through() {
        let c = DenyCache::new(1000, 10);
        c.deny("k", 100, 0);
        assert_eq!(c.denied_for("k", 40), Some(60));
        assert_eq!(
            c.denied_for("k", 100),
            None,
            "the first caller after expiry asks the store"
        );
        assert_eq!(
            c.denied_for("k", 101),
            Some(9),
            "the others wait for that answer"
        );
        c.forget("k");
        assert_eq!(c.denied_for("k", 102), None);
        assert!(c.is_empty());
    }

    #[test]
    fn a_long_expired_denial_is_forgotten() {
        let c = DenyCache::new(1000, 10);
        c.deny("k", 100, 0);
        assert_eq!(c.denied_for("k", 200), None);
        assert_eq!(c.denied_for("k", 201), None);
        assert!(c.is_empty());
    }

    #[test]
    fn stays_bounded() {
        let c = DenyCache::new(160, 10);
        for i in 0..10_000 {
            c.deny(&format!("key{i}"), u64::MAX, 0);
        }
        assert!(c.len() <= 160, "{}", c.len());
    }
}
