//! The `local` decision site: per-key state in this process, decided all-or-nothing.
//!
//! Every policy's keys live in one set of shards (a shard holds one map per policy). A
//! request's keys are decided under the locks of all the shards they hash to, taken in
//! ascending shard order (so two requests can never deadlock), and states are written back
//! only as the commit plan says. Nobody can observe or spend a key between the decision and
//! the write, so a request denied by one policy leaves every other policy's state exactly as
//! it was, even under concurrency.
//!
//! Memory: a key whose state is back to full is removed (absent means full, so this loses
//! nothing). Each policy holds at most `max(max_keys, SHARDS)` keys: `max_keys / SHARDS` per
//! shard. A full shard first drops its idle keys; if that frees too little it evicts live
//! keys, which then start fresh — a bounded over-admission for those keys, counted in
//! `tollgate_limiter_evictions_total`, chosen over refusing new clients.

use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};

use hashbrown::DefaultHashBuilder;
use hashbrown::HashMap;

use super::algorithm::{Decision, Snapshot};
use super::clock::{Clock, Nanos};
use super::metrics::PolicyGauges;
use super::policy::{AnyAlgorithm, AnyState, PolicyRuntime};

/// Number of lock shards: enough that two cores rarely contend, few enough to sweep.
pub const SHARDS: usize = 64;

/// One key of one request, as the site sees it.
#[derive(Debug, Clone)]
pub struct CheckItem {
    /// Index of the policy in the limiter's list.
    pub policy: usize,
    /// Selects the policy's algorithm (shared-range headroom).
    pub headroom: NonZeroU32,
    /// Namespaced key (see `keys.rs`).
    pub key: String,
    /// Cells to spend.
    pub cost: u32,
    /// Decide with the policy's L/N fallback state instead of its own (store outage).
    pub fallback: bool,
}

/// What the site decided for one item.
#[derive(Debug, Clone, Copy)]
pub struct ItemResult {
    /// The algorithm's decision at the check's instant.
    pub decision: Decision<AnyState>,
    /// Whether its state was written (spent).
    pub committed: bool,
    /// Remaining / reset after the check, for headers.
    pub snapshot: Snapshot,
}

/// One lock shard: a map per policy.
struct Shard {
    maps: Vec<HashMap<String, AnyState>>,
}

/// In-process state of every policy.
pub struct LocalStore {
    /// The policies whose algorithms decide; indexed by `CheckItem::policy`.
    policies: Arc<[PolicyRuntime]>,
    shards: Box<[Mutex<Shard>]>,
    /// Picks a key's shard; the same hasher family the maps use.
    hasher: DefaultHashBuilder,
    /// Time source: system time in production, a manual clock in tests.
    clock: Arc<dyn Clock>,
    /// `tollgate_limiter_keys` and evictions, per policy.
    gauges: Arc<PolicyGauges>,
}

impl LocalStore {
    pub fn new(
        policies: Arc<[PolicyRuntime]>,
        clock: Arc<dyn Clock>,
        gauges: Arc<PolicyGauges>,
    ) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    // Own state, then the L/N fallback state, per policy.
                    maps: (0..2 * policies.len()).map(|_| HashMap::new()).collect(),
                })
            })
            .collect();
        LocalStore {
            policies,
            shards,
            hasher: DefaultHashBuilder::default(),
            clock,
            gauges,
        }
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    fn map_of(&self, it: &CheckItem) -> usize {
        if it.fallback {
            self.policies.len() + it.policy
        } else {
            it.policy
        }
    }

    fn algorithm_of(&self, it: &CheckItem) -> &AnyAlgorithm {
        let p = &self.policies[it.policy];
        if it.fallback {
            p.fallback_algorithm(it.headroom)
        } else {
            p.algorithm(it.headroom)
        }
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard cannot leave a state half-written (states are
        // Copy values swapped in one step), so a poisoned lock is safe to keep using.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decide every item at one instant; then write back the states of the items `plan`
    /// marks, all under the same locks.
    pub fn check(
        &self,
        items: &[CheckItem],
        plan: impl FnOnce(&[Decision<AnyState>]) -> Vec<bool>,
    ) -> Vec<ItemResult> {
        let shard_of: Vec<usize> = items.iter().map(|it| self.shard_of(&it.key)).collect();
        let mut order: Vec<usize> = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| self.lock(i)).collect();
        let slot = |shard: usize| order.binary_search(&shard).unwrap_or(0);
        let now = self.clock.now();

        let before: Vec<Option<AnyState>> = items
            .iter()
            .zip(&shard_of)
            .map(|(it, &s)| {
                guards[slot(s)].maps[self.map_of(it)]
                    .get(it.key.as_str())
                    .copied()
            })
            .collect();
        let decisions: Vec<Decision<AnyState>> = items
            .iter()
            .zip(&before)
            .map(|(it, state)| self.algorithm_of(it).decide(*state, it.cost, now))
            .collect();
        let commit = plan(&decisions);
        items
            .iter()
            .zip(&shard_of)
            .zip(decisions.into_iter().zip(commit))
            .zip(before)
            .map(|(((it, &s), (decision, committed)), state)| {
                let snapshot = if committed {
                    self.write(&mut guards[slot(s)], it, decision.state, now);
                    Snapshot {
                        remaining: decision.remaining,
                        reset_after: decision.reset_after,
                    }
                } else {
                    // Nothing was spent: report the key as it stands.
                    self.algorithm_of(it).peek(state, now)
                };
                ItemResult {
                    decision,
                    committed,
                    snapshot,
                }
            })
            .collect()
    }

    /// Give back a concurrency item's cells (its request ended).
    pub fn release(&self, item: &CheckItem) {
        let mut shard = self.lock(self.shard_of(&item.key));
        let alg = self.algorithm_of(item);
        if let Some(state) = shard.maps[self.map_of(item)]
            .get(item.key.as_str())
            .copied()
        {
            let now = self.clock.now();
            let released = alg.release(state, item.cost);
            self.write(&mut shard, item, released, now);
        }
    }

    /// Read a key without spending (tests, diagnostics).
    pub fn state(&self, policy: usize, key: &str) -> Option<AnyState> {
        // (own state; fallback state is not exposed)
        self.lock(self.shard_of(key)).maps[policy].get(key).copied()
    }

    /// Keys held for `policy` right now.
    pub fn key_count(&self, policy: usize) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).maps[policy].len())
            .sum()
    }

    fn write(&self, shard: &mut Shard, it: &CheckItem, state: AnyState, now: Nanos) {
        let policy = &self.policies[it.policy];
        let alg = self.algorithm_of(it);
        let map = &mut shard.maps[self.map_of(it)];
        if alg.is_idle(&state, now) {
            if map.remove(it.key.as_str()).is_some() {
                self.gauges.keys_removed(it.policy, 1);
            }
            return;
        }
        if let Some(slot) = map.get_mut(it.key.as_str()) {
            *slot = state;
            return;
        }
        let cap = (policy.max_keys / SHARDS).max(1);
        if map.len() >= cap {
            let levels = if it.fallback {
                &policy.fallback
            } else {
                &policy.algorithms
            };
            self.make_room(it.policy, levels, map, cap, now);
        }
        map.insert(it.key.clone(), state);
        self.gauges.keys_added(it.policy, 1);
    }

    /// Drop idle keys; if fewer than an eighth of `cap` is then free, evict live ones.
    fn make_room(
        &self,
        policy: usize,
        levels: &[(NonZeroU32, AnyAlgorithm)],
        map: &mut HashMap<String, AnyState>,
        cap: usize,
        now: Nanos,
    ) {
        let before = map.len();
        // Idle at every headroom level: the state says nothing any level would not.
        map.retain(|_, s| !levels.iter().all(|(_, a)| a.is_idle(s, now)));
        let target = cap - cap.div_ceil(8).min(cap);
        let mut evicted = 0;
        if map.len() > target {
            let excess = map.len() - target;
            let victims: Vec<String> = map.keys().take(excess).cloned().collect();
            for k in victims {
                map.remove(&k);
                evicted += 1;
            }
        }
        self.gauges
            .keys_removed(policy, (before - map.len()) as i64);
        self.gauges.evicted(policy, evicted);
    }
}
