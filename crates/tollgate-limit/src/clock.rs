//! Time source for the per-key decisions of the limit step.
//!
//! Algorithms take `now` as a plain number instead of reading a clock
//! themselves, so they stay pure and testable; the store layer reads one of
//! these clocks once per request and passes the value down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Monotonic nanoseconds since a clock's own epoch.
///
/// A plain integer rather than [`Instant`] because algorithm state must be
/// small, `Copy`, and comparable across threads without an OS call.
pub type Nanos = u64;

/// A monotonic source of [`Nanos`].
///
/// `Send + Sync + 'static` because one clock is shared by every connection
/// task of the gateway.
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since this clock's epoch; never decreases between calls.
    fn now(&self) -> Nanos;
}

/// Converts a duration to [`Nanos`], saturating rather than wrapping so an
/// absurd duration behaves like "forever" instead of "almost zero".
pub fn duration_to_nanos(d: Duration) -> Nanos {
    Nanos::try_from(d.as_nanos()).unwrap_or(Nanos::MAX)
}

/// The production clock: monotonic, so wall-clock jumps (NTP, manual changes) never
/// refill or drain buckets. It reads the CPU's time-stamp counter through `quanta`
/// (calibrated against the OS clock) because every decision reads the clock, and the
/// OS call cost more than the rest of a hot-key decision on these VMs (~45 ns, perf).
#[derive(Debug, Clone)]
pub struct SystemClock {
    /// The calibrated counter.
    clock: quanta::Clock,
    /// The raw counter value that reads as 0; creation time, so values start small and
    /// stay far from overflow for centuries. Raw, so a reading is one scaled subtraction.
    epoch: u64,
}

impl SystemClock {
    /// A clock whose epoch is the moment of this call.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let epoch = clock.raw();
        Self { clock, epoch }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.clock.delta_as_nanos(self.epoch, self.clock.raw())
    }
}

/// A clock that only moves when told to, so tests can drive algorithms and
/// stores through exact timestamps without sleeping.
///
/// Clones share the same time, so a test can keep a handle while the code
/// under test owns another.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    /// The current reading, shared between clones.
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `by` (saturating at the end of time).
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        // fetch_update cannot fail here: the closure always returns Some.
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Jumps to an absolute reading. Tests may move backwards on purpose to
    /// check that algorithms tolerate out-of-order `now` values.
    pub fn set(&self, now: Nanos) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new();
        let b = a.clone();
        a.advance(Duration::from_nanos(5));
        assert_eq!(b.now(), 5);
        b.set(2);
        assert_eq!(a.now(), 2);
        a.advance(Duration::MAX);
        assert_eq!(b.now(), Nanos::MAX);
    }

    #[test]
    fn system_clock_is_monotonic_through_arc() {
        let c: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let first = c.now();
        assert!(c.now() >= first);
    }
}
