//! Exact rate arithmetic shared by the time-based per-key algorithms of the
//! limit step.
//!
//! `period / limit` is rarely a whole number of nanoseconds (1 s / 3 is not),
//! and rounding the emission interval either way would make an algorithm
//! admit more or fewer than its advertised quota over a long run. Instead time
//! is counted in *ticks* of `1 / scale` ns, with `scale = limit / gcd(period_ns,
//! limit)`, so that one cell lasts exactly `interval = period_ns / gcd` ticks.
//! For round quotas (100 per second) the scale is 1 and ticks are nanoseconds.
//! Ticks are `u128`: `u64` nanoseconds times a `u32` scale cannot overflow.

use std::num::NonZeroU32;
use std::time::Duration;

use strength_reduce::StrengthReducedU64;

use super::{Nanos, QuotaError};
use crate::clock::duration_to_nanos;
use crate::spec::{MAX_PERIOD, MIN_PERIOD};

/// Validates a period and returns it in nanoseconds.
pub(crate) fn period_nanos(period: Duration) -> Result<Nanos, QuotaError> {
    if period < MIN_PERIOD {
        Err(QuotaError::PeriodTooShort(period))
    } else if period > MAX_PERIOD {
        Err(QuotaError::PeriodTooLong(period))
    } else {
        Ok(duration_to_nanos(period))
    }
}

/// `limit` cells per `period`, as exact integer tick arithmetic.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    /// Ticks per nanosecond (`limit / gcd`); also the refill of a token bucket
    /// in ticks per nanosecond.
    scale: u64,
    /// Ticks per cell (`period_ns / gcd`): the exact emission interval.
    interval: u64,
    /// `interval` as a multiply-and-shift divisor: every decision divides by it once
    /// (`remaining`), and a hardware 64-bit division cost more than the rest of a GCRA
    /// decision (`benches/limiter.rs`). Exact, like the division it replaces.
    per_cell: StrengthReducedU64,
}

/// Equal when `scale` and `interval` are (`per_cell` follows from `interval`).
impl PartialEq for Rate {
    fn eq(&self, other: &Self) -> bool {
        (self.scale, self.interval) == (other.scale, other.interval)
    }
}

impl Eq for Rate {}

impl Rate {
    /// Builds the tick system for `limit` per `period`.
    pub fn new(limit: NonZeroU32, period: Duration) -> Result<Self, QuotaError> {
        let period_ns = period_nanos(period)?;
        let limit = u64::from(limit.get());
        let g = gcd(period_ns, limit);
        let interval = period_ns / g;
        Ok(Self {
            scale: limit / g,
            interval,
            per_cell: StrengthReducedU64::new(interval),
        })
    }

    /// A timestamp or duration in ticks.
    #[inline]
    pub fn ticks(&self, ns: Nanos) -> u128 {
        u128::from(ns) * u128::from(self.scale)
    }

    /// Ticks per nanosecond.
    pub(crate) fn scale(&self) -> u128 {
        u128::from(self.scale)
    }

    /// The duration of `cells` cells in ticks.
    #[inline]
    pub fn cells(&self, cells: u64) -> u128 {
        u128::from(cells) * u128::from(self.interval)
    }

    /// How many whole cells fit in `ticks` (rounded down: never promise more).
    #[inline]
    pub(crate) fn whole_cells(&self, ticks: u128) -> u64 {
        // u128 division is a slow library call; every real timestamp fits in u64.
        match u64::try_from(ticks) {
            Ok(t) => t / self.per_cell,
            Err(_) => saturate(ticks / u128::from(self.interval)),
        }
    }

    /// Nanoseconds until a state that holds `capacity − deficit` ticks (nothing while the
    /// deficit exceeds the capacity: a debt) and gains one tick per tick holds one more
    /// whole cell than now; 0 when no more cells fit in `capacity` (the state is full).
    pub(crate) fn until_cell(&self, deficit: u128, capacity: u128) -> Nanos {
        self.until_next(
            self.whole_cells(capacity.saturating_sub(deficit)),
            deficit,
            capacity,
        )
    }

    /// [`Rate::until_cell`] for a caller that already holds `cells`, the whole cells in
    /// `capacity − deficit` (its `remaining`): one division fewer on every decision.
    #[inline]
    pub(crate) fn until_next(&self, cells: u64, deficit: u128, capacity: u128) -> Nanos {
        let more = self.cells(cells.saturating_add(1));
        if more > capacity {
            return 0;
        }
        self.ns_ceil(more + deficit - capacity)
    }

    /// Ticks back to nanoseconds, rounded up: a wait reported 1 ns late is
    /// harmless, one reported early would be denied again.
    #[inline]
    pub(crate) fn ns_ceil(&self, ticks: u128) -> Nanos {
        match (self.scale, u64::try_from(ticks)) {
            (1, _) => saturate(ticks),
            (scale, Ok(t)) => t.div_ceil(scale),
            (scale, Err(_)) => saturate(ticks.div_ceil(u128::from(scale))),
        }
    }
}

/// Clamps a `u128` into `u64` so "too far to express" reads as "forever".
#[inline]
pub(crate) fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// Euclid; both inputs are non-zero here, so the result is too.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
    }

    #[test]
    fn round_quota_uses_nanosecond_ticks() {
        let r = Rate::new(nz(100), Duration::from_secs(1)).expect("valid");
        assert_eq!((r.scale, r.interval), (1, 10_000_000));
        assert_eq!(r.whole_cells(29_999_999), 2);
        assert_eq!(r.whole_cells(30_000_000), 3);
    }

    #[test]
    fn thirds_are_exact() {
        let r = Rate::new(nz(3), Duration::from_secs(1)).expect("valid");
        assert_eq!(r.cells(3), r.ticks(1_000_000_000));
        assert_eq!(r.ns_ceil(r.cells(1)), 333_333_334);
    }

    #[test]
    fn period_bounds() {
        assert_eq!(
            period_nanos(Duration::from_micros(999)),
            Err(QuotaError::PeriodTooShort(Duration::from_micros(999)))
        );
        assert!(period_nanos(MAX_PERIOD + Duration::from_nanos(1)).is_err());
        assert_eq!(period_nanos(MIN_PERIOD), Ok(1_000_000));
    }
}
