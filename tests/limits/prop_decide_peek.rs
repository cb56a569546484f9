//! A decision's header figures are a function of the state it leaves: for every algorithm,
//! `decide(s, c, now)`'s `remaining`, `reset_after` and `next_after` equal
//! `peek(Some(decision.state), now)`, admitted or denied.
//!
//! Why it matters: the local site decides under a shard lock and computes the header figures
//! after releasing it, from the state it wrote (`LocalStore::check_single`); this is the
//! equivalence that makes the two orders give the same headers.

use crate::common::nz;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::limit::algorithm::{
    Algorithm, Concurrency, Gcra, LeakyBucket, SlidingWindow, Snapshot, TokenBucket,
};

/// One step: time advance in ns, cost, whether an admitted decision is stored.
type Step = (u64, u32, bool);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..2_000_000, 0u64..3_000_000_000],
            1u32..6,
            any::<bool>(),
        ),
        1..60,
    )
}

/// Replays `steps` on `alg`, checking the equivalence at each decision.
fn check<A: Algorithm>(alg: &A, steps: &[Step]) -> Result<(), TestCaseError> {
    let (mut state, mut now) = (None, 1_000_000_000u64);
    for &(dt, cost, store) in steps {
        now += dt;
        let d = alg.decide(state, cost, now);
        let from_state = alg.peek(Some(d.state), now);
        let reported = Snapshot {
            remaining: d.remaining,
            reset_after: d.reset_after,
            next_after: d.next_after,
        };
        prop_assert_eq!(
            reported,
            from_state,
            "at {} cost {} {:?}",
            now,
            cost,
            d.verdict
        );
        if store && d.verdict.admits() {
            state = Some(d.state);
        }
    }
    Ok(())
}

fn quota() -> impl Strategy<Value = (u32, u64, u32)> {
    (
        1u32..50,
        prop_oneof![Just(1u64), Just(3), Just(60)],
        1u32..10,
    )
}

proptest! {
    #![proptest_config(crate::common::beside_source(ProptestConfig::default()))]
    #[test]
    fn gcra((limit, secs, burst) in quota(), s in steps()) {
        let a = Gcra::new(nz(limit), Duration::from_secs(secs), nz(burst)).expect("valid");
        check(&a, &s)?;
    }

    #[test]
    fn token_bucket((limit, secs, burst) in quota(), s in steps()) {
        let a = TokenBucket::new(nz(limit), Duration::from_secs(secs), nz(burst)).expect("valid");
        check(&a, &s)?;
    }

    #[test]
    fn sliding_window((limit, secs, _b) in quota(), s in steps()) {
        let a = SlidingWindow::new(nz(limit), Duration::from_secs(secs)).expect("valid");
        check(&a, &s)?;
    }

    #[test]
    fn leaky_bucket((limit, secs, delay_ms) in quota(), s in steps()) {
        let max_delay = Duration::from_millis(u64::from(delay_ms) * 100);
        let a = LeakyBucket::new(nz(limit), Duration::from_secs(secs), max_delay).expect("valid");
        check(&a, &s)?;
    }

    #[test]
    fn concurrency((limit, _s, _b) in quota(), s in steps()) {
        check(&Concurrency::new(nz(limit)), &s)?;
    }
}
