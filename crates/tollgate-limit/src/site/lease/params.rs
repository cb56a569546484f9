//! The numbers one leased key runs on, shared by the node (`book.rs`) and the coordinator
//! (`grant.rs`, `lease.lua`) so both read a grant the same way.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::algorithm::{QuotaError, Rate};
use crate::clock::{Nanos, duration_to_nanos};

/// The reservation horizon in TTLs. At one TTL the default trace made 0.045 calls per
/// request; at two 0.039, with the same admissions; beyond two only the hot-key trace gains.
pub(crate) const HORIZON_TTLS: u64 = 2;

/// How long a long cell lives, in TTLs (`hold.rs`).
pub(crate) const LONG_TTLS: u64 = 4;

/// A returnable cell lives `lease_ttl` less an eighth of it, rounded down to whole `T`:
/// that many cells (`return_cells`) a key may take back over a return window
/// (`returns.rs`). At a quarter 32 nodes lost 0.1 % more and node loss 0.3 % more
/// (`simulate --matrix`).
pub(crate) const RETURN_SHARE: u64 = 8;

/// The return window in TTLs: a cell is taken back only this long after its grant, and a
/// key takes at most `return_cells` over any such window. A thin node's spare cell expires
/// a TTL after its grant and is reported at the node's next call; at 3 TTLs (half the
/// budget's rate) 32 nodes lost 0.6 % where 2 lose 0.4 %.
pub(crate) const RETURN_TTLS: u64 = 2;

/// A GCRA quota plus the lease knobs (`lease_max`, `lease_ttl`, `lease_target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseParams {
    /// Exact tick arithmetic for `limit / period` (see `algorithm/rate.rs`).
    pub(crate) rate: Rate,
    /// `burst`: cells that conform at once from a full key.
    pub(crate) burst: u32,
    /// `τ = burst · T` in ticks.
    pub(crate) tolerance: u128,
    /// How far ahead of its `now` the coordinator reserves cells: [`HORIZON_TTLS`] TTLs.
    /// The TTL counts from a cell's conform time, not from its grant, so a cell reserved
    /// further ahead than the TTL is still valid when it comes due, and the bound does not
    /// depend on the horizon (`grant.rs`). What a longer horizon risks is stranding: the
    /// cells a node holds when it dies or its traffic moves, which the node's batch sizes
    /// (its own demand, `size.rs`) keep small.
    pub(crate) horizon: Nanos,
    /// A cell not spent this long after it conforms is dropped: a dead, partitioned or idle
    /// node strands at most its last batch, and never spends a stale one.
    pub(crate) ttl: Nanos,
    /// A long cell may be spent this long after its grant ([`LONG_TTLS`] TTLs, `hold.rs`).
    pub(crate) long_life: Nanos,
    /// A node asks for about this much of its own recent traffic per call.
    pub(crate) target: Nanos,
    /// Upper bound of one batch.
    pub(crate) max: u32,
    /// Cells a key takes back from nodes over any [`LeaseParams::return_window`]
    /// (`returns.rs`): `lease_ttl / (RETURN_SHARE · T)`, 0 when a TTL holds fewer than
    /// [`RETURN_SHARE`] cells (no returns). Returnable cells live this many `T` less.
    pub(crate) return_cells: u32,
    /// How late after its grant a cell may still be returned, and the window of the
    /// return budget: [`RETURN_TTLS`] TTLs.
    pub(crate) return_window: Nanos,
}

impl LeaseParams {
    /// `limit` per `period` with bursts of `burst`, leased in batches of at most `max`
    /// cells that live `ttl` past their conformance time, sized for `target` of traffic.
    pub fn new(
        limit: NonZeroU32,
        period: Duration,
        burst: NonZeroU32,
        ttl: Duration,
        target: Duration,
        max: NonZeroU32,
    ) -> Result<Self, QuotaError> {
        let rate = Rate::new(limit, period)?;
        let ttl_ticks = rate.ticks(duration_to_nanos(ttl));
        let return_cells = ttl_ticks / rate.cells(RETURN_SHARE).max(1);
        Ok(LeaseParams {
            rate,
            burst: burst.get(),
            tolerance: rate.cells(u64::from(burst.get())),
            horizon: duration_to_nanos(ttl).saturating_mul(HORIZON_TTLS),
            ttl: duration_to_nanos(ttl),
            long_life: duration_to_nanos(ttl).saturating_mul(LONG_TTLS),
            target: duration_to_nanos(target).max(1),
            max: max.get(),
            return_cells: u32::try_from(return_cells).unwrap_or(u32::MAX),
            return_window: duration_to_nanos(ttl).saturating_mul(RETURN_TTLS),
        })
    }

    /// How much shorter a returnable cell lives (ticks): `return_cells · T`.
    pub(crate) fn return_cut(&self) -> i128 {
        self.rate.cells(u64::from(self.return_cells)) as i128
    }

    /// The same in nanoseconds, rounded up.
    pub fn return_cut_ns(&self) -> Nanos {
        self.ns_ceil(self.return_cut()).max(0) as Nanos
    }

    /// The emission interval `T` in ticks.
    pub(crate) fn interval(&self) -> i128 {
        self.rate.cells(1) as i128
    }

    /// Nanoseconds (possibly negative) to signed ticks.
    pub(crate) fn ticks(&self, ns: i64) -> i128 {
        i128::from(ns) * self.rate.scale() as i128
    }

    /// Signed ticks to nanoseconds, rounded up (later is the safe side for a conform time).
    pub(crate) fn ns_ceil(&self, ticks: i128) -> i64 {
        let s = self.rate.scale() as i128;
        let ns = -((-ticks).div_euclid(s));
        i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX })
    }
}
