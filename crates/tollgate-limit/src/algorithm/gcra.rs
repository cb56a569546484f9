//! GCRA (generic cell rate algorithm): the default per-key decision of the
//! limit step, because it needs one number per key and is exact.
//!
//! # Admission rule
//!
//! With emission interval `T = period / limit` and tolerance `τ = burst · T`,
//! the state is the theoretical arrival time `tat` (the moment the key would be
//! full again). A request of cost `c` at `now` is admitted iff
//!
//! ```text
//! max(tat, now) + c·T − now ≤ τ
//! ```
//!
//! and then `tat ← max(tat, now) + c·T`. A fresh key has `tat ≤ now`. From a
//! fresh key, any interval of length `D` therefore admits at most
//! `burst + ⌊D · limit / period⌋` cells.
//!
//! # Rounding
//!
//! None. Time is kept in ticks of `1/scale` ns (see `rate.rs`) where `T` is a
//! whole number, so the rule above is evaluated exactly. Only results reported
//! in nanoseconds are rounded: `retry_after` and `reset_after` up (a client told
//! to wait 1 ns too long is fine, one told too short is denied again; the
//! reported `retry_after` is still the earliest whole nanosecond that admits),
//! `remaining` down.
//!
//! # Cost above the burst
//!
//! `c > burst` can never satisfy the rule (`c·T > τ`), so it is denied with
//! `retry_after = NEVER` and spends nothing.
//!
//! # State size
//!
//! 16 bytes: one `u128` tick count.

use std::num::NonZeroU32;
use std::time::Duration;

use super::rate::Rate;
use super::{Algorithm, KeyDecision, NEVER, Nanos, QuotaError, QuotaInfo, Snapshot, Verdict};

/// A GCRA policy: `limit` cells per `period`, bursts of up to `burst` cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Tick arithmetic for `limit / period`.
    rate: Rate,
    /// Largest cost that can ever be admitted, and the size of a full bucket.
    burst: u32,
    /// `τ = burst · T` in ticks: how far ahead of `now` the tat may run.
    tolerance: u128,
    /// Advertised quota, kept only for `quota()`.
    limit: NonZeroU32,
    /// Advertised window, kept only for `quota()`.
    period: Duration,
}

/// Per-key GCRA state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time in ticks since the clock epoch.
    tat: u128,
}

impl Gcra {
    /// `limit` per `period` with bursts of `burst`; fails only for a period
    /// outside [`crate::spec::MIN_PERIOD`]..=[`crate::spec::MAX_PERIOD`].
    pub fn new(limit: NonZeroU32, period: Duration, burst: NonZeroU32) -> Result<Self, QuotaError> {
        let rate = Rate::new(limit, period)?;
        Ok(Self {
            rate,
            burst: burst.get(),
            tolerance: rate.cells(u64::from(burst.get())),
            limit,
            period,
        })
    }

    /// The tat that governs a request at `now_t`: a tat in the past means the
    /// bucket is full, which is the same as a tat of exactly now.
    #[inline]
    fn base(&self, state: Option<GcraState>, now_t: u128) -> u128 {
        state.map_or(now_t, |s| s.tat).max(now_t)
    }

    /// Headers for a key whose governing tat is `base` (`base ≥ now_t`).
    #[inline]
    fn snapshot(&self, base: u128, now_t: u128, now: Nanos) -> Snapshot {
        let lead = base - now_t;
        let remaining = self.rate.whole_cells(self.tolerance.saturating_sub(lead));
        Snapshot {
            remaining,
            reset_after: self.rate.ns_ceil(base).saturating_sub(now),
            // The tat's lead over now shrinks one tick per tick.
            next_after: self.rate.until_next(remaining, lead, self.tolerance),
        }
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    fn decide(&self, state: Option<GcraState>, cost: u32, now: Nanos) -> KeyDecision<GcraState> {
        let (verdict, state) = self.admit(state, cost, now);
        let snap = self.snapshot(state.tat, self.rate.ticks(now), now);
        KeyDecision {
            verdict,
            state,
            remaining: snap.remaining,
            reset_after: snap.reset_after,
            next_after: snap.next_after,
        }
    }

    #[inline]
    fn admit(&self, state: Option<GcraState>, cost: u32, now: Nanos) -> (Verdict, GcraState) {
        let now_t = self.rate.ticks(now);
        let base = self.base(state, now_t);
        let after = base + self.rate.cells(u64::from(cost));
        if after - now_t <= self.tolerance {
            return (Verdict::Allow, GcraState { tat: after });
        }
        let retry_after = if cost > self.burst {
            NEVER
        } else {
            // Earliest t with base + spend − t ≤ τ (base stays the governing
            // tat until then because the deny means base > now).
            self.rate
                .ns_ceil(after - self.tolerance)
                .saturating_sub(now)
        };
        (Verdict::Deny { retry_after }, GcraState { tat: base })
    }

    #[inline]
    fn peek(&self, state: Option<GcraState>, now: Nanos) -> Snapshot {
        let now_t = self.rate.ticks(now);
        self.snapshot(self.base(state, now_t), now_t, now)
    }

    #[inline]
    fn is_idle(&self, state: &GcraState, now: Nanos) -> bool {
        state.tat <= self.rate.ticks(now)
    }

    /// `tat ← max(tat, now) + c·T` without the tolerance test: past `now + τ` is a debt.
    fn debit(&self, state: Option<GcraState>, cost: u32, now: Nanos) -> GcraState {
        let now_t = self.rate.ticks(now);
        GcraState {
            tat: self.base(state, now_t) + self.rate.cells(u64::from(cost)),
        }
    }

    /// `tat ← max(tat − c·T, now)`: a tat at or before now is a full bucket.
    fn refund(&self, state: GcraState, cost: u32, now: Nanos) -> GcraState {
        let now_t = self.rate.ticks(now);
        GcraState {
            tat: state
                .tat
                .saturating_sub(self.rate.cells(u64::from(cost)))
                .max(now_t),
        }
    }

    fn quota(&self) -> QuotaInfo {
        QuotaInfo {
            limit: u64::from(self.limit.get()),
            period: self.period,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).expect("non-zero literal")
    }

    #[test]
    fn burst_then_steady_rate() {
        let g = Gcra::new(nz(10), Duration::from_secs(1), nz(3)).expect("valid");
        let mut s = None;
        for left in [2, 1, 0] {
            let d = g.decide(s, 1, 0);
            assert_eq!((d.verdict, d.remaining), (Verdict::Allow, left));
            s = Some(d.state);
        }
        let d = g.decide(s, 1, 0);
        assert_eq!(
            d.verdict,
            Verdict::Deny {
                retry_after: 100_000_000
            }
        );
        assert_eq!(d.reset_after, 300_000_000);
        assert!(g.decide(s, 1, 100_000_000).verdict.admits());
    }

    #[test]
    fn debit_carries_a_debt_and_refund_gives_back() {
        let g = Gcra::new(nz(10), Duration::from_secs(1), nz(3)).expect("valid");
        // 5 cells spent elsewhere on a bucket of 3: two cells of debt.
        let s = g.debit(None, 5, 0);
        let d = g.decide(Some(s), 1, 0);
        assert_eq!(
            d.verdict,
            Verdict::Deny {
                retry_after: 300_000_000
            }
        );
        assert!(g.decide(Some(s), 1, 300_000_000).verdict.admits());
        // Giving back 4 of the 5 leaves room for 2.
        let back = g.refund(s, 4, 0);
        assert_eq!(g.decide(Some(back), 1, 0).remaining, 1);
        assert_eq!(g.refund(back, 9, 0), GcraState { tat: 0 });
    }

    #[test]
    fn oversized_cost_is_never() {
        let g = Gcra::new(nz(10), Duration::from_secs(1), nz(3)).expect("valid");
        let d = g.decide(None, 4, 0);
        assert_eq!(d.verdict, Verdict::Deny { retry_after: NEVER });
        assert_eq!(d.remaining, 3);
    }
}
