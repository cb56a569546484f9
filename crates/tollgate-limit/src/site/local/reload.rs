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
use crate::algorithm::Snapshot;
use crate::clock::{Clock, Nanos};
use crate::metrics::PolicyGauges;
use crate::policy::{AnyAlgorithm, AnyState, PolicyRuntime};
use crate::spec::Site;

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
    /// The old keys cannot be read as the new ones (the reason): the policy starts empty.
    Reset(&'static str),
}

impl std::fmt::Display for Carry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Carry::New => f.write_str("new"),
            Carry::Kept => f.write_str("kept"),
            Carry::Converted { keys } => write!(f, "converted ({keys} keys)"),
            Carry::Reset(why) => write!(f, "reset ({why})"),
        }
    }
}

impl LocalStore {
    /// The store of a reloaded config: `policies` (built at this node's current N) on the
    /// same shards. `rekeyed` says which policies' key strings the reload derives
    /// differently (an IPv6 prefix, the account hash key): their old keys name nobody now.
    /// Returns what happened to each new policy, in its order.
    pub fn reload(
        &self,
        policies: Arc<[PolicyRuntime]>,
        gauges: Arc<PolicyGauges>,
        rekeyed: &dyn Fn(&PolicyRuntime) -> bool,
    ) -> (LocalStore, Vec<Carry>) {
        let n = policies.len();
        let mut slots = vec![0; 2 * n];
        let mut carry = Vec::with_capacity(n);
        let mut convert = Vec::new();
        {
            let mut users = self.shared.users.lock().unwrap_or_else(|e| e.into_inner());
            for p in policies.iter() {
                let old = self.policies.iter().find(|o| o.name == p.name);
                let c = old.map_or(Carry::New, |o| outcome(o, p, rekeyed(p)));
                for (fallback, at) in [(false, p.index), (true, n + p.index)] {
                    slots[at] = match (c, old) {
                        (Carry::Kept, Some(o)) => {
                            let s = self.slot(o.index, fallback);
                            users[s] += 1;
                            s
                        }
                        _ => take_free(&mut users),
                    };
                }
                if let (Carry::Converted { .. }, Some(o)) = (c, old) {
                    convert.extend(conversions(o, p, n, &slots));
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
        for c in convert {
            let keys = self.convert_into(&store, &c, now);
            if let Carry::Converted { keys: k } = &mut carry[c.new.0] {
                *k += keys;
            }
        }
        (store, carry)
    }

    /// Rescale `policy`'s L/N levels to `nodes` nodes (false: N was already that), and
    /// every L/N state of it (its `split` state, or its store-outage fallback) with them
    /// ([`rescale`]). Clearing the states instead gave every key a full share on every
    /// change: a fleet whose N bounced 2 → 1 → 2 admitted the limit again twice over.
    ///
    /// Under every shard's lock (taken in ascending order, as a request takes its keys'):
    /// a request decides with the levels it reads under its lock (`local.rs`), so it sees
    /// old levels with old states or new levels with rescaled ones, never a mix. Checks
    /// wait for the rescale (a membership change: a gateway joined or left).
    pub fn rescale_split(&self, policy: &PolicyRuntime, nodes: NonZeroU32) -> bool {
        let table = self.slot(policy.index, true);
        let mut shards: Vec<_> = (0..SHARDS).map(|i| self.lock(i)).collect();
        let Some(before) = policy.set_nodes(nodes) else {
            return false;
        };
        let now = self.clock.now();
        let after = policy.split();
        let mut removed = 0;
        for shard in &mut shards {
            shard.tables[table].retain(|e| {
                let (from, to) = (before.algorithm(e.headroom), after.algorithm(e.headroom));
                match rescale(from, e.state, to, now) {
                    Some(state) => {
                        e.state = state;
                        true
                    }
                    None => {
                        removed += 1;
                        false
                    }
                }
            });
        }
        drop(shards);
        self.gauges.keys_removed(policy.index, removed);
        true
    }

    /// Make every shard hold a table for each of this store's slots.
    fn grow(&self) {
        let top = self.slots.iter().max().map_or(0, |s| s + 1);
        for i in 0..SHARDS {
            let mut shard = self.lock(i);
            if shard.tables.len() < top {
                shard.tables.resize_with(top, HashTable::new);
                shard.fresh.resize(top, 0);
            }
        }
    }

    /// Every key of one old table as the new policy's algorithm would hold it, written
    /// into the new table; returns how many keys were written.
    fn convert_into(&self, to: &LocalStore, c: &Conversion, now: Nanos) -> usize {
        let ((old, old_fallback), (new, new_fallback)) = (c.old, c.new);
        let (from, slot) = (self.slot(old, old_fallback), c.slot);
        let (po, pn) = (&self.policies[old], &to.policies[new]);
        let level = |p: &PolicyRuntime, fallback: bool, h: NonZeroU32| -> AnyAlgorithm {
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
                    let from = level(po, old_fallback, e.headroom);
                    let state = carry(&from, e.state, &level(pn, new_fallback, e.headroom), now)?;
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
        // Both tables of a policy count on its series (as `write` does).
        to.gauges.keys_added(new, written as i64);
        written
    }
}

/// One old table to convert into a new one: (policy index, L/N table?) on each side.
struct Conversion {
    old: (usize, bool),
    new: (usize, bool),
    slot: usize,
}

/// The table a policy's requests decide on: a split policy its L/N table, the others
/// their own (their L/N table is the store-outage fallback).
fn split(p: &PolicyRuntime) -> bool {
    p.spec.site == Site::Split
}

/// What a reload does to a policy that was there before.
fn outcome(old: &PolicyRuntime, new: &PolicyRuntime, rekeyed: bool) -> Carry {
    let concurrency = |p: &PolicyRuntime| {
        p.algorithms
            .iter()
            .all(|(_, a)| matches!(a, AnyAlgorithm::Concurrency(_)))
    };
    if old.key != new.key {
        Carry::Reset("its key changed")
    } else if rekeyed {
        Carry::Reset(
            "its keys are derived differently: [client_ip] ipv6_prefix, the [account] hash key or its jwt claim changed",
        )
    } else if concurrency(new) != concurrency(old) {
        Carry::Reset("requests in flight and spent cells are different counts")
    } else if split(old) != split(new) {
        Carry::Converted { keys: 0 }
    } else if old.algorithms == new.algorithms || concurrency(new) {
        Carry::Kept
    } else {
        Carry::Converted { keys: 0 }
    }
}

/// The tables to convert for a converted policy: own → own and L/N → L/N, or, when it
/// moves between `split` and another site, only the table its requests decided on into
/// the one they will decide on (the other starts empty: it is the outage fallback).
fn conversions(
    old: &PolicyRuntime,
    new: &PolicyRuntime,
    n: usize,
    slots: &[usize],
) -> Vec<Conversion> {
    let slot = |fallback: bool| slots[if fallback { n + new.index } else { new.index }];
    if split(old) == split(new) {
        [false, true]
            .into_iter()
            .map(|f| Conversion {
                old: (old.index, f),
                new: (new.index, f),
                slot: slot(f),
            })
            .collect()
    } else {
        vec![Conversion {
            old: (old.index, split(old)),
            new: (new.index, split(new)),
            slot: slot(split(new)),
        }]
    }
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
    // An idle state is an absent key: never hold one (it would only weigh on the gauge).
    Some(to.debit(None, cost, now)).filter(|s| !to.is_idle(s, now))
}

/// `state`, decided by `from` (one node's share at the old N), as `to` (the share at the new
/// N) holds the same *fraction* spent: a node that spent all of a 5-cell share of 10 at
/// N = 2 has spent all of its 10-cell share at N = 1, not half of it (L/N assumes balanced
/// load: the others spent theirs too). Rounded up: never a fuller key. Concurrency keeps
/// its count: the cells in flight are requests, whatever the share. `None` when nothing is
/// spent (absent is full).
fn rescale(
    from: &AnyAlgorithm,
    state: AnyState,
    to: &AnyAlgorithm,
    now: Nanos,
) -> Option<AnyState> {
    if let AnyAlgorithm::Concurrency(_) = from {
        return carry(from, state, to, now);
    }
    let full = |a: &AnyAlgorithm| u128::from(a.peek(None, now).remaining);
    let spent = full(from).saturating_sub(u128::from(from.peek(Some(state), now).remaining));
    if spent == 0 {
        return None;
    }
    let (was, is) = (full(from).max(1), full(to));
    let scaled = (spent * is).div_ceil(was);
    let mut cost = u32::try_from(scaled).unwrap_or(u32::MAX).max(1);
    if let AnyAlgorithm::LeakyBucket(_) = to {
        cost = cost.min(u32::try_from(is).unwrap_or(u32::MAX));
    }
    Some(to.debit(None, cost, now)).filter(|s| !to.is_idle(s, now))
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
                shard.fresh[slot] = 0;
            }
            // Both tables of a policy count on its series (as `write` does).
            if n > 0 {
                self.gauges.keys_removed(at % n, removed as i64);
            }
        }
    }
}
