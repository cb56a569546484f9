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
#[derive(Debug, Default)]
pub(super) struct Seen {
    minutes: [SeenMinute; RING],
    /// Held while a slot is emptied for a new minute.
    turn: Mutex<()>,
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
        slot.distinct.insert(hash);
        if !slot.overflow.load(Ordering::Relaxed) && !slot.insert_exact(hash.max(1)) {
            slot.overflow.store(true, Ordering::Relaxed);
        }
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
