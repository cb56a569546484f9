//! Token bucket: a per-key decision of the limit step for operators who think
//! in "tokens and refill" rather than in arrival times.
//!
//! # Admission rule
//!
//! The bucket holds up to `burst` tokens and refills continuously at
//! `limit / period` tokens per unit of time, starting full. At `now` the level
//! is first refilled, `level ← min(burst, level + (now − last) · limit/period)`;
//! a request of cost `c` is admitted iff `level ≥ c`, and then `level ← level − c`.
//! Mathematically this admits exactly what [`super::Gcra`] admits with the same
//! numbers; it exists because its state (a level) maps directly onto headers
//! and onto operators' mental model.
//!
//! # Rounding
//!
//! None in the rule. The level is fixed-point with a denominator of
//! `interval` (see `rate.rs`): one token is `interval` units and the refill is
//! exactly `scale` units per nanosecond, so no fraction is ever lost between
//! refills (no floating-point drift). `retry_after`/`reset_after` round up to
//! the next nanosecond, `remaining` rounds down.
//!
//! # Cost above the burst
//!
//! Never fits in the bucket: denied with `retry_after = NEVER`.
//!
//! # State size
//!
//! 24 bytes: `u32` whole tokens + `u64` fraction + `u64` last refill time
//! (20 bytes of data, padded).

use std::num::NonZeroU32;
use std::time::Duration;

use super::rate::{Rate, saturate};
use super::{Algorithm, KeyDecision, NEVER, Nanos, QuotaError, QuotaInfo, Snapshot, Verdict};

/// A token-bucket policy: capacity `burst`, refill `limit` per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Fixed-point units: one token is `rate.cells(1)` units, refill is
    /// `rate.scale()` units per nanosecond.
    rate: Rate,
    /// Capacity in whole tokens, and the largest admissible cost.
    burst: u32,
    /// Capacity in fixed-point units.
    capacity: u128,
    /// Advertised quota, kept only for `quota()`.
    limit: NonZeroU32,
    /// Advertised window, kept only for `quota()`.
    period: Duration,
}

/// Per-key token-bucket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketState {
    /// Whole tokens in the bucket (≤ burst).
    tokens: u32,
    /// The fraction of the next token, in units of `1 / interval` token.
    fraction: u64,
    /// When the level was last brought up to date.
    last: Nanos,
}

impl TokenBucket {
    /// Capacity `burst`, refilling `limit` per `period`; fails only for a
    /// period outside [`crate::spec::MIN_PERIOD`]..=[`crate::spec::MAX_PERIOD`].
    pub fn new(limit: NonZeroU32, period: Duration, burst: NonZeroU32) -> Result<Self, QuotaError> {
        let rate = Rate::new(limit, period)?;
        Ok(Self {
            rate,
            burst: burst.get(),
            capacity: rate.cells(u64::from(burst.get())),
            limit,
            period,
        })
    }

    /// The level at `now` in units, and the time it is valid at. A `now`
    /// before `last` refills nothing rather than draining.
    fn refill(&self, state: Option<TokenBucketState>, now: Nanos) -> (u128, Nanos) {
        match state {
            None => (self.capacity, now),
            Some(s) => {
                let level = self.rate.cells(u64::from(s.tokens)) + u128::from(s.fraction);
                let gained = self.rate.ticks(now.saturating_sub(s.last));
                ((level + gained).min(self.capacity), now.max(s.last))
            }
        }
    }

    /// Splits a level back into whole tokens and a fraction.
    fn pack(&self, level: u128, last: Nanos) -> TokenBucketState {
        let one = self.rate.cells(1);
        TokenBucketState {
            // level ≤ capacity, so whole tokens ≤ burst fits u32.
            tokens: u32::try_from(level / one).unwrap_or(self.burst),
            fraction: saturate(level % one),
            last,
        }
    }

    /// Headers for a bucket holding `level` units at `now`.
    /// `valid_at` after `now` is a debt: nothing refills until then.
    fn snapshot(&self, (level, valid_at): (u128, Nanos), now: Nanos) -> Snapshot {
        let short = self.capacity - level + self.rate.ticks(valid_at.saturating_sub(now));
        Snapshot {
            remaining: self.rate.whole_cells(level),
            reset_after: self.rate.ns_ceil(short),
            next_after: self.rate.until_cell(short, self.capacity),
        }
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn decide(
        &self,
        state: Option<TokenBucketState>,
        cost: u32,
        now: Nanos,
    ) -> KeyDecision<TokenBucketState> {
        let (level, last) = self.refill(state, now);
        let need = self.rate.cells(u64::from(cost));
        let (verdict, level) = if level >= need {
            (Verdict::Allow, level - need)
        } else if cost > self.burst {
            (Verdict::Deny { retry_after: NEVER }, level)
        } else {
            // The refill is linear until the bucket is full, and need ≤
            // capacity, so the missing units arrive after exactly this long
            // (after a debt is paid: `last` in the future, see `debit`).
            let retry_after = self
                .rate
                .ns_ceil(need - level)
                .saturating_add(last.saturating_sub(now));
            (Verdict::Deny { retry_after }, level)
        };
        let snap = self.snapshot((level, last), now);
        KeyDecision {
            verdict,
            state: self.pack(level, last),
            remaining: snap.remaining,
            reset_after: snap.reset_after,
            next_after: snap.next_after,
        }
    }

    fn peek(&self, state: Option<TokenBucketState>, now: Nanos) -> Snapshot {
        self.snapshot(self.refill(state, now), now)
    }

    fn is_idle(&self, state: &TokenBucketState, now: Nanos) -> bool {
        self.refill(Some(*state), now).0 == self.capacity
    }

    /// Take `c` tokens; what the bucket lacks is a debt, kept as an empty bucket whose
    /// refill starts that much later (`last` in the future refills nothing until then).
    fn debit(&self, state: Option<TokenBucketState>, cost: u32, now: Nanos) -> TokenBucketState {
        let (level, last) = self.refill(state, now);
        let need = self.rate.cells(u64::from(cost));
        match level.checked_sub(need) {
            Some(left) => self.pack(left, last),
            None => self.pack(0, last.saturating_add(self.rate.ns_ceil(need - level))),
        }
    }

    /// Put `c` tokens back, up to the capacity.
    fn refund(&self, state: TokenBucketState, cost: u32, now: Nanos) -> TokenBucketState {
        let (level, last) = self.refill(Some(state), now);
        let back = level + self.rate.cells(u64::from(cost));
        self.pack(back.min(self.capacity), last)
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
    fn fractional_refill_is_not_lost() {
        // 3 per second: a token every 333_333_333.3 ns.
        let b = TokenBucket::new(nz(3), Duration::from_secs(1), nz(1)).expect("valid");
        let mut s = Some(b.decide(None, 1, 0).state);
        // Refilling in many small steps must add up exactly like one big step.
        for t in (1..=333_333_333).step_by(33_333_333) {
            let d = b.decide(s, 0, t);
            s = Some(d.state);
        }
        assert!(!b.decide(s, 1, 333_333_333).verdict.admits());
        assert!(b.decide(s, 1, 333_333_334).verdict.admits());
    }

    #[test]
    fn debit_past_empty_is_a_debt() {
        let b = TokenBucket::new(nz(10), Duration::from_secs(1), nz(2)).expect("valid");
        // 5 tokens spent elsewhere from a bucket of 2: 3 tokens (300 ms) owed.
        let s = b.debit(None, 5, 0);
        assert_eq!(
            b.decide(Some(s), 1, 0).verdict,
            Verdict::Deny {
                retry_after: 400_000_000
            }
        );
        assert!(!b.decide(Some(s), 1, 399_999_999).verdict.admits());
        assert!(b.decide(Some(s), 1, 400_000_000).verdict.admits());
        let full = b.refund(b.decide(None, 2, 0).state, 7, 0);
        assert!(b.is_idle(&full, 0));
    }

    #[test]
    fn retry_and_reset() {
        let b = TokenBucket::new(nz(10), Duration::from_secs(1), nz(2)).expect("valid");
        let d = b.decide(None, 2, 0);
        assert_eq!((d.remaining, d.reset_after), (0, 200_000_000));
        let d2 = b.decide(Some(d.state), 2, 50_000_000);
        assert_eq!(
            d2.verdict,
            Verdict::Deny {
                retry_after: 150_000_000
            }
        );
        assert_eq!(
            b.decide(None, 3, 0).verdict,
            Verdict::Deny { retry_after: NEVER }
        );
    }
}
