//! Property test of `next_after`, the `t` of an allowed response's `RateLimit` item: the
//! draft defines it as the seconds "until additional quota is made available", so for every
//! state an algorithm can reach and every instant, `remaining` must still be `r` one
//! nanosecond before `now + next_after` and above `r` at it; `next_after == 0` only when the
//! key is full. Checked by peeking, with no analytic model: the algorithms' own `peek` is
//! the quota a client would see.

use crate::common::nz;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tollgate::limit::algorithm::{
    Algorithm, Gcra, LeakyBucket, SlidingWindow, TokenBucket, Verdict,
};

const MS: u64 = 1_000_000;

/// Feeds `arrivals` (gap in ms, cost, debit or decide) to `alg` from t = 1 s and checks `next_after` after
/// each, at its instant and `probe` ms later.
fn check<A: Algorithm>(
    alg: &A,
    arrivals: &[(u64, u32, bool)],
    probe: u64,
) -> Result<(), TestCaseError> {
    let (mut state, mut now) = (None, 1_000 * MS);
    for &(gap, cost, debit) in arrivals {
        now += gap * MS + 7; // odd nanoseconds: off the tick grid
        if debit {
            // Cells another node admitted (gossip): the state may go into debt.
            state = Some(alg.debit(state, cost, now));
            check_at(alg, state, now)?;
            continue;
        }
        let d = alg.decide(state, cost, now);
        if !matches!(d.verdict, Verdict::Deny { .. }) {
            state = Some(d.state);
        }
        prop_assert_eq!(d.next_after, alg.peek(state, now).next_after);
        check_at(alg, state, now)?;
        check_at(alg, state, now + probe * MS)?;
    }
    Ok(())
}

fn check_at<A: Algorithm>(alg: &A, state: Option<A::State>, t: u64) -> Result<(), TestCaseError> {
    let full = alg.peek(None, 0).remaining;
    {
        let s = alg.peek(state, t);
        if s.next_after == 0 {
            prop_assert_eq!(s.remaining, full, "next_after 0 at {} but not full", t);
            return Ok(());
        }
        prop_assert!(
            s.remaining < full,
            "full at {} but next_after {}",
            t,
            s.next_after
        );
        let before = alg.peek(state, t + s.next_after - 1).remaining;
        let at = alg.peek(state, t + s.next_after).remaining;
        prop_assert_eq!(
            before,
            s.remaining,
            "quota grew before next_after ({})",
            s.next_after
        );
        prop_assert!(
            at > s.remaining,
            "no quota at next_after {} (r {})",
            s.next_after,
            at
        );
        prop_assert!(s.next_after <= s.reset_after, "next after full");
    }
    Ok(())
}

fn arrivals() -> impl Strategy<Value = Vec<(u64, u32, bool)>> {
    prop::collection::vec((0u64..400, 1u32..4, prop::bool::weighted(0.2)), 1..40)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn gcra(limit in 1u32..50, period_ms in 1u64..3_000, burst in 1u32..20,
            a in arrivals(), probe in 0u64..5_000) {
        let alg = Gcra::new(nz(limit), Duration::from_millis(period_ms), nz(burst)).unwrap();
        check(&alg, &a, probe)?;
    }

    #[test]
    fn token_bucket(limit in 1u32..50, period_ms in 1u64..3_000, burst in 1u32..20,
                    a in arrivals(), probe in 0u64..5_000) {
        let alg = TokenBucket::new(nz(limit), Duration::from_millis(period_ms), nz(burst)).unwrap();
        check(&alg, &a, probe)?;
    }

    #[test]
    fn sliding_window(limit in 1u32..30, period_ms in 1u64..3_000,
                      a in arrivals(), probe in 0u64..5_000) {
        let alg = SlidingWindow::new(nz(limit), Duration::from_millis(period_ms)).unwrap();
        check(&alg, &a, probe)?;
    }

    #[test]
    fn leaky_bucket(limit in 1u32..50, period_ms in 1u64..3_000, delay_ms in 0u64..2_000,
                    a in arrivals(), probe in 0u64..5_000) {
        let alg = LeakyBucket::new(nz(limit), Duration::from_millis(period_ms),
                                   Duration::from_millis(delay_ms)).unwrap();
        check(&alg, &a, probe)?;
    }
}
