//! Every decision of one policy, per minute, a child of `top/mod.rs`: the allowed requests
//! (exact) and the distinct keys seen, allowed or denied. The denials ring (`minutes.rs`)
//! only holds keys that were denied, and counts a key's allowed requests only from its
//! first denial; this is what `keys_seen` and `allowed` of the admin answers come from.
//!
//! Written by every decision without the policy's lock: atomics only. A minute's slot is
//! emptied under a small lock by the first decision of a new minute, which then publishes
//! the minute's stamp (release); a writer reads the stamp (acquire) before it writes, so
//! nothing of the new minute is written before the slot is empty.
//!
//! Distinct keys: the first [`EXACT`] hashes of a minute sit in an open-addressing set
//! (exact); past that the minute says so and its HyperLogLog estimates. A window is exact
//! while none of its minutes overflowed.
//!
//! Each thread remembers the last key it noted (which summary, minute and hash): the same
//! key again in the same minute on the same thread (a busy client on its connection's
//! worker) is already in both sets, so only its allowed count is written. Nothing is
//! lost: adding a hash a set holds changes nothing.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::hll::{AtomicHll, Hll};
use super::minutes::RING;

/// Distinct hashes a minute counts exactly.
const EXACT: usize = 64;

#[derive(Debug)]
struct SeenMinute {
    /// The minute held, plus one (0: none yet).
    stamp: AtomicU64,
    allowed: AtomicU64,
    /// Hashes (0 is empty: a hash of 0 is stored as 1).
    exact: [AtomicU64; EXACT],
    overflow: AtomicBool,
    distinct: AtomicHll,
}

impl Default for SeenMinute {
    fn default() -> Self {
        SeenMinute {
            stamp: AtomicU64::new(0),
            allowed: AtomicU64::new(0),
            exact: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicBool::new(false),
            distinct: AtomicHll::default(),
        }
    }
}

/// Sixteen minutes of every decision of one policy.
#[derive(Debug)]
pub(super) struct Seen {
    minutes: [SeenMinute; RING],
    /// Held while a slot is emptied for a new minute.
    turn: Mutex<()>,
    /// This summary among every one the process made (never 0, never reused, unlike an
    /// address): what [`LAST`] names it by.
    id: u64,
}

impl Default for Seen {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Seen {
            minutes: Default::default(),
            turn: Mutex::new(()),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

thread_local! {
    /// The last key this thread noted, as (summary id, minute, hash): in that minute's
    /// sets already (see the module).
    static LAST: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// A window's decisions.
pub(super) struct SeenWindow {
    pub allowed: u64,
    pub keys: u64,
    pub keys_exact: bool,
}

impl Seen {
    /// One decision for the key of `hash` in `minute`.
    pub fn note(&self, minute: u64, hash: u64, allowed: bool) {
        let slot = &self.minutes[(minute % RING as u64) as usize];
        if slot.stamp.load(Ordering::Acquire) != minute + 1 {
            let _turn = self.turn.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.stamp.load(Ordering::Acquire) != minute + 1 {
                slot.allowed.store(0, Ordering::Relaxed);
                for h in &slot.exact {
                    h.store(0, Ordering::Relaxed);
                }
                slot.overflow.store(false, Ordering::Relaxed);
                slot.distinct.clear();
                slot.stamp.store(minute + 1, Ordering::Release);
            }
        }
        if allowed {
            slot.allowed.fetch_add(1, Ordering::Relaxed);
        }
        let last = (self.id, minute, hash);
        if LAST.get() == last {
            return;
        }
        slot.distinct.insert(hash);
        if !slot.overflow.load(Ordering::Relaxed) && !slot.insert_exact(hash.max(1)) {
            slot.overflow.store(true, Ordering::Relaxed);
        }
        LAST.set(last);
    }

    /// The minutes of `[now - back, now]`.
    pub fn window(&self, now: u64, back: u64) -> SeenWindow {
        let mut allowed = 0;
        let mut exact = HashSet::new();
        let mut keys_exact = true;
        let mut distinct = Hll::default();
        for m in &self.minutes {
            let held = m.stamp.load(Ordering::Acquire).checked_sub(1);
            if !held.is_some_and(|t| t <= now && t + back >= now) {
                continue;
            }
            allowed += m.allowed.load(Ordering::Relaxed);
            keys_exact &= !m.overflow.load(Ordering::Relaxed);
            exact.extend(
                m.exact
                    .iter()
                    .map(|h| h.load(Ordering::Relaxed))
                    .filter(|&h| h != 0),
            );
            distinct.merge_atomic(&m.distinct);
        }
        let keys = match keys_exact {
            true => exact.len() as u64,
            false => distinct.estimate(),
        };
        SeenWindow {
            allowed,
            keys,
            keys_exact,
        }
    }
}

impl SeenMinute {
    /// `hash` in the exact set (already there or added); `false` when the set is full.
    fn insert_exact(&self, hash: u64) -> bool {
        let start = (hash as usize) % EXACT;
        for i in 0..EXACT {
            let cell = &self.exact[(start + i) % EXACT];
            match cell.load(Ordering::Relaxed) {
                h if h == hash => return true,
                0 => match cell.compare_exchange(0, hash, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return true,
                    Err(h) if h == hash => return true,
                    Err(_) => {}
                },
                _ => {}
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's memory of its last key skips only what a set already holds: the same
    /// key in another summary, or in the next minute, is counted there.
    #[test]
    fn a_key_noted_again_is_counted_once_per_summary_and_minute() {
        let (a, b) = (Seen::default(), Seen::default());
        for _ in 0..3 {
            a.note(7, 42, true);
        }
        b.note(7, 42, false);
        a.note(8, 42, true);
        let (wa, wb) = (a.window(7, 0), b.window(7, 0));
        assert_eq!((wa.allowed, wa.keys, wa.keys_exact), (3, 1, true));
        assert_eq!((wb.allowed, wb.keys), (0, 1));
        let next = a.window(8, 0);
        assert_eq!((next.allowed, next.keys), (1, 1));
        // Two keys in turn, then the first again: both held.
        a.note(8, 43, true);
        a.note(8, 42, true);
        assert_eq!(a.window(8, 0).keys, 2);
    }
}
