//! *Long cells*: cells a node may spend at any time within `long_life` of their grant, not
//! only within `lease_ttl` of conforming, and what the coordinator keeps so that they do not
//! loosen the bound (`lease.lua` keeps the same in its third key).
//!
//! A thin node (a request or two per TTL) spends at most one or two cells of any batch of
//! ordinary cells before they expire: their conform times are one `T` apart, so a batch
//! covers little more than one TTL of the node's time, and it calls about once per request
//! whatever it asks for. What it needs are cells spread over a longer time. A long cell is
//! one: valid from its grant for `long_life` (several TTLs).
//!
//! # Why the bound holds
//!
//! In token-bucket terms (the GCRA's level is `(now + τ − tat) / T` cells), a cell spent in
//! a window `[a, b]` was taken in `[a − ttl, b]` unless it is a long cell taken earlier and
//! still *held*: granted at `g < a − ttl` and valid at `a`, so `a − ttl ≤ g + long_life −
//! ttl`. Each long cell is therefore held from its grant until `g + long_life − ttl`, and
//! while cells are held the bucket may not refill past `burst − held`: the level obeys
//! `level(s) ≤ burst − held(s)` at every instant `s`, i.e. `tat ≥ s + held(s) · T`. Then
//! the cells spent in `[a, b]` are at most the level at `a − ttl` plus what refills until
//! `b`, plus the cells held at `a − ttl`: `burst − held + (D + ttl) · rate + held`, the same
//! bound as ordinary cells (`grant.rs`).
//!
//! The cap binds between calls too (a bucket refills without being asked), so the
//! coordinator keeps the key's *tat less its held cells*, `t' = tat − held · T`: the cap is
//! then the GCRA's own `t' ≥ now`, which a plain `max(t', now)` applies at any call, and
//! the held cells come off the level (`level = (now + τ − t') / T − held`). A hold's cells
//! are taken when it ends, from the bucket as it was then: `t' = max(t', until) + n · T`,
//! so the level does not jump (that is `tat ≥ until + held(until) · T`). A debit on the key
//! (a response's cost; `check.lua` on the same state in Redis) is a take on `t'` like any
//! other, so the held cells cannot absorb it.
//!
//! What long cells cost is burst: while held they keep that many cells of it from everyone
//! (only while the key is well under its limit, [`LONG_BUSY`], and never the last
//! [`LONG_KEEP`]th of it, see `grant.rs`). They cost no rate: each is one cell of the key's
//! sequence, as an ordinary cell is.

use std::collections::VecDeque;

use super::params::LeaseParams;
use crate::clock::Nanos;

/// Long cells are granted only while the key's grant rate (`Grant::busy`, before the
/// grant) is under this, per mille of its limit: near the limit a cell that expires unspent
/// is an admission lost, and a long batch has a margin that mostly expires. (At normal load
/// on `simulate --normal` the rate, wasted cells included, is 700–770; at 700 no long cell
/// was granted there, and at the limit it stays near 1 000.)
pub const LONG_BUSY: u32 = 800;

/// A long grant leaves at least `burst / LONG_KEEP` cells conforming (`grant.rs`), and a
/// key whose burst is under `LONG_KEEP` grants no long cells (it could be held whole). At 4 the
/// normal-load trace made 0.146 calls a request, at 8 0.127–0.130 (six seeds, none denied),
/// at 16 0.121–0.126 but with denials at half the limit on two seeds of six.
pub const LONG_KEEP: u32 = 8;

/// Hold ends are rounded up to `hold / MERGE_WITHIN` (`Holds::hold`).
const MERGE_WITHIN: u64 = 32;

/// The long cells one key's coordinator holds: `(until, n)` in grant order (so `until`
/// ascending: every hold lasts `long_life − ttl`), and their sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holds {
    queue: VecDeque<(Nanos, u32)>,
    held: u32,
    /// Until when the holds can still bind (ns): the latest `until + held(until) · T`, an
    /// upper bound. The in-process coordinator keeps a key while this is ahead (its sweep
    /// would otherwise forget a cap that has not been applied yet).
    peak: Nanos,
}

impl Holds {
    /// Cells held now (after [`Holds::settle`] has dropped the ended holds).
    pub fn held(&self) -> u32 {
        self.held
    }

    /// Settle the holds that ended before `now` into the key's state `tat` (ticks; the
    /// tat less the held cells, `None` for a full key): each hold's cells are taken at its
    /// end, from the bucket as it was then, `tat = max(tat, until) + n · T`, so the level
    /// does not jump when a hold ends.
    pub fn settle(&mut self, p: &LeaseParams, tat: Option<u128>, now: Nanos) -> u128 {
        let mut tat = tat.unwrap_or(0);
        while let Some(&(until, n)) = self.queue.front() {
            if until >= now {
                break;
            }
            tat = tat.max(p.rate.ticks(until)) + p.rate.cells(u64::from(n));
            self.held -= n;
            self.queue.pop_front();
        }
        tat
    }

    /// `n` long cells granted at `now`. A hold's end is rounded up to a 32nd of a hold
    /// (whole microseconds, as `lease.lua` rounds it), and holds with the same end are one
    /// (holding longer only lowers the level): so a key keeps at most 34 holds,
    /// however many grants (`lease.lua` parses them on every call), and no hold outlives
    /// its cells by more than a 32nd of a hold.
    pub fn hold(&mut self, p: &LeaseParams, n: u32, now: Nanos) {
        if n == 0 {
            return;
        }
        let until = hold_end(p, now);
        self.held += n;
        let cells = u64::try_from(p.ns_ceil(p.rate.cells(u64::from(n)) as i128)).unwrap_or(0);
        self.peak = self.peak.max(until).saturating_add(cells);
        match self.queue.back_mut() {
            Some(last) if last.0 >= until => last.1 += n,
            _ => self.queue.push_back((until, n)),
        }
    }

    /// Holds kept.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.queue.len()
    }

    /// Whether settling the holds may still raise the key's state past `now` or later.
    pub fn binds(&self, now: Nanos) -> bool {
        self.peak >= now
    }
}

/// When a hold of a long cell granted at `now` ends: `now + long_life − ttl`, rounded up
/// to a multiple of a 32nd of that hold in whole microseconds (`lease.lua` computes
/// the same from its microsecond clock).
fn hold_end(p: &LeaseParams, now: Nanos) -> Nanos {
    let hold = p.long_life.saturating_sub(p.ttl);
    let until = now.saturating_add(hold);
    let q = hold / 1_000 / MERGE_WITHIN * 1_000;
    match q {
        0 => until,
        q => until.div_ceil(q).saturating_mul(q),
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    const MS: Nanos = 1_000_000;

    /// 1000/s, burst 100, TTL 50 ms: a hold lasts 150 ms.
    fn params() -> LeaseParams {
        let nz = |n| NonZeroU32::new(n).expect("non-zero");
        let ms = Duration::from_millis;
        LeaseParams::new(nz(1000), ms(1000), nz(100), ms(50), ms(20), nz(50)).expect("valid")
    }

    #[test]
    fn an_ended_hold_is_taken_from_the_bucket_as_it_was_at_its_end() {
        let p = params();
        let mut h = Holds::default();
        h.hold(&p, 5, 0);
        h.hold(&p, 3, 100 * MS);
        // At 120 ms both are held: nothing is settled, 8 cells are off the level.
        assert_eq!(h.settle(&p, Some(7), 120 * MS), 7);
        assert_eq!(h.held(), 8);
        // Hold ends are rounded up to multiples of 4.687 ms (150 ms / 32 in whole µs): the
        // first ends at 154.671 ms, the second at 253.098 ms. At 156 ms the first has
        // ended: its 5 cells are taken at its end (a full bucket then: the state was
        // behind), so the tat is 154.671 ms + 5 ms, the held 3 ms on top of that.
        let q = 4_687_000;
        assert_eq!(
            h.settle(&p, Some(7), 156 * MS),
            p.rate.ticks(33 * q) + p.rate.cells(5)
        );
        assert_eq!(h.held(), 3);
        // A state already past the end keeps its order: the cells come after it.
        let mut h2 = Holds::default();
        h2.hold(&p, 5, 0);
        let late = p.rate.ticks(170 * MS);
        assert_eq!(h2.settle(&p, Some(late), 200 * MS), late + p.rate.cells(5));
        // The second's peak, 3 cells after its end, is when the key may be forgotten.
        let peak = 54 * q + 3 * MS;
        assert!(h.binds(peak) && !h.binds(peak + 1));
    }

    #[test]
    fn holds_close_together_join_and_never_end_early_or_chain() {
        let p = params();
        let mut h = Holds::default();
        // A grant every millisecond for a second: at most 34 holds live at once, and
        // what is held is the cells of the last 150 ms, plus at most a 32nd of a hold
        // (4.6875 ms) more: joined holds do not chain into one that never ends.
        for ms in 0..1_000 {
            h.hold(&p, 1, ms * MS);
            let _ = h.settle(&p, None, ms * MS);
            assert!(h.count() <= 34, "{} holds at {ms} ms", h.count());
            if ms >= 150 {
                assert!(
                    (151..=156).contains(&h.held()),
                    "{} held at {ms} ms",
                    h.held()
                );
            }
        }
    }
}
