//! Whether this node's gossip view can be trusted, and which keys it has caught up since it
//! could not.
//!
//! A gossip node decides on its own state plus the deltas its peers push. A peer stops
//! pushing to a node it has counted out (2 failed calls or pings: `ring.rs`), and those
//! deltas are never sent again, so a node that was stopped (SIGSTOP, swapped out, a starved
//! runtime) wakes up with a view that lacks everything its peers admitted meanwhile, and its
//! own keys refilled by its clock. Deciding on that view admitted a burst per key
//! (issue 30). Three events mark the view *stale* at an instant, the epoch:
//!
//! - a **stall**: the gossip loop has not ticked for [`STALL_TICKS`] intervals (seen by
//!   the loop when it runs again, and by any request that finds the loop's last tick that
//!   old, so the first request after a SIGCONT does not race the loop);
//! - **silence**: no peer message at all for [`SILENCE_HEARTBEATS`] heartbeats while there
//!   are peers (every peer pings every heartbeat: they stopped reaching us);
//! - a **rejoin**: a peer came back into the live set, or asked us to sync (either side
//!   of a partition may have been counted out and missed the other's deltas).
//!
//! For `window` after the epoch each gossip key's first request pulls the peers' counts of
//! it (`sync.rs`) before it is decided; a key caught up is remembered (at most
//! [`MAX_SYNCED`] keys per epoch) and decided as usual from then on: the peers push to us
//! again once they have heard our pull. After the window every key the peers spent during
//! the stall has refilled (the window is the longest refill, debts included) and nothing
//! is pulled.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::{Clock, Nanos, SystemClock, duration_to_nanos};

/// Gossip intervals without a loop tick that count as a stall.
pub const STALL_TICKS: u64 = 5;

/// Heartbeats without any peer message that count as silence.
pub const SILENCE_HEARTBEATS: u64 = 3;

/// Keys remembered as caught up per epoch; past it a key pulls on each request.
pub const MAX_SYNCED: usize = 100_000;

pub struct Freshness {
    clock: SystemClock,
    stall: Nanos,
    silence: Nanos,
    /// How long after an epoch keys are pulled before their first decision.
    window: AtomicU64,
    /// The gossip loop's last tick; 0 until it first runs (start-up is no stall).
    last_tick: AtomicU64,
    /// The last peer message received; 0 until one arrives.
    last_heard: AtomicU64,
    /// The latest instant the view was found stale; 0: never.
    epoch: AtomicU64,
    /// The keys caught up since `.0` (an epoch), by hash.
    synced: Mutex<(Nanos, HashSet<u64>)>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl Freshness {
    pub fn new(gossip_interval: Duration, heartbeat: Duration) -> Self {
        let interval = duration_to_nanos(gossip_interval);
        Freshness {
            clock: SystemClock::new(),
            stall: interval.saturating_mul(STALL_TICKS),
            silence: duration_to_nanos(heartbeat).saturating_mul(SILENCE_HEARTBEATS),
            window: AtomicU64::new(0),
            last_tick: AtomicU64::new(0),
            last_heard: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            synced: Mutex::new((0, HashSet::new())),
            hasher: Default::default(),
        }
    }

    /// +1: a clock read of 0 is "never".
    fn now(&self) -> Nanos {
        self.clock.now().saturating_add(1)
    }

    /// How long after an epoch keys are pulled (the gossip policies' longest refill).
    pub fn set_window(&self, window: Nanos) {
        self.window.store(window, Ordering::Relaxed);
    }

    /// The view is stale from now on.
    pub fn mark(&self) {
        self.epoch.fetch_max(self.now(), Ordering::AcqRel);
    }

    /// The gossip loop ran: a gap since its last tick past the stall threshold is a stall.
    /// The epoch is set before the tick is stored, so a request that reads this tick also
    /// sees the epoch.
    pub fn tick(&self) {
        let now = self.now();
        let last = self.last_tick.load(Ordering::Acquire);
        if last != 0 && now.saturating_sub(last) > self.stall {
            self.epoch.fetch_max(now, Ordering::AcqRel);
        }
        self.last_tick.store(now, Ordering::Release);
    }

    /// A peer message arrived.
    pub fn heard(&self) {
        self.last_heard.store(self.now(), Ordering::Relaxed);
    }

    /// The epoch a gossip decision must catch up from, if it is within the window;
    /// `peers`: whether there is anyone to hear from (silence means nothing otherwise).
    pub fn catching_up(&self, peers: bool) -> Option<Nanos> {
        let now = self.now();
        let tick = self.last_tick.load(Ordering::Acquire);
        let heard = self.last_heard.load(Ordering::Relaxed);
        if (tick != 0 && now.saturating_sub(tick) > self.stall)
            || (peers && heard != 0 && now.saturating_sub(heard) > self.silence)
        {
            self.epoch.fetch_max(now, Ordering::AcqRel);
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let window = self.window.load(Ordering::Relaxed);
        (epoch != 0 && now < epoch.saturating_add(window)).then_some(epoch)
    }

    pub(super) fn hash(&self, policy: &str, headroom: u32, key: &str) -> u64 {
        self.hasher.hash_one((policy, headroom, key))
    }

    /// Whether `key` has caught up since `epoch`.
    pub fn synced(&self, epoch: Nanos, policy: &str, headroom: u32, key: &str) -> bool {
        let h = self.hash(policy, headroom, key);
        let synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        synced.0 == epoch && synced.1.contains(&h)
    }

    /// `key` has caught up since `epoch` (a later epoch forgets the earlier one's keys).
    pub fn caught_up(&self, epoch: Nanos, policy: &str, headroom: u32, key: &str) {
        let h = self.hash(policy, headroom, key);
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if synced.0 < epoch {
            *synced = (epoch, HashSet::new());
        }
        if synced.0 == epoch && synced.1.len() < MAX_SYNCED {
            synced.1.insert(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_gap_or_a_mark_opens_a_window_and_a_caught_up_key_leaves_it() {
        let f = Freshness::new(Duration::from_millis(1), Duration::from_secs(3600));
        f.set_window(duration_to_nanos(Duration::from_secs(3600)));
        assert_eq!(f.catching_up(true), None, "before the loop runs: fresh");
        f.tick();
        assert_eq!(f.catching_up(true), None, "the loop just ticked");
        std::thread::sleep(Duration::from_millis(20));
        let epoch = f
            .catching_up(true)
            .expect("20 intervals without a tick: a stall");
        f.tick();
        let again = f.catching_up(true).expect("the window outlives the stall");
        assert!(again >= epoch);
        assert!(!f.synced(again, "p", 1, "k"));
        f.caught_up(again, "p", 1, "k");
        assert!(f.synced(again, "p", 1, "k"));
        assert!(
            !f.synced(again, "p", 2, "k"),
            "another headroom is another key"
        );
        f.mark();
        let later = f.catching_up(true).unwrap();
        assert!(later > again);
        assert!(
            !f.synced(later, "p", 1, "k"),
            "a new epoch pulls every key again"
        );
        f.set_window(0);
        assert_eq!(f.catching_up(true), None, "past the window: fresh");
    }
}
