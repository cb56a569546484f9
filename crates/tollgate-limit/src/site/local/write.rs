//! Writing a key's state back after a decision, and making room in a full shard: the local
//! site's memory bound (`max_keys`); and bringing a key down to a peer's count of it (a
//! gossip node catching up). A child of `local.rs` (it writes the shards directly).

use std::hash::BuildHasher;
use std::num::NonZeroU32;

use compact_str::CompactString;
use hashbrown::HashTable;

use super::{CheckItem, Entry, LocalStore, SHARDS, Shard};
use crate::algorithm::Snapshot;
use crate::clock::Nanos;
use crate::policy::{AnyAlgorithm, AnyState};

impl LocalStore {
    /// Spend what `item`'s key lacks to be as spent as `target` (a peer's count of it), in
    /// one step under its shard lock: many requests catching up the same key at once
    /// spend the difference once, not once each.
    pub fn catch_up(&self, item: &CheckItem, target: Snapshot) {
        self.update(item, |alg, state, now| raise(alg, state, target, now));
    }

    pub(super) fn write(
        &self,
        shard: &mut Shard,
        it: &CheckItem,
        hash: u64,
        state: AnyState,
        now: Nanos,
    ) {
        let policy = &self.policies[it.policy];
        let alg = self.algorithm_of(it);
        let at = self.table_of(it);
        let table = &mut shard.tables[at];
        let found = table.find_entry(hash, |e| *e.key == *it.key);
        if alg.is_idle(&state, now) {
            if let Ok(entry) = found {
                entry.remove();
                self.gauges.keys_removed(it.policy, 1);
            }
            return;
        }
        if let Ok(mut entry) = found {
            entry.get_mut().state = state;
            return;
        }
        let split;
        let levels = match it.fallback {
            true => {
                split = policy.split();
                &split.levels
            }
            false => &policy.algorithms,
        };
        let cap = (policy.max_keys / SHARDS).max(1);
        let fresh = &mut shard.fresh[at];
        if table.len() >= cap {
            self.make_room(it.policy, levels, table, cap, now);
            *fresh = 0;
        } else if *fresh as usize > table.len() / 4 + SWEEP_SLACK {
            let removed = sweep(levels, table, now);
            self.gauges.keys_removed(it.policy, removed as i64);
            *fresh = 0;
        }
        *fresh = fresh.saturating_add(1);
        let hasher = &self.shared.hasher;
        table.insert_unique(
            hash,
            Entry {
                key: CompactString::from(it.key.as_str()),
                state,
                headroom: it.headroom,
            },
            |e| hasher.hash_one(&*e.key),
        );
        self.gauges.keys_added(it.policy, 1);
    }

    /// Drop idle keys; if fewer than an eighth of `cap` is then free, evict live ones.
    fn make_room(
        &self,
        policy: usize,
        levels: &[(NonZeroU32, AnyAlgorithm)],
        table: &mut HashTable<Entry>,
        cap: usize,
        now: Nanos,
    ) {
        let before = table.len();
        sweep(levels, table, now);
        let target = cap - cap.div_ceil(8).min(cap);
        let mut evicted = 0u64;
        let mut excess = table.len().saturating_sub(target);
        table.retain(|_| {
            if excess == 0 {
                return true;
            }
            excess -= 1;
            evicted += 1;
            false
        });
        self.gauges
            .keys_removed(policy, (before - table.len()) as i64);
        self.gauges.evicted(policy, evicted);
    }
}

/// New keys a table takes in beyond a quarter of its size before it sweeps: a small table
/// (a shard of a quiet policy) does not sweep on every other insert.
const SWEEP_SLACK: usize = 8;

/// Drop the keys of `table` that are back to full at every headroom level (the state says
/// nothing any level would not: absent is full); how many were dropped.
fn sweep(levels: &[(NonZeroU32, AnyAlgorithm)], table: &mut HashTable<Entry>, now: Nanos) -> usize {
    let before = table.len();
    table.retain(|e| !levels.iter().all(|(_, a)| a.is_idle(&e.state, now)));
    before - table.len()
}

/// `state` spent down to `target`, or `None` when it is already as spent: first to the
/// target's cells left; then, for a target past empty, one cell per `period / limit` it is
/// further from full (gcra and token bucket carry a debt that way; a sliding window's
/// count says no more than its remaining).
fn raise(
    alg: &AnyAlgorithm,
    state: Option<AnyState>,
    target: Snapshot,
    now: Nanos,
) -> Option<AnyState> {
    let mine = alg.peek(state, now);
    let mut cost = mine.remaining.saturating_sub(target.remaining);
    if target.remaining == 0 && matches!(alg, AnyAlgorithm::Gcra(_) | AnyAlgorithm::TokenBucket(_))
    {
        let q = alg.quota();
        let per_cell = (crate::clock::duration_to_nanos(q.period) / q.limit.max(1)).max(1);
        let after = match cost {
            0 => mine,
            c => alg.peek(Some(alg.debit(state, clamp(c), now)), now),
        };
        cost += target.reset_after.saturating_sub(after.reset_after) / per_cell;
    }
    (cost > 0).then(|| alg.debit(state, clamp(cost), now))
}

fn clamp(cells: u64) -> u32 {
    u32::try_from(cells).unwrap_or(u32::MAX)
}
