//! Leaky bucket as a queue (nginx `limit_req` without `nodelay`): the per-key
//! decision of the limit step for upstreams that need a smooth request rate
//! rather than bursts.
//!
//! # Admission rule
//!
//! The queue releases one cell every `T = period / limit`. The state is
//! `next`, the earliest time the queue has a free slot (≤ now when it is
//! empty). A request of cost `c` at `now` gets the slot `s = max(next, now)`
//! and waits `d = s − now`:
//!
//! - `d == 0` (queue empty): [`Verdict::Allow`];
//! - `0 < d ≤ max_delay`: [`Verdict::Delay`]`(d)`, the caller holds it until
//!   its slot;
//! - `d > max_delay`: deny, `retry_after = next − max_delay − now`, the moment
//!   the wait would shrink to `max_delay`.
//!
//! When admitted, the request occupies `c` consecutive slots: `next ← s + c·T`.
//! A cost of 0 never waits and reserves nothing. No cost is impossible (an
//! empty queue takes any cost), so this algorithm never answers `NEVER`.
//!
//! # Rounding
//!
//! Slots are exact ticks (see `rate.rs`). The `Delay` reported in nanoseconds
//! is rounded up, so a request is forwarded at most 1 ns after its exact slot
//! and never before it; `retry_after` is the exact first whole nanosecond.
//!
//! # State size
//!
//! 16 bytes: one `u128` tick count.

use std::num::NonZeroU32;
use std::time::Duration;

use super::rate::{Rate, saturate};
use super::{Algorithm, KeyDecision, Nanos, QuotaError, QuotaInfo, Snapshot, Verdict};
use crate::clock::duration_to_nanos;
use crate::spec::MAX_PERIOD;

/// A leaky-bucket policy: `limit` per `period`, queueing up to `max_delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    /// Tick arithmetic for `limit / period`.
    rate: Rate,
    /// The longest a request may be held, in ticks.
    max_delay: u128,
    /// Advertised quota, kept only for `quota()`.
    limit: NonZeroU32,
    /// Advertised window, kept only for `quota()`.
    period: Duration,
}

/// Per-key leaky-bucket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucketState {
    /// The next free slot, in ticks since the clock epoch.
    next: u128,
}

impl LeakyBucket {
    /// `limit` per `period`, holding requests up to `max_delay`; a zero
    /// `max_delay` turns it into a strict pacer without a queue. Fails for a
    /// period outside [`crate::spec::MIN_PERIOD`]..=[`MAX_PERIOD`] or a longer delay.
    pub fn new(
        limit: NonZeroU32,
        period: Duration,
        max_delay: Duration,
    ) -> Result<Self, QuotaError> {
        let rate = Rate::new(limit, period)?;
        if max_delay > MAX_PERIOD {
            return Err(QuotaError::DelayTooLong(max_delay));
        }
        Ok(Self {
            rate,
            max_delay: rate.ticks(duration_to_nanos(max_delay)),
            limit,
            period,
        })
    }

    /// The slot a request arriving at `now_t` would get.
    fn slot(&self, state: Option<LeakyBucketState>, now_t: u128) -> u128 {
        state.map_or(now_t, |s| s.next).max(now_t)
    }

    /// Headers for a queue whose next free slot is `slot` (`slot ≥ now_t`).
    fn snapshot(&self, slot: u128, now_t: u128, now: Nanos) -> Snapshot {
        let wait = slot - now_t;
        let (remaining, next) = match self.max_delay.checked_sub(wait) {
            // Slots at wait, wait + T, … up to max_delay; the slack grows as the queue drains.
            Some(slack) => (
                self.rate.whole_cells(slack).saturating_add(1),
                self.rate.until_cell(wait, self.max_delay),
            ),
            // Past max_delay: the first slot opens when the wait is down to max_delay.
            None => (0, self.rate.ns_ceil(wait - self.max_delay)),
        };
        Snapshot {
            remaining,
            reset_after: self.rate.ns_ceil(slot).saturating_sub(now),
            next_after: next,
        }
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn decide(
        &self,
        state: Option<LeakyBucketState>,
        cost: u32,
        now: Nanos,
    ) -> KeyDecision<LeakyBucketState> {
        let now_t = self.rate.ticks(now);
        let slot = self.slot(state, now_t);
        let wait = slot - now_t;
        let (verdict, next) = if cost == 0 {
            (Verdict::Allow, slot)
        } else if wait > self.max_delay {
            let retry_after = self.rate.ns_ceil(slot - self.max_delay).saturating_sub(now);
            (Verdict::Deny { retry_after }, slot)
        } else {
            let next = slot + self.rate.cells(u64::from(cost));
            if wait == 0 {
                (Verdict::Allow, next)
            } else {
                (
                    Verdict::Delay(saturate(wait.div_ceil(self.rate.scale()))),
                    next,
                )
            }
        };
        let snap = self.snapshot(next.max(now_t), now_t, now);
        KeyDecision {
            verdict,
            state: LeakyBucketState { next },
            remaining: snap.remaining,
            reset_after: snap.reset_after,
            next_after: snap.next_after,
        }
    }

    fn peek(&self, state: Option<LeakyBucketState>, now: Nanos) -> Snapshot {
        let now_t = self.rate.ticks(now);
        self.snapshot(self.slot(state, now_t), now_t, now)
    }

    fn is_idle(&self, state: &LeakyBucketState, now: Nanos) -> bool {
        state.next <= self.rate.ticks(now)
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

    const MS: u64 = 1_000_000;

    #[test]
    fn queues_then_denies() {
        let limit = NonZeroU32::new(10).expect("non-zero literal");
        let lb = LeakyBucket::new(limit, Duration::from_secs(1), Duration::from_millis(200))
            .expect("valid");
        let mut s = None;
        let mut seen = Vec::new();
        for _ in 0..4 {
            let d = lb.decide(s, 1, 0);
            seen.push((d.verdict, d.remaining));
            s = Some(d.state);
        }
        assert_eq!(
            seen,
            [
                (Verdict::Allow, 2),
                (Verdict::Delay(100 * MS), 1),
                (Verdict::Delay(200 * MS), 0),
                (
                    Verdict::Deny {
                        retry_after: 100 * MS
                    },
                    0
                ),
            ]
        );
        assert!(lb.decide(s, 1, 100 * MS).verdict.admits());
        assert!(!lb.decide(s, 1, 100 * MS - 1).verdict.admits());
    }

    #[test]
    fn rejects_absurd_delay() {
        let limit = NonZeroU32::new(1).expect("non-zero literal");
        let err = LeakyBucket::new(limit, Duration::from_secs(1), Duration::MAX);
        assert_eq!(err, Err(QuotaError::DelayTooLong(Duration::MAX)));
    }
}
