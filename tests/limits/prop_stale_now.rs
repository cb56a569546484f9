//! A `now` older than the last write: what the local site's single-key check relies on
//! since it reads the clock before taking the shard lock (`LocalStore::check_single`).
//!
//! Two threads may read the clock in one order and lock the shard in the other, so a
//! decision can see a state that a concurrent decision wrote at a later `now`. Every
//! algorithm must then only under-admit: the stale decision admits only what the same
//! decision at the writer's `now` would, and the state it leaves is no more permissive
//! afterwards than that one's. Its idle test must also be monotone in time, since the site
//! removes a key that is idle at the (stale) `now` of the check.

use crate::common::nz;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tollgate::limit::algorithm::{
    Algorithm, Concurrency, Gcra, LeakyBucket, SlidingWindow, TokenBucket,
};

const MS: u64 = 1_000_000;

/// Replays `steps`, then one admitted cost-1 decision at `t` (the concurrent writer), then
/// checks a decision of `cost` at `t − back` against the same decision at `t`.
fn stale<A: Algorithm>(
    alg: &A,
    steps: &[(u64, u32)],
    cost: u32,
    back: u64,
) -> Result<(), TestCaseError> {
    let (mut t, mut state) = (0u64, None);
    for &(advance, c) in steps {
        t += advance;
        let d = alg.decide(state, c, t);
        if d.verdict.admits() {
            state = Some(d.state);
        }
    }
    let writer = alg.decide(state, 1, t);
    if !writer.verdict.admits() {
        // Nothing written at `t`: a later check's `now` is not stale against this state.
        return Ok(());
    }
    let written = Some(writer.state);
    let old = t.saturating_sub(back);
    let (late, early) = (alg.decide(written, cost, t), alg.decide(written, cost, old));
    prop_assert!(
        !early.verdict.admits() || late.verdict.admits(),
        "admitted at the stale now {} but not at {}",
        old,
        t
    );
    if early.verdict.admits() {
        for u in [t, t + back, t + 7 * back / 3 + 1, t + 1000 * MS] {
            let (e, l) = (
                alg.peek(Some(early.state), u),
                alg.peek(Some(late.state), u),
            );
            prop_assert!(
                e.remaining <= l.remaining,
                "more room at {}: {:?} {:?}",
                u,
                e,
                l
            );
            let probe = |s| alg.decide(Some(s), 1, u).verdict.admits();
            prop_assert!(
                !probe(early.state) || probe(late.state),
                "admits more at {}",
                u
            );
        }
    }
    // The site drops a key idle at its check's `now`: it must stay idle from then on.
    for s in [early.state, late.state] {
        if alg.is_idle(&s, old) {
            prop_assert!(alg.is_idle(&s, t) && alg.is_idle(&s, t + 1000 * MS));
        }
    }
    Ok(())
}

/// (limit, period ns, burst) and a history of (advance ns, cost) at about the quota's pace.
fn scenario() -> impl Strategy<Value = ((u32, u64, u32), Vec<(u64, u32)>)> {
    (1..20u32, 1..500u64, 1..10u32).prop_flat_map(|(l, p_ms, b)| {
        let p = p_ms * MS;
        let step = (0..2 * p / u64::from(l) + 1, 1..4u32);
        (Just((l, p, b)), proptest::collection::vec(step, 0..30))
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/prop_stale_now.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_stale_now_only_under_admits(
        ((l, p, b), s) in scenario(),
        which in 0..5usize,
        cost in 1..4u32,
        back in 0..3 * MS,
    ) {
        let (period, l, b) = (Duration::from_nanos(p), nz(l), nz(b));
        match which {
            0 => stale(&Gcra::new(l, period, b).expect("valid"), &s, cost, back),
            1 => stale(&TokenBucket::new(l, period, b).expect("valid"), &s, cost, back),
            2 => stale(&SlidingWindow::new(l, period).expect("valid"), &s, cost, back),
            3 => stale(&LeakyBucket::new(l, period, period / 2).expect("valid"), &s, cost, back),
            _ => stale(&Concurrency::new(l), &s, cost, back),
        }?;
    }
}
