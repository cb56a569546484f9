//! Returns: ordinary cells a node let expire unspent, given back to the key at its next
//! call, so that a thin node under overload can take a cell more than its waiting request
//! needs (`book.rs`) without the cell being lost when no request comes for it.
//!
//! # Why a return may not simply move `tat` back
//!
//! Giving `k` cells back moves the key's `tat` back by `k·T`: every cell granted after the
//! return conforms `k·T` earlier than it would have. The cells granted *before* the return
//! and after the returned ones keep their conform times, so against the history in which
//! the returned cells were never granted they conform up to `k·T` late, and a node may
//! spend them up to `k·T` past their TTL in that history. Unbounded, that breaks the
//! bound: a node reserves a run, lets its first cells expire, gives them back and spends
//! the rest at the end of their lives while the key grants the same span again
//! (`tests/lease/lease_returns.rs`, which fails with the budget or the shorter life removed).
//!
//! # The rule, and the bound it keeps
//!
//! Let `M` be `LeaseParams::return_cells` and `W` the return window. The coordinator
//! takes a return only while the key is in a *returnable run*: since the run began, every
//! grant left at least `M` cells of the key's bucket unreserved (`tat − now ≥ M·T` before
//! it: no grant came near a full bucket, none was clamped by `max(tat, now)`), no long cell
//! was held or ended its hold, nothing but the lease script wrote the key's state (a debit
//! ends the run at the next call), and every cell granted was
//! *returnable*: it lives `lease_ttl − M·T` past conforming, not `lease_ttl`. Returned
//! cells must come from a grant of the run and of the last `W`; and over any window of
//! length `W` the key takes at most `M` cells back.
//!
//! Take the history H in which the returned cells were never granted. While the run lasts
//! H's `tat` is the real one less the cells still to be returned (at most `M`: they are
//! returned within `W` of a grant, at most `M` per `W`), so H never clamps where the real
//! key did not (every grant had `M·T` of room): H is a GCRA history, its cells satisfy the
//! bound, and each real cell conforms at most `M·T` after its H conform time. Spent within
//! `lease_ttl − M·T` of its real conform time, it is spent within `lease_ttl` of its H
//! one, so every window of length `D` still admits at most `burst + (D + lease_ttl)·rate`.
//! A run ends (and with it all returns of its cells) at any call that breaks a condition.
//!
//! The proof counts each unspent cell given back once. A call can run twice: the store
//! sends it again after a dropped connection that may have come after the script ran
//! (`store/mod.rs`), and a cluster client retries. So each return carries an id, and the
//! run keeps the ids of the last eight returns it took: one seen again takes nothing.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ask::RefillAsk;
use super::grant::{Grant, grant};
use super::hold::Holds;
use super::params::LeaseParams;
use crate::clock::Nanos;

/// Grant rate (per mille, `grant.rs` `busy`) from which a key's grants are returnable.
/// Below it the key's bucket refills between calls and a run would not last; and a
/// returnable cell lives shorter, which costs a key near its limit admissions.
pub(super) const RETURN_BUSY: u32 = 950;

/// Cells a node gives back with a call: how many, when (coordinator time, ns) the
/// earliest of them was granted, and the return's id (`return_id`): a call the store
/// layer sends again after a dropped connection (`store/mod.rs`, or a cluster client's
/// retry) may have run already, and its cells must not be taken back twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Returned {
    pub cells: u32,
    pub granted_at: Nanos,
    pub id: u64,
}

/// Ids of the returns a run took that it remembers: a retry follows its call at once.
const IDS_KEPT: usize = 8;

/// A fresh return id: a random start per process, then counting, in 52 bits (exact as a
/// Lua number), never 0 (no id).
pub(super) fn return_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: OnceLock<u64> = OnceLock::new();
    let start = *START.get_or_init(|| RandomState::new().hash_one(std::process::id()));
    (start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) & ((1 << 52) - 1)).max(1)
}

impl Returned {
    /// Nothing given back.
    pub const NONE: Returned = Returned {
        cells: 0,
        granted_at: 0,
        id: 0,
    };
}

/// One key's returnable run and the returns it took: `lease.lua`'s `KEYS[4]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Returns {
    /// When the run began (ns): only cells granted after it are taken back. `None` (the
    /// Redis key absent): a run begins at the next call, whose own cells are not taken
    /// back (its grant is the first the run may take, strictly after `since`).
    since: Option<Nanos>,
    /// Returns the run took within the last window: (when, cells), oldest first, each
    /// "when" rounded up to a 32nd of the window (a return counted later stays in the
    /// budget longer), so at most 34 entries whatever `M`. A run's returns move only cells
    /// granted in it, so a new run starts afresh.
    recent: VecDeque<(Nanos, u32)>,
    /// The last returns taken (their ids, at most `IDS_KEPT`): one seen again is a retry.
    ids: VecDeque<u64>,
    /// Until when the run is kept (ns), as the Redis key's expiry (`PX`, whole ms): the
    /// key's state and a window. Past it there is no run.
    until: Nanos,
    /// The key's state was written by something else (a debit) since the last call: the
    /// next call ends the run, as `lease.lua` finds the key not as it left it.
    written: bool,
    /// Cells taken back in all (read by tests).
    taken: u64,
}

impl Returns {
    /// Cells taken back so far.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Whether a run is kept at `now` (the in-process coordinator keeps the key meanwhile,
    /// as Redis keeps `~ret:`).
    pub(super) fn kept(&self, now: Nanos) -> bool {
        self.since.is_some() && self.until >= now
    }

    /// The key's state was written by something else than a grant (a debit): the next
    /// call ends the run.
    pub(super) fn written_elsewhere(&mut self) {
        self.written = true;
    }

    /// The run as a call at `now` finds it: `None` if there is none (never begun, or
    /// expired), and whether the key was written by something else meanwhile.
    fn open(&mut self, now: Nanos) -> (Option<Nanos>, bool) {
        if now > self.until {
            self.since = None;
            self.recent.clear();
            self.ids.clear();
        }
        let written = std::mem::take(&mut self.written);
        (self.since, written && self.since.is_some())
    }

    /// After a call at `now` that ended the run (`broken`) or kept it from `since`, with
    /// the key's state at `tat_ns`: what `lease.lua` writes. An ended run begins again at
    /// `now` if there was one (none if there was none: the script writes nothing then).
    fn close(&mut self, p: &LeaseParams, broken: bool, since: Nanos, tat_ns: Nanos, now: Nanos) {
        if broken {
            self.recent.clear();
            if self.since.is_none() {
                return;
            }
        }
        self.since = Some(if broken { now } else { since });
        // lease.lua's PX: whole ms, plus 2, from Redis's ms clock; Redis keeps a key
        // until its ms clock passes that.
        let ms = 1_000_000;
        let px = (tat_ns.saturating_sub(now) + p.return_window) / 1_000_000 + 2;
        self.until = (now / ms + px + 1) * ms - 1;
    }

    /// Take back what `r` returns at `now`, in a run that began at `since` (see the module
    /// doc): the cells taken.
    fn accept(&mut self, p: &LeaseParams, since: Nanos, r: Returned, now: Nanos) -> u32 {
        let window = p.return_window;
        while self
            .recent
            .front()
            .is_some_and(|&(at, _)| at.saturating_add(window) < now)
        {
            self.recent.pop_front();
        }
        let retried = r.id != 0 && self.ids.contains(&r.id);
        if r.cells == 0
            || retried
            || r.granted_at <= since
            || now.saturating_sub(r.granted_at) > window
        {
            return 0;
        }
        let used: u32 = self.recent.iter().map(|&(_, n)| n).sum();
        let k = r.cells.min(p.return_cells.saturating_sub(used));
        if k > 0 {
            // A 32nd of the window in whole µs, as lease.lua rounds it.
            let q = window / 1_000 / 32 * 1_000;
            let at = if q > 0 { now.div_ceil(q) * q } else { now };
            match self.recent.back_mut() {
                Some(last) if last.0 == at => last.1 += k,
                _ => self.recent.push_back((at, k)),
            }
            self.taken += u64::from(k);
            if self.ids.len() == IDS_KEPT {
                self.ids.pop_front();
            }
            self.ids.push_back(r.id);
        }
        k
    }
}

/// The grant rule (`grant.rs`) with returns: settle the holds, break the run if this call
/// breaks a condition of the module doc, take back what the ask returns, grant, and mark
/// the grant returnable if the run goes on (`busy_before`: the key's grant rate before
/// this call, read cautiously: `busy::cautious`). `tat: None` is a key the coordinator
/// does not know (full, or forgotten): it breaks the run, so no cell granted before it was forgotten is taken back.
pub fn grant_returning(
    p: &LeaseParams,
    tat: Option<u128>,
    holds: &mut Holds,
    returns: &mut Returns,
    ask: RefillAsk,
    busy_before: u32,
    now: Nanos,
) -> (u128, Grant) {
    let (run_since, written) = returns.open(now);
    let since = run_since.unwrap_or(now);
    // No hold before settling: none held now, none ending at this call.
    let no_holds = holds.held() == 0;
    let settled = holds.settle(p, tat, now);
    let room = p.rate.ticks(now) + p.rate.cells(u64::from(p.return_cells));
    let run = p.return_cells > 0 && tat.is_some() && !written && settled >= room && no_holds;
    let back = match run {
        true => returns.accept(p, since, ask.returned, now),
        false => 0,
    };
    // `settled − back·T ≥ now`: the run left `M ≥ back` cells of room.
    let tat = settled - p.rate.cells(u64::from(back));
    let (tat, mut g) = grant(p, Some(tat), holds, ask, now);
    g.returnable = run && busy_before >= RETURN_BUSY && !g.long;
    let broken = !run || (g.granted > 0 && !g.returnable);
    returns.close(p, broken, since, p.rate.ns_ceil(tat), now);
    g.at = now;
    (tat, g)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    /// A busy key with a large budget (100 000/s, TTL 1 s: 12 500 cells per window of 2 s)
    /// takes a one-cell return every millisecond: the run keeps at most 34 entries (a 32nd
    /// of the window each), not one per return, and counts every cell.
    #[test]
    fn the_returns_kept_are_bounded_whatever_the_budget() {
        let nz = |n| NonZeroU32::new(n).expect("non-zero");
        let s = Duration::from_secs(1);
        let p = LeaseParams::new(nz(100_000), s, nz(10), s, s, nz(50)).expect("valid");
        assert_eq!(p.return_cells, 12_500);
        let mut r = Returns::default();
        let ms = 1_000_000;
        for i in 1..=5_000u64 {
            let back = Returned {
                cells: 1,
                granted_at: i * ms - 1,
                id: i,
            };
            assert_eq!(r.accept(&p, 0, back, i * ms), 1, "return {i}");
            assert!(r.recent.len() <= 34, "{} entries at {i} ms", r.recent.len());
        }
        let counted: u32 = r.recent.iter().map(|&(_, n)| n).sum();
        assert!(
            (2_000..=2_063).contains(&counted),
            "{counted} in the window"
        );
        assert_eq!(r.taken(), 5_000);
    }
}
