//! Concurrency limit: the per-key decision of the limit step that bounds
//! requests in flight rather than requests per unit of time.
//!
//! # Admission rule
//!
//! The state is the number of cells in flight `n`. A request of cost `c` is
//! admitted iff `n + c ≤ limit`, then `n ← n + c`; the store calls
//! [`Algorithm::release`] with the same cost when the request ends, which
//! gives the cells back (saturating at 0, so a double release cannot
//! underflow into a huge count).
//!
//! # Waits
//!
//! Whether a slot frees up depends on upstream latency, not on time, so there
//! is no exact `retry_after`: a denied request gets the fixed hint
//! [`CONCURRENCY_RETRY_HINT`] (1 s), except `c > limit`, which can never fit
//! and gets `NEVER`. `reset_after` is always 0 and the advertised period is
//! zero, for the same reason.
//!
//! # State size
//!
//! 4 bytes: one `u32`.

use std::num::NonZeroU32;
use std::time::Duration;

use super::{Algorithm, KeyDecision, NEVER, Nanos, QuotaInfo, Snapshot, Verdict};

/// `retry_after` for a denied concurrency request: long enough that clients do
/// not hammer a saturated upstream, short compared with typical backoff caps.
pub const CONCURRENCY_RETRY_HINT: Nanos = 1_000_000_000;

/// A concurrency policy: at most `limit` cells in flight per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// Cells allowed in flight at once.
    limit: NonZeroU32,
}

/// Per-key concurrency state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrencyState {
    /// Cells currently in flight.
    in_flight: u32,
}

impl Concurrency {
    /// At most `limit` cells in flight; every `NonZeroU32` is a valid limit.
    pub fn new(limit: NonZeroU32) -> Self {
        Self { limit }
    }

    /// Headers for `in_flight` cells in flight.
    fn snapshot(&self, in_flight: u32) -> Snapshot {
        Snapshot {
            remaining: u64::from(self.limit.get().saturating_sub(in_flight)),
            reset_after: 0,
            next_after: 0,
        }
    }
}

impl ConcurrencyState {
    /// Cells currently in flight (for metrics and the admin API).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;

    fn decide(
        &self,
        state: Option<ConcurrencyState>,
        cost: u32,
        _now: Nanos,
    ) -> KeyDecision<ConcurrencyState> {
        let in_flight = state.map_or(0, |s| s.in_flight);
        let limit = self.limit.get();
        let (verdict, in_flight) = match in_flight.checked_add(cost) {
            Some(after) if after <= limit => (Verdict::Allow, after),
            _ if cost > limit => (Verdict::Deny { retry_after: NEVER }, in_flight),
            _ => (
                Verdict::Deny {
                    retry_after: CONCURRENCY_RETRY_HINT,
                },
                in_flight,
            ),
        };
        let snap = self.snapshot(in_flight);
        KeyDecision {
            verdict,
            state: ConcurrencyState { in_flight },
            remaining: snap.remaining,
            reset_after: snap.reset_after,
            next_after: snap.next_after,
        }
    }

    fn peek(&self, state: Option<ConcurrencyState>, _now: Nanos) -> Snapshot {
        self.snapshot(state.map_or(0, |s| s.in_flight))
    }

    fn is_idle(&self, state: &ConcurrencyState, _now: Nanos) -> bool {
        state.in_flight == 0
    }

    fn release(&self, state: ConcurrencyState, cost: u32) -> ConcurrencyState {
        ConcurrencyState {
            in_flight: state.in_flight.saturating_sub(cost),
        }
    }

    fn quota(&self) -> QuotaInfo {
        QuotaInfo {
            limit: u64::from(self.limit.get()),
            period: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_limit_and_releases() {
        let c = Concurrency::new(NonZeroU32::new(2).expect("non-zero literal"));
        let a = c.decide(None, 2, 0);
        assert_eq!((a.verdict, a.remaining), (Verdict::Allow, 0));
        let denied = c.decide(Some(a.state), 1, 0);
        assert_eq!(
            denied.verdict,
            Verdict::Deny {
                retry_after: CONCURRENCY_RETRY_HINT
            }
        );
        let back = c.release(a.state, 1);
        assert!(c.decide(Some(back), 1, 0).verdict.admits());
        assert!(c.is_idle(&c.release(back, 5), 0));
        assert_eq!(
            c.decide(None, 3, 0).verdict,
            Verdict::Deny { retry_after: NEVER }
        );
    }
}
