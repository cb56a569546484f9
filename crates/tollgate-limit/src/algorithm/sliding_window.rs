//! Sliding-window counter: a per-key decision of the limit step that
//! approximates "at most `limit` per trailing `period`" with two counters,
//! without the fixed window's doubled burst at window edges.
//!
//! # Admission rule
//!
//! Windows have length `P = period` and are aligned to the clock epoch: window
//! `w` covers `[w·P, (w+1)·P)`. The state holds the count admitted in the
//! current window (`curr`) and in the one before (`prev`). At `now`, with
//! `e = now − w·P` the time elapsed in the current window, the estimated
//! trailing count is `prev · (P − e)/P + curr`, and a request of cost `c` is
//! admitted iff
//!
//! ```text
//! prev · (P − e) + (curr + c) · P ≤ limit · P
//! ```
//!
//! (the same inequality multiplied by `P`), then `curr ← curr + c`. The
//! estimate never grows as time passes, so once a request fits it keeps
//! fitting; `retry_after` is the first nanosecond where it does, solved
//! analytically in the current window, the next one, or the start of the one
//! after (when both counts have expired).
//!
//! # Rounding
//!
//! None: the comparison is exact `u128` integer arithmetic. `remaining` is
//! rounded down; `retry_after` is the exact first whole nanosecond.
//!
//! # Cost above the limit
//!
//! Never fits even in an empty window: denied with `retry_after = NEVER`.
//!
//! # State size
//!
//! 16 bytes: `u64` window index + two `u32` counters.

use std::num::NonZeroU32;
use std::time::Duration;

use super::rate::{period_nanos, saturate};
use super::{Algorithm, KeyDecision, NEVER, Nanos, QuotaError, QuotaInfo, Snapshot, Verdict};

/// A sliding-window policy: about `limit` cells per trailing `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    /// The quota per window, and the largest admissible cost.
    limit: NonZeroU32,
    /// The window length in nanoseconds.
    period_ns: Nanos,
    /// Advertised window, kept only for `quota()`.
    period: Duration,
}

/// Per-key sliding-window state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// Index of the window `current` counts in (`time / period`).
    window: u64,
    /// Cells admitted in window `window − 1`.
    previous: u32,
    /// Cells admitted in window `window`.
    current: u32,
}

/// A state brought up to a particular instant.
struct Rolled {
    /// The window index the instant falls in.
    window: u64,
    /// Nanoseconds elapsed in that window.
    elapsed: u64,
    /// Count of the window before.
    previous: u32,
    /// Count of this window.
    current: u32,
}

impl SlidingWindow {
    /// About `limit` per trailing `period`; fails only for a period outside
    /// [`crate::spec::MIN_PERIOD`]..=[`crate::spec::MAX_PERIOD`].
    pub fn new(limit: NonZeroU32, period: Duration) -> Result<Self, QuotaError> {
        Ok(Self {
            limit,
            period_ns: period_nanos(period)?,
            period,
        })
    }

    /// Moves `state` into the window of `now`. A `now` before the state's
    /// window is treated as the start of that window (the most conservative
    /// point in it).
    fn roll(&self, state: Option<SlidingWindowState>, now: Nanos) -> Rolled {
        let (window, elapsed) = (now / self.period_ns, now % self.period_ns);
        let (previous, current) = match state {
            None => (0, 0),
            Some(s) if s.window > window => {
                return Rolled {
                    window: s.window,
                    elapsed: 0,
                    previous: s.previous,
                    current: s.current,
                };
            }
            Some(s) if s.window == window => (s.previous, s.current),
            Some(s) if s.window + 1 == window => (s.current, 0),
            Some(_) => (0, 0),
        };
        Rolled {
            window,
            elapsed,
            previous,
            current,
        }
    }

    /// `limit · P − prev · (P − e)`: the room left for `curr + c`, times `P`.
    fn room(&self, r: &Rolled) -> u128 {
        let p = u128::from(self.period_ns);
        (u128::from(self.limit.get()) * p)
            .saturating_sub(u128::from(r.previous) * (p - u128::from(r.elapsed)))
    }

    /// The absolute start of window `w` (saturating at the end of time).
    fn start(&self, w: u64) -> u128 {
        u128::from(w) * u128::from(self.period_ns)
    }

    /// Earliest absolute time a cost `c ≤ limit` fits, given it does not fit now.
    fn earliest(&self, r: &Rolled, c: u32) -> u128 {
        let (p, limit) = (u128::from(self.period_ns), self.limit.get());
        // Offset into a window where prev·(P − e) ≤ free·P first holds, if
        // before the window ends: e ≥ P − ⌊free·P / prev⌋.
        let offset = |prev: u32, free: u32| -> Option<u128> {
            let reach = (u128::from(free) * p).checked_div(u128::from(prev))?;
            let e = p.saturating_sub(reach);
            (e < p).then_some(e)
        };
        if let Some(free) = limit.checked_sub(r.current.saturating_add(c))
            && let Some(e) = offset(r.previous, free)
        {
            return self.start(r.window) + e;
        }
        // Next window: the current count becomes the previous one.
        let next = self.start(r.window) + p;
        match offset(r.current, limit - c) {
            Some(e) => next + e,
            None if r.current == 0 => next,
            None => next + p,
        }
    }

    /// Headers for a rolled state.
    fn snapshot(&self, r: &Rolled, now: Nanos) -> Snapshot {
        let p = u128::from(self.period_ns);
        let remaining = saturate(self.room(r) / p).saturating_sub(u64::from(r.current));
        let full_at = match (r.previous, r.current) {
            (0, 0) => 0,
            (_, 0) => self.start(r.window) + p,
            _ => self.start(r.window) + 2 * p,
        };
        // One more cell is free exactly when a request of `remaining + 1` would fit.
        let next_after = match u32::try_from(remaining + 1) {
            Ok(c) if full_at > 0 && c <= self.limit.get() => {
                saturate(self.earliest(r, c)).saturating_sub(now)
            }
            _ => 0,
        };
        Snapshot {
            remaining,
            reset_after: saturate(full_at).saturating_sub(now),
            next_after,
        }
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn decide(
        &self,
        state: Option<SlidingWindowState>,
        cost: u32,
        now: Nanos,
    ) -> KeyDecision<SlidingWindowState> {
        let mut r = self.roll(state, now);
        let p = u128::from(self.period_ns);
        let wanted = u128::from(r.current) + u128::from(cost);
        let verdict = if wanted * p <= self.room(&r) {
            r.current = r.current.saturating_add(cost);
            Verdict::Allow
        } else if cost > self.limit.get() {
            Verdict::Deny { retry_after: NEVER }
        } else {
            let retry_after = saturate(self.earliest(&r, cost)).saturating_sub(now);
            Verdict::Deny { retry_after }
        };
        let snap = self.snapshot(&r, now);
        KeyDecision {
            verdict,
            state: SlidingWindowState {
                window: r.window,
                previous: r.previous,
                current: r.current,
            },
            remaining: snap.remaining,
            reset_after: snap.reset_after,
            next_after: snap.next_after,
        }
    }

    fn peek(&self, state: Option<SlidingWindowState>, now: Nanos) -> Snapshot {
        self.snapshot(&self.roll(state, now), now)
    }

    fn is_idle(&self, state: &SlidingWindowState, now: Nanos) -> bool {
        let r = self.roll(Some(*state), now);
        r.previous == 0 && r.current == 0
    }

    /// Count `c` in the current window, over the limit or not.
    fn debit(
        &self,
        state: Option<SlidingWindowState>,
        cost: u32,
        now: Nanos,
    ) -> SlidingWindowState {
        let r = self.roll(state, now);
        SlidingWindowState {
            window: r.window,
            previous: r.previous,
            current: r.current.saturating_add(cost),
        }
    }

    /// Uncount `c`: from the current window first, the rest from the previous one (a
    /// reservation made just before the window turned).
    fn refund(&self, state: SlidingWindowState, cost: u32, now: Nanos) -> SlidingWindowState {
        let r = self.roll(Some(state), now);
        let from_current = cost.min(r.current);
        SlidingWindowState {
            window: r.window,
            previous: r.previous.saturating_sub(cost - from_current),
            current: r.current - from_current,
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

    const S: u64 = 1_000_000_000;

    #[test]
    fn no_doubling_at_the_window_edge() {
        let limit = NonZeroU32::new(10).expect("non-zero literal");
        let sw = SlidingWindow::new(limit, Duration::from_secs(1)).expect("valid");
        let full = sw.decide(None, 10, S - 1);
        assert_eq!(full.verdict, Verdict::Allow);
        // Just after the edge the previous window still weighs almost fully.
        let d = sw.decide(Some(full.state), 1, S + 1);
        assert_eq!(
            d.verdict,
            Verdict::Deny {
                retry_after: S / 10 - 1
            }
        );
        assert_eq!(d.reset_after, 2 * S - (S + 1));
        assert!(sw.decide(Some(full.state), 1, S + S / 10).verdict.admits());
    }

    #[test]
    fn debit_over_the_limit_and_refund() {
        let limit = NonZeroU32::new(4).expect("non-zero literal");
        let sw = SlidingWindow::new(limit, Duration::from_secs(1)).expect("valid");
        let s = sw.debit(None, 6, 10);
        assert!(!sw.decide(Some(s), 1, 20).verdict.admits());
        let back = sw.refund(s, 3, 20);
        assert_eq!(sw.decide(Some(back), 1, 20).remaining, 0);
        assert!(sw.decide(Some(back), 1, 20).verdict.admits());
        // Given back after the window turned: taken from the previous window's count.
        let turned = sw.refund(s, 6, S + 5);
        assert!(sw.is_idle(&turned, S + 5));
    }

    #[test]
    fn full_window_waits_for_expiry() {
        let limit = NonZeroU32::new(4).expect("non-zero literal");
        let sw = SlidingWindow::new(limit, Duration::from_secs(1)).expect("valid");
        let d = sw.decide(None, 4, 0);
        let denied = sw.decide(Some(d.state), 4, 10);
        assert_eq!(
            denied.verdict,
            Verdict::Deny {
                retry_after: 2 * S - 10
            }
        );
        assert_eq!(
            sw.decide(None, 5, 0).verdict,
            Verdict::Deny { retry_after: NEVER }
        );
    }
}
