//! Every leased key's book on this node, in lock shards, bounded like the local site: each
//! policy holds at most `max_keys / SHARDS` books per shard (at least one); and, as the
//! local site's tables do (`site/local/write.rs`), a map that took in new books beyond a
//! quarter of its size sweeps out the spent ones (`LeaseBook::is_spent`: nothing held,
//! owed or out), so books follow live keys, not every key seen. A full map first
//! drops its idle books (they hold nothing); if that frees less than an eighth of it, live
//! books go too until an eighth is free, so a sweep happens at most once per `cap / 8` new
//! keys: O(1) amortized per key, never a rescan on every new key under the shard lock.
//!
//! Evicting a live book never over-admits: its cells were debited at the coordinator when
//! they were granted, so dropping them only strands them (they expire there unspent). A
//! book with a refill out is kept while others can go, so the refill's grant lands.

use std::sync::{Mutex, MutexGuard};

use super::book::LeaseBook;
use super::params::LeaseParams;
use crate::clock::Nanos;

/// Lock shards of the books.
pub(super) const SHARDS: usize = 64;

/// One policy's books in one shard, by store key.
/// (hashbrown's default hasher: these keys are already keyed hashes or addresses, and the
/// std SipHash cost more than the rest of a take on a hot key.)
type Books = hashbrown::HashMap<Box<str>, LeaseBook>;

/// New books a map takes in beyond a quarter of its size before it sweeps (as the local
/// site's `SWEEP_SLACK`): a small map does not sweep on every other new key.
const SWEEP_SLACK: usize = 8;

/// One lock shard: a map per policy (index = the policy's), grown on first use, and the
/// books each took in since its last sweep.
#[derive(Default)]
pub(super) struct Shard {
    policies: Vec<Books>,
    fresh: Vec<usize>,
}

impl Shard {
    /// The book of `key`, if held.
    pub(super) fn get_mut(&mut self, policy: usize, key: &str) -> Option<&mut LeaseBook> {
        self.policies.get_mut(policy)?.get_mut(key)
    }

    /// The book of `key` (whose policy's numbers are `p`), created empty; a full map first
    /// makes room (`cap` books per shard), one that took in many new books sweeps out the
    /// spent ones. Also returns how many live books were evicted for it.
    pub(super) fn book(
        &mut self,
        policy: usize,
        key: &str,
        p: &LeaseParams,
        cap: usize,
        now: Nanos,
    ) -> (&mut LeaseBook, u64) {
        if self.policies.len() <= policy {
            self.policies.resize_with(policy + 1, Books::default);
            self.fresh.resize(policy + 1, 0);
        }
        let books = &mut self.policies[policy];
        let fresh = &mut self.fresh[policy];
        let mut evicted = 0;
        if !books.contains_key(key) {
            if books.len() >= cap.max(1) {
                evicted = make_room(books, cap.max(1), now);
                *fresh = 0;
            } else if *fresh > books.len() / 4 + SWEEP_SLACK {
                books.retain(|_, b| {
                    b.drop_expired(p, now);
                    !b.is_spent(now)
                });
                *fresh = 0;
            }
            *fresh += 1;
            books.insert(key.into(), LeaseBook::default());
        }
        (books.get_mut(key).expect("inserted above"), evicted)
    }

    fn len(&self) -> usize {
        self.policies.iter().map(Books::len).sum()
    }
}

/// Drop idle books; if fewer than an eighth of `cap` is then free, evict live ones (those
/// without a refill out first) down to seven eighths. Returns the live books evicted.
fn make_room(books: &mut Books, cap: usize, now: Nanos) -> u64 {
    books.retain(|_, b| !b.is_idle(now));
    let target = cap - cap.div_ceil(8).min(cap);
    let mut evicted = 0;
    for spare_calls_out in [true, false] {
        let mut excess = books.len().saturating_sub(target);
        books.retain(|_, b| {
            if excess == 0 || (spare_calls_out && b.in_flight()) {
                return true;
            }
            excess -= 1;
            evicted += 1;
            false
        });
    }
    evicted
}

/// All shards.
pub(super) struct Shelf {
    shards: Box<[Mutex<Shard>]>,
}

impl Shelf {
    pub(super) fn new() -> Self {
        Shelf {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    pub(super) fn lock(&self, key: &str) -> MutexGuard<'_, Shard> {
        // Books are plain values updated in one step: a poisoned lock is still consistent.
        self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Books held, across shards and policies.
    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

pub(super) fn shard_of(key: &str) -> usize {
    use std::hash::BuildHasher;
    static HASHER: std::sync::LazyLock<hashbrown::DefaultHashBuilder> =
        std::sync::LazyLock::new(hashbrown::DefaultHashBuilder::default);
    // The high bits pick the shard; the map inside uses its own hasher's low bits.
    (HASHER.hash_one(key) >> 32) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;
    use crate::site::lease::ask::RefillAsk;
    use crate::site::lease::{Grant, LeaseParams, Returned};

    const ONE: RefillAsk = RefillAsk {
        want: 1,
        lead: 0,
        long: 0,
        returned: Returned::NONE,
        demand: 0,
    };

    fn params() -> LeaseParams {
        let nz = |n| NonZeroU32::new(n).expect("non-zero");
        let ms = Duration::from_millis;
        LeaseParams::new(nz(10), ms(1000), nz(5), ms(50), ms(20), nz(50)).expect("valid")
    }

    /// Sixteen books in a map of 16: even ones hold a cell, odd ones have a call out.
    fn full_shard() -> Shard {
        let mut shard = Shard::default();
        let grant = Grant {
            granted: 1,
            frontier: 0,
            busy: 1_000,
            long: false,
            ..Grant::default()
        };
        for i in 0..16 {
            let (b, _) = shard.book(0, &format!("k{i}"), &params(), 16, 0);
            b.begin(0, ONE);
            if i % 2 == 0 {
                b.on_grant(&params(), ONE, grant, 0);
            }
        }
        shard
    }

    #[test]
    fn idle_books_go_first() {
        let mut shard = full_shard();
        for i in 0..4 {
            shard
                .get_mut(0, &format!("k{i}"))
                .expect("held")
                .on_error(ONE);
        }
        // k1 and k3 had only their call: now idle.
        let (_, evicted) = shard.book(0, "new", &params(), 16, 0);
        assert_eq!(evicted, 0);
        assert_eq!(shard.len(), 15);
    }

    #[test]
    fn a_full_map_evicts_an_eighth_sparing_calls_out() {
        let mut shard = full_shard();
        let (_, evicted) = shard.book(0, "new", &params(), 16, 0);
        assert_eq!(evicted, 2, "down to seven eighths");
        assert_eq!(shard.len(), 15);
        let out = shard.policies[0].values().filter(|b| b.in_flight()).count();
        assert_eq!(out, 8, "books with a refill out are kept");
        // The next new key finds room without a sweep.
        assert_eq!(shard.book(0, "next", &params(), 16, 0).1, 0);
    }

    #[test]
    fn policies_are_bounded_apart() {
        let mut shard = Shard::default();
        for i in 0..100 {
            shard
                .book(1, &format!("k{i}"), &params(), 4, 0)
                .0
                .begin(0, ONE);
        }
        shard.book(0, "other", &params(), 4, 0);
        assert!(shard.policies[1].len() <= 4);
        assert_eq!(shard.policies[0].len(), 1);
    }

    /// A map that took in new books past a quarter of its size sweeps out the spent ones,
    /// but keeps a book whose expired returnable cells are still to be given back (and
    /// its next call carries them).
    #[test]
    fn spent_books_leave_but_a_return_owed_stays() {
        let p = params();
        let mut shard = Shard::default();
        let returnable = Grant {
            granted: 1,
            frontier: 0,
            busy: 1_000,
            returnable: true,
            at: 7,
            ..Grant::default()
        };
        let (owed, _) = shard.book(0, "owed", &p, 1_000, 0);
        owed.begin(0, ONE);
        owed.on_grant(&p, ONE, returnable, 0);
        let held = Grant {
            returnable: false,
            ..returnable
        };
        for i in 0..16 {
            let (b, _) = shard.book(0, &format!("k{i}"), &p, 1_000, 0);
            b.begin(0, ONE);
            b.on_grant(&p, ONE, held, 0);
        }
        assert_eq!(shard.len(), 17, "books holding cells stay");
        // A second later every cell has expired: 16 new keys, each holding a cell, sweep
        // out the 16 spent books.
        let later = 1_000_000_000;
        for i in 0..16 {
            let (b, _) = shard.book(0, &format!("new{i}"), &p, 1_000, later);
            b.begin(later, ONE);
            b.on_grant(&p, ONE, held, later);
        }
        assert_eq!(shard.len(), 17, "the old keys left, the new came");
        assert!(shard.get_mut(0, "k0").is_none());
        let owed = shard.get_mut(0, "owed").expect("a return is owed: kept");
        owed.take(&p, 1, later);
        let ask = owed.wants(&p, later).expect("a request waits");
        assert_eq!((ask.returned.cells, ask.returned.granted_at), (1, 7));
    }
}
