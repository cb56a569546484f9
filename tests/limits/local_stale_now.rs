//! A stale `now` on the local site's single-key path never refuses what a serial order
//! would admit (`LocalStore::check_single`, issue 50).
//!
//! The single-key check reads the clock before it takes the shard lock, so a thread
//! descheduled in between decides with a `now` older than a write another thread made
//! meanwhile. Two real threads replay that interleaving exactly: the clock parks the first
//! thread right after its reading until the second has checked the same key at a later
//! time. The first thread's verdict, its `remaining` and the key's state must then be those
//! of the same two checks made one after the other at the times they took the lock.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use tollgate::config::AlgorithmName;
use tollgate::limit::algorithm::Nanos;
use tollgate::limit::clock::{Clock, ManualClock};
use tollgate::limit::local::{CheckItem, ItemResult, LocalStore};
use tollgate::limit::metrics::PolicyGauges;
use tollgate::limit::policy::{AnyState, PolicyRuntime};

use super::local_site::policy;

/// A [`ManualClock`] whose next reading after [`ParkingClock::arm`] holds its caller, with
/// the value it read, between two rendezvous on `gate`: the other thread acts in between.
struct ParkingClock {
    time: ManualClock,
    armed: AtomicBool,
    gate: Barrier,
}

impl ParkingClock {
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}

impl Clock for ParkingClock {
    fn now(&self) -> Nanos {
        let now = self.time.now();
        if self.armed.swap(false, Ordering::SeqCst) {
            // Read: let the other thread run its check, and wait until it has.
            self.gate.wait();
            self.gate.wait();
        }
        now
    }
}

const BURST: u32 = 2;
/// Two periods of the policy (`BURST` per 60 s): every algorithm is full again after them,
/// the sliding window's previous window included.
const REFILL: Duration = Duration::from_secs(120);

fn item() -> CheckItem {
    CheckItem {
        policy: 0,
        headroom: NonZeroU32::MIN,
        key: "ip:192.0.2.7".into(),
        cost: 1,
        fallback: false,
    }
}

fn store(algorithm: AlgorithmName, clock: Arc<dyn Clock>) -> Arc<LocalStore> {
    let mut spec = policy("ip", algorithm, BURST);
    // The leaky bucket queues a period's worth: two requests at one instant, as the others.
    spec.max_delay = Duration::from_secs(60);
    let policies: Arc<[PolicyRuntime]> = vec![PolicyRuntime::new(0, &spec, &[]).unwrap()].into();
    Arc::new(LocalStore::new(
        policies,
        clock,
        Arc::new(PolicyGauges::detached(1)),
    ))
}

fn check(store: &LocalStore) -> ItemResult {
    store.check_single(&item(), |v| v.admits())
}

/// Empties the key at 1 s: spent until a check is refused.
fn drain(store: &LocalStore, time: &ManualClock) {
    time.set(1_000_000_000);
    let spent = (0..=BURST + 2)
        .take_while(|_| check(store).decision.verdict.admits())
        .count();
    assert!(
        spent >= BURST as usize && spent <= BURST as usize + 2,
        "{spent}"
    );
}

/// The key drained, then two checks after it refilled: `(second, first)` as a serial
/// order makes them, each at the time it holds the lock.
fn serial(algorithm: AlgorithmName) -> (ItemResult, ItemResult, Option<AnyState>) {
    let time = ManualClock::new();
    let store = store(algorithm, Arc::new(time.clone()));
    drain(&store, &time);
    time.advance(REFILL);
    let other = check(&store);
    let stale = check(&store);
    (stale, other, store.state(0, &item().key))
}

/// The same, with the first thread's clock read made before the refill and its lock taken
/// after the other thread's check.
fn interleaved(algorithm: AlgorithmName) -> (ItemResult, ItemResult, Option<AnyState>) {
    let clock = Arc::new(ParkingClock {
        time: ManualClock::new(),
        armed: AtomicBool::new(false),
        gate: Barrier::new(2),
    });
    let store = store(algorithm, clock.clone());
    drain(&store, &clock.time);
    clock.arm();
    let first = {
        let store = store.clone();
        std::thread::spawn(move || check(&store))
    };
    // The first thread has read the clock (1 s) and waits.
    clock.gate.wait();
    clock.time.advance(REFILL);
    let other = check(&store);
    clock.gate.wait();
    let stale = first.join().unwrap();
    (stale, other, store.state(0, &item().key))
}

#[test]
fn stale_now_decides_as_the_serial_order() {
    for algorithm in [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::SlidingWindow,
        AlgorithmName::LeakyBucket,
    ] {
        let (want, want_other, want_state) = serial(algorithm);
        // Not vacuous: the serial order admits both checks (the key refilled).
        assert!(want.decision.verdict.admits(), "{algorithm:?}: {want:?}");
        let (got, got_other, got_state) = interleaved(algorithm);
        assert_eq!(got_other.decision.verdict, want_other.decision.verdict);
        assert_eq!(
            (got.decision.verdict, got.committed),
            (want.decision.verdict, want.committed),
            "{algorithm:?}: refused on a stale now"
        );
        // `remaining` only: a stale decision that admits (the token bucket takes the
        // stale `now` as the state's own time) is not decided again, and its reset figure
        // counts from that `now`, long by the staleness.
        assert_eq!(
            got.snapshot.remaining, want.snapshot.remaining,
            "{algorithm:?}: remaining"
        );
        assert_eq!(got_state, want_state, "{algorithm:?}: state");
    }
}
