//! Circuit breaker in front of the store: after `failures` consecutive failed calls the
//! store is not called for `cooldown`; then one probe call is let through (half-open) and
//! its result closes or re-opens the breaker. A dead store then costs requests nothing but
//! a lock, instead of a timeout each.
//!
//! A call's verdict is reported through its [`Ticket`], never by hand: a request can be
//! dropped mid-call (client reset, HTTP/2 `RST_STREAM`), and a probe that never reports
//! would leave the breaker half-open forever. A ticket dropped unsettled hands the probe on.
//! Besides calls, a background ping may close the breaker ([`Breaker::success`]), so a
//! store that came back is used again without waiting for the cooldown.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use crate::clock::{Clock, Nanos};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Calls flow; counts consecutive failures.
    Closed { failures: u32 },
    /// No calls until the clock passes `until`.
    Open { until: Nanos },
    /// One probe is in flight; everyone else waits for its verdict.
    HalfOpen,
}

pub struct Breaker {
    /// Consecutive failures that open it.
    threshold: u32,
    /// How long it stays open before probing.
    cooldown: Nanos,
    state: Mutex<State>,
    /// Per store connection: a background ping for this breaker runs on it.
    pub pinging: Box<[AtomicBool]>,
}

/// Leave to make one store call. Settle it with `success` or `failure`; dropped unsettled
/// (the call was cancelled), a probe's turn passes to the next caller at once.
#[must_use]
pub struct Ticket<'a> {
    breaker: &'a Breaker,
    probe: bool,
    settled: bool,
}

impl Breaker {
    /// A closed breaker for a store reached through `conns` connections.
    pub fn new(threshold: u32, cooldown: Nanos, conns: usize) -> Self {
        Breaker {
            threshold: threshold.max(1),
            cooldown,
            state: Mutex::new(State::Closed { failures: 0 }),
            pinging: (0..conns).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A ticket to call the store now, or `None` while the store is considered down.
    pub fn permit(&self, clock: &dyn Clock) -> Option<Ticket<'_>> {
        let mut s = self.lock();
        let probe = match *s {
            State::Closed { .. } => false,
            State::Open { until } if clock.now() >= until => {
                *s = State::HalfOpen;
                true
            }
            State::Open { .. } | State::HalfOpen => return None,
        };
        Some(Ticket {
            breaker: self,
            probe,
            settled: false,
        })
    }

    /// The store answered (a call or a background ping): closes the breaker.
    pub fn success(&self) {
        *self.lock() = State::Closed { failures: 0 };
    }

    /// A call failed; returns true when this opened the breaker.
    fn failure(&self, clock: &dyn Clock) -> bool {
        let mut s = self.lock();
        let failures = match *s {
            State::Closed { failures } => failures + 1,
            State::HalfOpen => self.threshold,
            // A call that started before the breaker opened: already open.
            State::Open { .. } => return false,
        };
        *s = if failures >= self.threshold {
            State::Open {
                until: clock.now().saturating_add(self.cooldown),
            }
        } else {
            State::Closed { failures }
        };
        failures >= self.threshold
    }

    /// A probe was cancelled before its verdict: let the next caller probe.
    fn abandon_probe(&self) {
        let mut s = self.lock();
        if *s == State::HalfOpen {
            *s = State::Open { until: 0 };
        }
    }

    pub fn is_open(&self) -> bool {
        !matches!(*self.lock(), State::Closed { .. })
    }
}

/// One breaker per store node. A Redis Cluster master that is down must not cost the keys
/// on healthy masters anything: its slots get their own breaker. Nodes are known from
/// `CLUSTER SLOTS` ([`Breakers::learn`]); until then, and for a single server, one breaker
/// covers the whole store.
pub struct Breakers {
    whole: Arc<Breaker>,
    map: RwLock<SlotMap>,
    make: Box<dyn Fn() -> Breaker + Send + Sync>,
}

#[derive(Default)]
struct SlotMap {
    /// Master address → its breaker, kept across re-learning.
    nodes: HashMap<String, Arc<Breaker>>,
    /// Slot → its master's breaker; empty until learned.
    slots: Vec<Arc<Breaker>>,
}

impl Breakers {
    pub fn new(threshold: u32, cooldown: Nanos, conns: usize) -> Self {
        Breakers {
            whole: Arc::new(Breaker::new(threshold, cooldown, conns)),
            map: RwLock::new(SlotMap::default()),
            make: Box::new(move || Breaker::new(threshold, cooldown, conns)),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, SlotMap> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The breaker in front of the node that owns `slot` (`None`: a single server).
    pub fn for_slot(&self, slot: Option<u16>) -> Arc<Breaker> {
        match slot.and_then(|s| self.read().slots.get(usize::from(s)).cloned()) {
            Some(b) => b,
            None => self.whole.clone(),
        }
    }

    /// Take the cluster's slot ranges (`start`, `end`, master address). A node keeps its
    /// breaker across re-learning; slots nobody claims stay on the whole-store breaker.
    pub fn learn(&self, ranges: &[(u16, u16, String)]) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let mut slots = vec![self.whole.clone(); 16384];
        for (start, end, node) in ranges {
            let breaker = map
                .nodes
                .entry(node.clone())
                .or_insert_with(|| Arc::new((self.make)()))
                .clone();
            for slot in *start..=(*end).min(16383) {
                slots[usize::from(slot)] = breaker.clone();
            }
        }
        map.slots = slots;
        // A node gone from the map (failed over, removed) no longer holds the gauge up.
        map.nodes
            .retain(|node, _| ranges.iter().any(|r| r.2 == *node));
    }

    /// Whether the slot map is known (a cluster whose `CLUSTER SLOTS` was read).
    pub fn learned(&self) -> bool {
        !self.read().slots.is_empty()
    }

    /// Each breaker and whether it is open (or probing), for `GET /status`: per master
    /// once a cluster's slot map is learned (sorted by address), else the one breaker in
    /// front of the whole store, named `store`.
    pub fn states(&self) -> Vec<(String, bool)> {
        let map = self.read();
        if map.nodes.is_empty() {
            return vec![("store".to_string(), self.whole.is_open())];
        }
        let mut states: Vec<(String, bool)> = map
            .nodes
            .iter()
            .map(|(node, b)| (node.clone(), b.is_open()))
            .collect();
        states.sort();
        states
    }

    /// Whether any node's breaker is open, for the gauge.
    pub fn any_open(&self) -> bool {
        self.whole.is_open() || self.read().nodes.values().any(|b| b.is_open())
    }
}

impl super::RedisStore {
    /// Each store node's breaker and whether it is open ([`Breakers::states`]); here, not
    /// in `mod.rs`, beside what it reads.
    pub fn breaker_states(&self) -> Vec<(String, bool)> {
        self.shared.breakers.states()
    }
}

impl Ticket<'_> {
    pub fn success(mut self) {
        self.settled = true;
        self.breaker.success();
    }

    /// Returns true when this failure opened the breaker.
    pub fn failure(mut self, clock: &dyn Clock) -> bool {
        self.settled = true;
        self.breaker.failure(clock)
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.probe && !self.settled {
            self.breaker.abandon_probe();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn opens_after_consecutive_failures_and_probes_after_cooldown() {
        let clock = ManualClock::new();
        let b = Breaker::new(3, 2_000_000_000, 1);
        for _ in 0..2 {
            assert!(!b.permit(&clock).unwrap().failure(&clock));
        }
        b.permit(&clock).unwrap().success(); // a success resets the count
        for _ in 0..2 {
            let _ = b.permit(&clock).unwrap().failure(&clock);
        }
        assert!(b.permit(&clock).unwrap().failure(&clock), "third opens");
        assert!(b.permit(&clock).is_none());
        clock.advance(Duration::from_millis(1999));
        assert!(b.permit(&clock).is_none());
        clock.advance(Duration::from_millis(1));
        let probe = b.permit(&clock).expect("one probe");
        assert!(b.permit(&clock).is_none(), "only one probe");
        assert!(probe.failure(&clock), "failed probe re-opens");
        clock.advance(Duration::from_secs(2));
        b.permit(&clock).unwrap().success();
        assert!(!b.is_open());
        assert!(b.permit(&clock).is_some());
    }

    #[test]
    fn a_cancelled_probe_hands_the_probe_on() {
        let clock = ManualClock::new();
        let b = Breaker::new(1, 2_000_000_000, 1);
        assert!(b.permit(&clock).unwrap().failure(&clock));
        clock.advance(Duration::from_secs(2));
        drop(b.permit(&clock).expect("probe")); // the request went away mid-call
        assert!(b.is_open());
        let next = b
            .permit(&clock)
            .expect("the next caller probes, no new cooldown");
        next.success();
        assert!(!b.is_open());
    }

    #[test]
    fn a_dropped_ordinary_call_changes_nothing_and_a_ping_closes() {
        let clock = ManualClock::new();
        let b = Breaker::new(2, 2_000_000_000, 1);
        drop(b.permit(&clock).unwrap());
        assert!(!b.permit(&clock).unwrap().failure(&clock));
        assert!(b.permit(&clock).unwrap().failure(&clock));
        b.success(); // a background ping got an answer
        assert!(b.permit(&clock).is_some());
    }

    #[test]
    fn each_node_has_its_own_breaker() {
        let clock = ManualClock::new();
        let b = Breakers::new(1, 2_000_000_000, 1);
        assert!(Arc::ptr_eq(&b.for_slot(Some(7)), &b.for_slot(Some(9000))));
        let ranges = [(0, 5460, "a".to_string()), (5461, 16383, "b".to_string())];
        b.learn(&ranges);
        let a = b.for_slot(Some(7));
        assert!(a.permit(&clock).unwrap().failure(&clock));
        assert!(b.for_slot(Some(100)).is_open(), "a's other slots");
        assert!(!b.for_slot(Some(9000)).is_open(), "b is untouched");
        assert!(b.any_open());
        b.learn(&ranges);
        assert!(
            Arc::ptr_eq(&a, &b.for_slot(Some(7))),
            "kept across re-learning"
        );
    }
}
