//! The replay guard: a request accepted once is refused if it comes again.
//!
//! A request is accepted only while its timestamp is within [`MAX_SKEW`] of the receiver's
//! clock, so within a span of `2 × MAX_SKEW` of receiver time. The guard remembers each
//! accepted request's MAC in two generations that rotate every `2 × MAX_SKEW` (and a
//! second, [`ROTATE`]): a MAC stays
//! remembered for at least that long, so every replay that the timestamp check lets through
//! is caught here, and memory holds at most two windows of traffic.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::wire::MAX_SKEW;

/// The first 16 bytes of a MAC: collisions between honest messages are out of reach.
type Seen = [u8; 16];

pub(super) struct ReplayGuard {
    gens: Mutex<Generations>,
}

struct Generations {
    current: HashSet<Seen>,
    previous: HashSet<Seen>,
    since: Instant,
}

/// `2 × MAX_SKEW` and a second more: timestamps are whole milliseconds read from the wall
/// clock, the guard's windows monotonic time, so a message can be fresh a little longer
/// than `2 × MAX_SKEW` of the guard's time (found by the red team, `peer_wire_attacks.rs`).
const ROTATE: Duration = Duration::from_secs(2 * MAX_SKEW.as_secs() + 1);

impl ReplayGuard {
    pub(super) fn new() -> Self {
        ReplayGuard {
            gens: Mutex::new(Generations {
                current: HashSet::new(),
                previous: HashSet::new(),
                since: Instant::now(),
            }),
        }
    }

    /// True the first time this (authenticated) MAC is seen.
    pub(super) fn first_time(&self, mac: &[u8; 32]) -> bool {
        self.first_time_at(mac, Instant::now())
    }

    fn first_time_at(&self, mac: &[u8; 32], now: Instant) -> bool {
        let mut seen: Seen = [0; 16];
        seen.copy_from_slice(&mac[..16]);
        let mut g = self.gens.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_duration_since(g.since) >= ROTATE {
            g.previous = std::mem::take(&mut g.current);
            g.since = now;
        }
        !g.previous.contains(&seen) && g.current.insert(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_is_remembered_for_a_whole_window() {
        let guard = ReplayGuard::new();
        let t0 = Instant::now();
        let a = [1u8; 32];
        assert!(guard.first_time_at(&a, t0));
        assert!(!guard.first_time_at(&a, t0));
        // Just before the rotation, then after it: still remembered (in `previous`).
        assert!(!guard.first_time_at(&a, t0 + ROTATE - Duration::from_millis(1)));
        assert!(!guard.first_time_at(&a, t0 + ROTATE + Duration::from_millis(1)));
        // Two rotations later it is forgotten; its timestamp is long stale by then.
        assert!(guard.first_time_at(&a, t0 + 3 * ROTATE));
        assert!(guard.first_time_at(&[2u8; 32], t0 + 3 * ROTATE));
    }
}
