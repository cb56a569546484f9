//! What a config reload does to the local site's state. A child of `local.rs`: the new
//! store is built on the same shards, and each policy of the new config either shares its
//! old tables, gets its old keys converted, or starts empty ([`Carry`]).
//!
//! Sharing, not copying, is what makes a kept policy lose nothing: requests still in flight
//! on the old config and new requests on the new one read and write the same entries, so
//! there is no moment at which a key's spends are in two places. Concurrency policies share
//! whenever their key is unchanged, whatever their limit: a request in flight holds a cell
//! that its end gives back to that same table.
//!
//! A slot is counted by the stores that use it; when the last one is dropped (the old
//! config's last request ended), its tables are emptied and the slot is reused.

use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::Arc;

use hashbrown::HashTable;

use super::{Entry, LocalStore, SHARDS};
use crate::limit::algorithm::Snapshot;
use crate::limit::clock::Nanos;
use crate::limit::metrics::PolicyGauges;
use crate::limit::policy::{AnyAlgorithm, AnyState, PolicyRuntime};

/// What a reload did to one policy's keys here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    /// Not in the old config.
    New,
    /// Same algorithm, numbers and key: the very same state, shared (concurrency: same
    /// key, any limit).
    Kept,
    /// Other numbers or another algorithm, same key: each key's spent cells carried into
    /// the new algorithm (`keys` converted).
    Converted { keys: usize },
    /// Another key recipe: the old keys name other things; the policy starts empty.
    Reset,
}

impl std::fmt::Display for Carry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Carry::New => f.write_str("new"),
            Carry::Kept => f.write_str("kept"),
            Carry::Converted { keys } => write!(f, "converted ({keys} keys)"),
            Carry::Reset => f.write_str("reset (its key changed)"),
        }
    }
}

impl LocalStore {
    /// The store of a reloaded config: `policies` (built at this node's current N) on the
    /// same shards. Returns what happened to each new policy, in its order.
    pub fn reload(
        &self,
        policies: Arc<[PolicyRuntime]>,
        gauges: Arc<PolicyGauges>,
    ) -> (LocalStore, Vec<Carry>) {
        let n = policies.len();
        let mut slots = vec![0; 2 * n];
        let mut carry = Vec::with_capacity(n);
        let mut convert = Vec::new();
        {
            let mut users = self.shared.users.lock().unwrap_or_else(|e| e.into_inner());
            for p in policies.iter() {
                let old = self.policies.iter().find(|o| o.name == p.name);
                let c = match old {
                    None => Carry::New,
                    Some(o) if o.key != p.key => Carry::Reset,
                    Some(o) if shares(o, p) => Carry::Kept,
                    Some(_) => Carry::Converted { keys: 0 },
                };
                for (fallback, at) in [(false, p.index), (true, n + p.index)] {
                    slots[at] = match (c, old) {
                        (Carry::Kept, Some(o)) => {
                            let s = self.slot(o.index, fallback);
                            users[s] += 1;
                            s
                        }
                        _ => take_free(&mut users),
                    };
                    if let (Carry::Converted { .. }, Some(o)) = (c, old) {
                        convert.push((o.index, p.index, fallback, slots[at]));
                    }
                }
                carry.push(c);
            }
        }
        let store = LocalStore {
            policies,
            shared: self.shared.clone(),
            slots,
            clock: self.clock.clone(),
            gauges,
        };
        store.grow();
        let now = self.clock.now();
        for (old, new, fallback, slot) in convert {
            let keys = self.convert_into(&store, (old, new), fallback, slot, now);
            if let Carry::Converted { keys: k } = &mut carry[new] {
                *k += keys;
            }
        }
        (store, carry)
    }

    /// Make every shard hold a table for each of this store's slots.
    fn grow(&self) {
        let top = self.slots.iter().max().map_or(0, |s| s + 1);
        for i in 0..SHARDS {
            let mut shard = self.lock(i);
            if shard.tables.len() < top {
                shard.tables.resize_with(top, HashTable::new);
            }
        }
    }

    /// Every key of `old`'s table (own or L/N) as `new`'s algorithm in `to` would hold it,
    /// written into `slot`; returns how many keys were written.
    fn convert_into(
        &self,
        to: &LocalStore,
        (old, new): (usize, usize),
        fallback: bool,
        slot: usize,
        now: Nanos,
    ) -> usize {
        let from = self.slot(old, fallback);
        let (po, pn) = (&self.policies[old], &to.policies[new]);
        let level = |p: &PolicyRuntime, h: NonZeroU32| -> AnyAlgorithm {
            if fallback {
                p.split_algorithm(h)
            } else {
                *p.algorithm(h)
            }
        };
        let hasher = &self.shared.hasher;
        let mut written = 0;
        for i in 0..SHARDS {
            let mut shard = self.lock(i);
            let carried: Vec<Entry> = shard.tables[from]
                .iter()
                .filter_map(|e| {
                    let state =
                        carry(&level(po, e.headroom), e.state, &level(pn, e.headroom), now)?;
                    Some(Entry {
                        key: e.key.clone(),
                        state,
                        headroom: e.headroom,
                    })
                })
                .collect();
            written += carried.len();
            let table = &mut shard.tables[slot];
            for e in carried {
                let hash = hasher.hash_one(&*e.key);
                table.insert_unique(hash, e, |e| hasher.hash_one(&*e.key));
            }
        }
        if !fallback {
            to.gauges.keys_added(new, written as i64);
        }
        written
    }
}

/// Whether a reloaded policy can use its old tables as they are.
fn shares(old: &PolicyRuntime, new: &PolicyRuntime) -> bool {
    let concurrency = |p: &PolicyRuntime| {
        p.algorithms
            .iter()
            .all(|(_, a)| matches!(a, AnyAlgorithm::Concurrency(_)))
    };
    old.algorithms == new.algorithms || (concurrency(old) && concurrency(new))
}

/// A free slot (one no store uses), or a new one.
fn take_free(users: &mut Vec<u32>) -> usize {
    match users.iter().position(|&u| u == 0) {
        Some(s) => {
            users[s] = 1;
            s
        }
        None => {
            users.push(1);
            users.len() - 1
        }
    }
}

/// `state`, decided by `from`, as `to` holds the same spend at `now`: the cells spent and
/// not yet refilled carry over (rounded up: never a fuller key than before), debited into
/// a fresh `to` state, so a lower new limit leaves the key in debt until it drains. `None`
/// when nothing is spent (absent is full).
fn carry(from: &AnyAlgorithm, state: AnyState, to: &AnyAlgorithm, now: Nanos) -> Option<AnyState> {
    let remaining = |a: &AnyAlgorithm, s: Option<AnyState>| -> Snapshot { a.peek(s, now) };
    let full = remaining(from, None).remaining;
    let spent = full.saturating_sub(remaining(from, Some(state)).remaining);
    if spent == 0 {
        return None;
    }
    let mut cost = u32::try_from(spent).unwrap_or(u32::MAX);
    if let AnyAlgorithm::LeakyBucket(_) = to {
        // A queue cannot go into debt: it holds at most what it can delay.
        let room = u32::try_from(remaining(to, None).remaining).unwrap_or(u32::MAX);
        cost = cost.min(room);
    }
    Some(to.debit(None, cost, now))
}

impl Drop for LocalStore {
    /// Give this store's slots back; a slot no other store uses is emptied for reuse.
    fn drop(&mut self) {
        let mut users = self.shared.users.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.policies.len();
        for (at, &slot) in self.slots.iter().enumerate() {
            users[slot] = users[slot].saturating_sub(1);
            if users[slot] > 0 {
                continue;
            }
            let mut removed = 0;
            for i in 0..SHARDS {
                let mut shard = self.lock(i);
                removed += shard.tables[slot].len();
                shard.tables[slot] = HashTable::new();
            }
            if at < n {
                self.gauges.keys_removed(at, removed as i64);
            }
        }
    }
}
