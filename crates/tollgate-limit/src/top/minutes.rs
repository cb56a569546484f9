//! A ring of per-minute tables (`table.rs`) and their distinct-key counts (`hll.rs`), a
//! child of `top/mod.rs`: writes go to the current minute's, a query merges the minutes its
//! window covers (`merge.rs`), and a minute's memory is reused sixteen minutes later.

use super::hll::Hll;
use super::table::{Event, Slice, Table};
use crate::clock::Nanos;

/// A minute of the limiter's clock.
pub(super) const MINUTE: Nanos = 60_000_000_000;

/// Minutes kept: the current one and the fifteen before it (the `15m` window's).
pub(super) const RING: usize = 16;

/// One minute of one policy.
#[derive(Debug)]
pub(super) struct Minute {
    /// The minute held, plus one (0: none yet).
    stamp: u64,
    pub table: Table,
    /// Distinct keys denied (or shadow denied) this minute.
    pub distinct: Hll,
    /// Exact totals this minute.
    pub denied: u64,
    pub shadow_denied: u64,
}

impl Minute {
    /// The minute this holds, if any.
    pub fn minute(&self) -> Option<u64> {
        self.stamp.checked_sub(1)
    }

    /// Count one request of a shadow ask in slice `at` of the clock (the requests ring).
    pub fn count_request(&mut self, key: &str, label: Option<&str>, hash: u64, at: Slice) {
        self.table.count_request(key, label, hash, at);
    }

    /// Count one event (the table, the totals, and a denied key's distinct count).
    pub fn count(&mut self, key: &str, label: Option<&str>, hash: u64, event: Event) {
        self.table.count(key, label, hash, event);
        match event {
            Event::Denied => self.denied += 1,
            Event::ShadowDenied => self.shadow_denied += 1,
            Event::Allowed | Event::Request => return,
        }
        self.distinct.insert(hash);
    }
}

/// Sixteen minutes of tables of `capacity` keys each; memory grows with use up to that.
#[derive(Debug)]
pub(super) struct Minutes {
    slots: Vec<Minute>,
}

impl Minutes {
    pub fn new(capacity: usize) -> Self {
        Minutes {
            slots: (0..RING)
                .map(|_| Minute {
                    stamp: 0,
                    table: Table::new(capacity),
                    distinct: Hll::default(),
                    denied: 0,
                    shadow_denied: 0,
                })
                .collect(),
        }
    }

    /// Minute `minute`'s slot, emptied first if it held an older minute.
    pub fn at(&mut self, minute: u64) -> &mut Minute {
        let slot = &mut self.slots[(minute % RING as u64) as usize];
        if slot.stamp != minute + 1 {
            slot.stamp = minute + 1;
            slot.table.clear();
            slot.distinct.clear();
            (slot.denied, slot.shadow_denied) = (0, 0);
        }
        slot
    }

    /// The minutes of `[now - back, now]` that hold anything, with their minute.
    pub fn window_at(&self, now: u64, back: u64) -> impl Iterator<Item = (u64, &Minute)> {
        self.window(now, back)
            .filter_map(|m| Some((m.minute()?, m)))
    }

    /// The minutes of `[now - back, now]` that hold anything.
    pub fn window(&self, now: u64, back: u64) -> impl Iterator<Item = &Minute> {
        self.slots
            .iter()
            .filter(move |m| m.minute().is_some_and(|t| t <= now && t + back >= now))
    }

    /// Keys held across all minutes (what the memory bound counts).
    pub fn keys_held(&self) -> usize {
        self.slots.iter().map(|m| m.table.len()).sum()
    }
}
