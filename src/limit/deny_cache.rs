//! "Denied until t": when the central site denies a key with a wait of t, this node denies
//! that key locally until t without asking the store again, so attack traffic costs no round
//! trips. Safe because nothing can make a denied key admissible sooner than its own wait:
//! other nodes' spends only push it later. (Concurrency denials are not cached: their slots
//! free up at no predictable time.)
//!
//! Bounded: at most `capacity` keys; a full shard first drops expired entries, then its
//! oldest-by-hash half (a forgotten entry only costs one more store call).

use std::hash::BuildHasher;
use std::sync::Mutex;

use hashbrown::{DefaultHashBuilder, HashMap};

use super::clock::Nanos;

const SHARDS: usize = 16;

pub struct DenyCache {
    shards: Box<[Mutex<HashMap<String, Nanos>>]>,
    hasher: DefaultHashBuilder,
    /// Entries per shard.
    per_shard: usize,
}

impl DenyCache {
    pub fn new(capacity: usize) -> Self {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: DefaultHashBuilder::default(),
            per_shard: (capacity / SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, HashMap<String, Nanos>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nanoseconds left of a cached denial of `key`, if any.
    pub fn denied_for(&self, key: &str, now: Nanos) -> Option<Nanos> {
        let mut shard = self.shard(key);
        match shard.get(key) {
            Some(&until) if until > now => Some(until - now),
            Some(_) => {
                shard.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remember that `key` is denied until `until`.
    pub fn deny(&self, key: &str, until: Nanos, now: Nanos) {
        let mut shard = self.shard(key);
        if shard.len() >= self.per_shard && !shard.contains_key(key) {
            shard.retain(|_, &mut u| u > now);
            if shard.len() >= self.per_shard {
                let drop: Vec<String> = shard.keys().take(shard.len() / 2 + 1).cloned().collect();
                for k in drop {
                    shard.remove(&k);
                }
            }
        }
        shard.insert(key.to_owned(), until);
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
    fn denies_until_then_forgets() {
        let c = DenyCache::new(1000);
        c.deny("k", 100, 0);
        assert_eq!(c.denied_for("k", 40), Some(60));
        assert_eq!(c.denied_for("k", 100), None);
        assert!(c.is_empty());
    }

    #[test]
    fn stays_bounded() {
        let c = DenyCache::new(160);
        for i in 0..10_000 {
            c.deny(&format!("key{i}"), u64::MAX, 0);
        }
        assert!(c.len() <= 160, "{}", c.len());
    }
}
