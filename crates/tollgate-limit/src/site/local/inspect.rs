//! The local site's read-and-reset side, for the admin API and tests: a key's state,
//! remaining and reset without spending, and forgetting a key. A child of `local.rs` (it
//! reads the shards directly).

use std::num::NonZeroU32;

use super::{CheckItem, LocalStore, SHARDS};
use crate::algorithm::Snapshot;
use crate::policy::AnyState;

impl LocalStore {
    /// Forget a key of `policy`, its own state and its L/N fallback state: absent is full
    /// (the admin API's reset).
    pub fn remove(&self, policy: usize, key: &str) {
        let hash = self.hash(key);
        let mut shard = self.lock(Self::shard_of(hash));
        let mut removed = 0;
        for table in [self.slot(policy, false), self.slot(policy, true)] {
            if let Ok(entry) = shard.tables[table].find_entry(hash, |e| *e.key == *key) {
                entry.remove();
                removed += 1;
            }
        }
        self.gauges.keys_removed(policy, removed);
    }

    /// Remaining and reset of a key without spending: its own state, or with `fallback`
    /// its L/N state (split policies), at `headroom`.
    pub fn peek(&self, policy: usize, key: &str, headroom: NonZeroU32, fallback: bool) -> Snapshot {
        let item = CheckItem {
            policy,
            headroom,
            key: key.to_string(),
            cost: 0,
            fallback,
        };
        let hash = self.hash(key);
        let shard = self.lock(Self::shard_of(hash));
        let state = shard.tables[self.table_of(&item)]
            .find(hash, |e| *e.key == *key)
            .map(|e| e.state);
        self.algorithm_of(&item).peek(state, self.clock.now())
    }

    /// Read a key's own state without spending (tests, diagnostics).
    pub fn state(&self, policy: usize, key: &str) -> Option<AnyState> {
        let hash = self.hash(key);
        self.lock(Self::shard_of(hash)).tables[self.slot(policy, false)]
            .find(hash, |e| *e.key == *key)
            .map(|e| e.state)
    }

    /// Keys held for `policy` right now.
    pub fn key_count(&self, policy: usize) -> usize {
        let slot = self.slot(policy, false);
        (0..SHARDS).map(|i| self.lock(i).tables[slot].len()).sum()
    }
}
