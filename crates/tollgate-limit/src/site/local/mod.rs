//! The `local` decision site: per-key state in this process, decided all-or-nothing.
//!
//! Every policy's keys live in one set of shards (a shard holds one map per policy). A
//! request's keys are decided under the locks of all the shards they hash to, taken in
//! ascending shard order (so two requests can never deadlock), and states are written back
//! only as the `spends` callback says. Nobody can observe or spend a key between the decision and
//! the write, so a request denied by one policy leaves every other policy's state exactly as
//! it was, even under concurrency.
//!
//! Memory: a key whose state is back to full is removed (absent means full, so this loses
//! nothing): when it is next written, or by its table's sweep, which runs when the keys
//! inserted since the last sweep pass a quarter of the table's size. A table so holds at
//! most about 4/3 of the keys that were not full at its last sweep (plus a few), whatever
//! the churn of keys seen once. Each policy holds at most `max(max_keys, SHARDS)` keys: `max_keys / SHARDS` per
//! shard. A full shard first drops its idle keys; if that frees too little it evicts live
//! keys, which then start fresh — a bounded over-admission for those keys, counted in
//! `tollgate_limiter_evictions_total`, chosen over refusing new clients.

use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use compact_str::CompactString;
use hashbrown::{DefaultHashBuilder, HashTable};
use smallvec::SmallVec;

use crate::algorithm::{KeyDecision, Snapshot, Verdict};
use crate::clock::{Clock, Nanos};
use crate::metrics::PolicyGauges;
use crate::policy::{AnyAlgorithm, AnyState, PolicyRuntime};

/// Number of lock shards: enough that two cores rarely contend, few enough to sweep.
pub const SHARDS: usize = 64;

/// Per-request lists stay on the stack up to this many keys (most routes have one to three
/// policies), so a check allocates nothing; more spill to the heap. Kept small because the
/// results are moved by value: 3, not more (callgrind, `benches/instructions.sh`, inclusive
/// a request of `Check::local`: at 2 the three row spilled every list, 6 960; at 3 it is
/// 4 720 and the one-policy row 1 480; at 4, 4 785 and 1 531).
pub(crate) const INLINE: usize = 3;

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
    pub decision: KeyDecision<AnyState>,
    /// Whether its state was written (spent).
    pub committed: bool,
    /// Remaining / reset after the check, for headers.
    pub snapshot: Snapshot,
}

/// The results of one check, in item order.
pub type Results = SmallVec<[ItemResult; INLINE]>;
/// Which items of one check spend (the all-or-nothing rule's answer, `ask::keeps`).
pub type Spends = SmallVec<[bool; INLINE]>;

/// [`LocalStore::algorithm_of`]'s answer.
enum AlgorithmOf<'a> {
    Own(&'a AnyAlgorithm),
    Split(AnyAlgorithm),
}

impl std::ops::Deref for AlgorithmOf<'_> {
    type Target = AnyAlgorithm;
    fn deref(&self) -> &AnyAlgorithm {
        match self {
            AlgorithmOf::Own(a) => a,
            AlgorithmOf::Split(a) => a,
        }
    }
}

/// A key and its state. Keys are hashed once per check: the same hash picks the shard and
/// finds the entry. One cache line each, aligned to it: a cold key's lookup then misses
/// once for its entry instead of twice for one straddling two lines.
#[repr(align(64))]
struct Entry {
    /// Inline up to 24 bytes (every IPv4 key, most others): a lookup of a cold key then
    /// misses the cache once for the entry, not twice (entry, then the key's heap bytes).
    key: CompactString,
    state: AnyState,
    /// The headroom level that decided it: a reload that changes the policy's numbers
    /// converts the state with this level's old and new algorithms (`local/reload.rs`).
    headroom: NonZeroU32,
}

/// One lock shard: a table per slot (`LocalStore::slots`: each policy's own state and its
/// L/N fallback state).
struct Shard {
    tables: Vec<HashTable<Entry>>,
    /// Per table, the keys inserted since its last sweep of full keys (`write.rs`): a
    /// table sweeps once they pass a quarter of its size, so a key written once and never
    /// again leaves memory without a background task, at a cost spread over the inserts.
    fresh: Vec<u32>,
}

/// A shard's lock on a cache line of its own: two threads locking neighbouring shards
/// must not bounce one line between their cores (false sharing). A spin lock released by
/// a plain store (`local/lock.rs`: why).
#[repr(align(64))]
struct Padded(ShardLock<Shard>);

/// The shards, shared by the local stores of successive configs: a reload builds a new
/// store on the same shards, and a policy it keeps reads and writes the same tables
/// (`local/reload.rs`).
struct Shared {
    shards: Box<[Padded]>,
    hasher: DefaultHashBuilder,
    /// Per slot: the stores using it. A slot no store uses is emptied and reused.
    users: Mutex<Vec<u32>>,
}

/// In-process state of every policy.
pub struct LocalStore {
    /// The policies whose algorithms decide; indexed by `CheckItem::policy`.
    policies: Arc<[PolicyRuntime]>,
    shared: Arc<Shared>,
    /// Each policy's table slot, then each policy's L/N table slot
    /// (`slots[policies.len() + policy]`).
    slots: Vec<usize>,
    /// Time source: system time in production, a manual clock in tests.
    clock: Arc<dyn Clock>,
    /// `tollgate_limiter_keys` and evictions, per policy.
    gauges: Arc<PolicyGauges>,
}

mod check;
mod inspect;
mod lock;
mod reload;
mod write;
pub(crate) use check::LocalStep;
use lock::{Guard, ShardLock};
pub use reload::Carry;

impl LocalStore {
    pub fn new(
        policies: Arc<[PolicyRuntime]>,
        clock: Arc<dyn Clock>,
        gauges: Arc<PolicyGauges>,
    ) -> Self {
        let slots = 2 * policies.len();
        let shards = (0..SHARDS)
            .map(|_| {
                Padded(ShardLock::new(Shard {
                    tables: (0..slots).map(|_| HashTable::new()).collect(),
                    fresh: vec![0; slots],
                }))
            })
            .collect();
        LocalStore {
            policies,
            shared: Arc::new(Shared {
                shards,
                hasher: DefaultHashBuilder::default(),
                users: Mutex::new(vec![1; slots]),
            }),
            slots: (0..slots).collect(),
            clock,
            gauges,
        }
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    #[inline]
    fn hash(&self, key: &str) -> u64 {
        self.shared.hasher.hash_one(key)
    }

    /// The table's index uses the hash's low bits and its control bytes the top 7: the
    /// shard takes bits from the middle so the three stay independent.
    #[inline]
    fn shard_of(hash: u64) -> usize {
        ((hash >> 32) as usize) % SHARDS
    }

    #[inline]
    fn table_of(&self, it: &CheckItem) -> usize {
        self.slot(it.policy, it.fallback)
    }

    /// The table slot of `policy`'s own state, or of its L/N state.
    #[inline]
    fn slot(&self, policy: usize, fallback: bool) -> usize {
        self.slots[if fallback {
            self.policies.len() + policy
        } else {
            policy
        }]
    }

    /// The algorithm deciding `it`: borrowed for the policy's own state (every check of a
    /// busy policy: no copy of the algorithm), copied out of the swappable L/N split.
    #[inline]
    fn algorithm_of(&self, it: &CheckItem) -> AlgorithmOf<'_> {
        let p = &self.policies[it.policy];
        if it.fallback {
            AlgorithmOf::Split(p.split_algorithm(it.headroom))
        } else {
            AlgorithmOf::Own(p.algorithm(it.headroom))
        }
    }

    #[inline]
    fn lock(&self, i: usize) -> Guard<'_, Shard> {
        // The lock does not poison: a panic while holding a shard cannot leave a state
        // half-written (states are Copy values swapped in one step).
        self.shared.shards[i].0.lock()
    }

    /// Decide every item at one instant; then write back the states of the items `spends`
    /// marks, all under the same locks.
    pub fn check(&self, items: &[CheckItem], spends: impl FnOnce(&[Verdict]) -> Spends) -> Results {
        if let [it] = items {
            let one = self.check_single(it, |v| {
                spends(std::slice::from_ref(v))
                    .first()
                    .copied()
                    .unwrap_or(false)
            });
            return std::iter::once(one).collect();
        }
        let hashes: SmallVec<[u64; INLINE]> = items.iter().map(|it| self.hash(&it.key)).collect();
        let mut order: SmallVec<[usize; INLINE]> =
            hashes.iter().map(|&h| Self::shard_of(h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: SmallVec<[Guard<'_, Shard>; INLINE]> =
            order.iter().map(|&i| self.lock(i)).collect();
        let slot = |hash: u64| order.binary_search(&Self::shard_of(hash)).unwrap_or(0);
        let now = self.clock.now();

        let before: SmallVec<[Option<AnyState>; INLINE]> = items
            .iter()
            .zip(&hashes)
            .map(|(it, &h)| {
                guards[slot(h)].tables[self.table_of(it)]
                    .find(h, |e| *e.key == *it.key)
                    .map(|e| e.state)
            })
            .collect();
        let decisions: SmallVec<[KeyDecision<AnyState>; INLINE]> = items
            .iter()
            .zip(&before)
            .map(|(it, state)| self.algorithm_of(it).decide(*state, it.cost, now))
            .collect();
        let verdicts: SmallVec<[Verdict; INLINE]> = decisions.iter().map(|d| d.verdict).collect();
        let commit = spends(&verdicts);
        let mut results = Results::new();
        for (i, it) in items.iter().enumerate() {
            let (decision, committed) = (decisions[i], commit.get(i).copied().unwrap_or(false));
            let snapshot = if committed {
                self.write(
                    &mut guards[slot(hashes[i])],
                    it,
                    hashes[i],
                    decision.state,
                    now,
                );
                Snapshot {
                    remaining: decision.remaining,
                    reset_after: decision.reset_after,
                    next_after: decision.next_after,
                }
            } else {
                // Nothing was spent: report the key as it stands.
                self.algorithm_of(it).peek(before[i], now)
            };
            results.push(ItemResult {
                decision,
                committed,
                snapshot,
            });
        }
        results
    }

    /// [`LocalStore::check`] for the common single-key request: one lock, no lists, and
    /// `keep` answers for the one decision (spend it or not) without building a list.
    pub fn check_single(&self, it: &CheckItem, keep: impl FnOnce(&Verdict) -> bool) -> ItemResult {
        // The clock is read first, outside the lock: the counter read's latency then
        // overlaps the hashing instead of stalling the critical section behind the lock's
        // atomic (perf: a sixth of a hot-key check's samples sat on it). A thread that read it earlier may
        // lock after one that read it later; every algorithm takes such a `now` as the
        // state's own time, which can only under-admit (`tests/limits/prop_stale_now.rs`),
        // and a refusal is decided again at a `now` read under the lock (below).
        let mut now = self.clock.now();
        let hash = self.hash(&it.key);
        // Looked up before the lock, and the header figures computed after it: the
        // critical section is the probe, the verdict and the write.
        let table = self.table_of(it);
        let (alg, before, verdict, after, committed) = {
            let mut shard = self.lock(Self::shard_of(hash));
            // Read under the lock: an L/N level and its states change together
            // (`LocalStore::rescale_split`).
            let alg = self.algorithm_of(it);
            // One probe of the table: a key that is there is updated in place (the common
            // case: a busy key); a new key, or one back to idle, takes `write`'s path.
            let found = shard.tables[table].find_mut(hash, |e| *e.key == *it.key);
            let before = found.as_ref().map(|e| e.state);
            let (mut verdict, mut after) = alg.admit(before, it.cost, now);
            if !verdict.admits() {
                // A refusal may come of a stale `now` (this thread was descheduled between
                // its clock read and the lock while another spent at a later one): an
                // under-admission, a wrong 429. Read under the lock, the clock is at least
                // the `now` of every write this state has seen, so the decision is the one
                // a serial order would make (`tests/limits/local_stale_now.rs`). Only
                // refusals pay the second read; the allowed path is unchanged.
                let fresh = self.clock.now();
                if fresh > now {
                    now = fresh;
                    (verdict, after) = alg.admit(before, it.cost, now);
                }
            }
            let committed = keep(&verdict);
            if committed {
                match found {
                    Some(e) if !alg.is_idle(&after, now) => e.state = after,
                    _ => self.write(&mut shard, it, hash, after, now),
                }
            }
            (alg, before, verdict, after, committed)
        };
        // A decision's figures are those of the state it leaves (`tests/limits/prop_decide_peek.rs`).
        let figures = alg.peek(Some(after), now);
        let decision = KeyDecision {
            verdict,
            state: after,
            remaining: figures.remaining,
            reset_after: figures.reset_after,
            next_after: figures.next_after,
        };
        // Nothing spent: the key as it stands.
        let snapshot = if committed {
            figures
        } else {
            alg.peek(before, now)
        };
        ItemResult {
            decision,
            committed,
            snapshot,
        }
    }

    /// Give back a concurrency item's cells (its request ended).
    pub fn release(&self, item: &CheckItem) {
        self.update(item, |alg, state, _| {
            state.map(|s| alg.release(s, item.cost))
        });
    }

    /// Spend an item's cells whether or not they conform: cells another node admitted
    /// (gossip). The key may go past empty and then denies until it drains.
    pub fn debit(&self, item: &CheckItem) {
        self.update(item, |alg, state, now| {
            Some(alg.debit(state, item.cost, now))
        });
    }

    /// Give back an item's cells (an owner's reservation whose request ended denied).
    pub fn refund(&self, item: &CheckItem) {
        self.update(item, |alg, state, now| alg.refund(state, item.cost, now));
    }

    /// Replace an item's state by `f(state)` under its shard lock (`None`: leave it).
    fn update(
        &self,
        item: &CheckItem,
        f: impl FnOnce(&AnyAlgorithm, Option<AnyState>, Nanos) -> Option<AnyState>,
    ) {
        let hash = self.hash(&item.key);
        let mut shard = self.lock(Self::shard_of(hash));
        let now = self.clock.now();
        let before = shard.tables[self.table_of(item)]
            .find(hash, |e| *e.key == *item.key)
            .map(|e| e.state);
        if let Some(after) = f(&self.algorithm_of(item), before, now) {
            self.write(&mut shard, item, hash, after, now);
        }
    }
}
