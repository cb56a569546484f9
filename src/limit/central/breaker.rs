//! Circuit breaker in front of the store: after `failures` consecutive failed calls the
//! store is not called for `cooldown`; then one probe call is let through (half-open) and
//! its result closes or re-opens the breaker. A dead store then costs requests nothing but
//! a lock, instead of a timeout each.

use std::sync::Mutex;

use crate::limit::clock::{Clock, Nanos};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Calls flow; counts consecutive failures.
    Closed { failures: u32 },
    /// No calls until the clock passes `until`.
    Open { until: Nanos },
    /// One probe is in flight; everyone else waits for its verdict.
    HalfOpen,
}

/// Whether a call may go to the store now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Call, and report the result.
    Call,
    /// Do not call: the store is considered down.
    Rejected,
}

pub struct Breaker {
    /// Consecutive failures that open it.
    threshold: u32,
    /// How long it stays open before probing.
    cooldown: Nanos,
    state: Mutex<State>,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Nanos) -> Self {
        Breaker {
            threshold: threshold.max(1),
            cooldown,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn permit(&self, clock: &dyn Clock) -> Permit {
        let mut s = self.lock();
        match *s {
            State::Closed { .. } => Permit::Call,
            State::Open { until } if clock.now() >= until => {
                *s = State::HalfOpen;
                Permit::Call
            }
            State::Open { .. } | State::HalfOpen => Permit::Rejected,
        }
    }

    /// Report a call's success: closes the breaker.
    pub fn success(&self) {
        *self.lock() = State::Closed { failures: 0 };
    }

    /// Report a call's failure; returns true when this opened the breaker.
    pub fn failure(&self, clock: &dyn Clock) -> bool {
        let mut s = self.lock();
        let open = match *s {
            State::Closed { failures } => failures + 1 >= self.threshold,
            State::HalfOpen => true,
            // A call that started before the breaker opened: already open.
            State::Open { .. } => return false,
        };
        *s = if open {
            State::Open {
                until: clock.now().saturating_add(self.cooldown),
            }
        } else {
            match *s {
                State::Closed { failures } => State::Closed {
                    failures: failures + 1,
                },
                other => other,
            }
        };
        open
    }

    pub fn is_open(&self) -> bool {
        !matches!(*self.lock(), State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn opens_after_consecutive_failures_and_probes_after_cooldown() {
        let clock = ManualClock::new();
        let b = Breaker::new(3, 2_000_000_000);
        for _ in 0..2 {
            assert_eq!(b.permit(&clock), Permit::Call);
            assert!(!b.failure(&clock));
        }
        b.success(); // a success resets the count
        for _ in 0..2 {
            b.failure(&clock);
        }
        assert!(b.failure(&clock), "third consecutive failure opens");
        assert_eq!(b.permit(&clock), Permit::Rejected);
        clock.advance(Duration::from_millis(1999));
        assert_eq!(b.permit(&clock), Permit::Rejected);
        clock.advance(Duration::from_millis(1));
        assert_eq!(b.permit(&clock), Permit::Call, "one probe");
        assert_eq!(b.permit(&clock), Permit::Rejected, "only one probe");
        assert!(b.failure(&clock), "failed probe re-opens");
        clock.advance(Duration::from_secs(2));
        assert_eq!(b.permit(&clock), Permit::Call);
        b.success();
        assert!(!b.is_open());
        assert_eq!(b.permit(&clock), Permit::Call);
    }
}
