//! The properties themselves: each algorithm against its model, the leaky bucket's
//! smoothness, the bound, and exact `Retry-After` and idle answers.

use super::*;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn gcra_matches_arrival_curve(((l, p, b), s) in scenario()) {
        let alg = Gcra::new(nz(l), Duration::from_nanos(p), nz(b)).expect("valid quota");
        replay(&alg, ArrivalCurve::new(l, p, b), &s, horizon(p))?;
    }

    #[test]
    fn token_bucket_matches_arrival_curve(((l, p, b), s) in scenario()) {
        let alg = TokenBucket::new(nz(l), Duration::from_nanos(p), nz(b)).expect("valid quota");
        replay(&alg, ArrivalCurve::new(l, p, b), &s, horizon(p))?;
    }

    #[test]
    fn sliding_window_matches_window_counts(((l, p, _), s) in scenario()) {
        let alg = SlidingWindow::new(nz(l), Duration::from_nanos(p)).expect("valid quota");
        let model = WindowCounts { limit: l.into(), period: p, counts: Default::default() };
        replay(&alg, model, &s, horizon(p))?;
    }

    #[test]
    fn leaky_bucket_matches_slot_queue(((l, p, b), s) in scenario(), delay_slots in 0..4u64) {
        let max_delay = delay_slots * p / u64::from(l) + u64::from(b);
        let alg = LeakyBucket::new(nz(l), Duration::from_nanos(p), Duration::from_nanos(max_delay))
            .expect("valid quota");
        let model = SlotQueue {
            limit: l.into(), period: p.into(), max_delay: max_delay.into(), queue: Vec::new(),
        };
        replay(&alg, model, &s, horizon(p))?;
    }

    /// The leaky bucket's whole point: forwarded requests are spaced by their
    /// cells' share of the period (1 ns tolerance for rounded-up delays), and
    /// nobody is held longer than `max_delay`.
    #[test]
    fn leaky_bucket_output_is_smooth(((l, p, _), s) in scenario(), max_delay in 0..40 * MS) {
        let alg = LeakyBucket::new(nz(l), Duration::from_nanos(p), Duration::from_nanos(max_delay))
            .expect("valid quota");
        let (mut t, mut state, mut prev) = (0u64, None, None::<(u64, u32)>);
        for (advance, cost) in s {
            t += advance;
            let d = alg.decide(state, cost, t);
            let out = match d.verdict {
                Verdict::Allow => t,
                Verdict::Delay(by) => { prop_assert!(by > 0 && by <= max_delay); t + by }
                Verdict::Deny { retry_after } => { prop_assert!(retry_after > 0); continue }
            };
            if let Some((at, c)) = prev.filter(|_| cost > 0) {
                let gap = u128::from(out + 1 - at) * u128::from(l);
                prop_assert!(gap > u128::from(c) * u128::from(p), "{} then {}", at, out);
            }
            if cost > 0 { prev = Some((out, cost)); }
            state = Some(d.state);
        }
    }

    #[test]
    fn concurrency_matches_in_flight_list(
        l in 1..6u32,
        ops in prop::collection::vec((any::<bool>(), 0..8u32), 1..60),
    ) {
        let alg = Concurrency::new(nz(l));
        let (mut state, mut in_flight) = (None, Vec::<u32>::new());
        for (acquire, x) in ops {
            if acquire || in_flight.is_empty() {
                let d = alg.decide(state, x, 0);
                let used: u32 = in_flight.iter().sum();
                let expected = if x > l { Verdict::Deny { retry_after: NEVER } }
                    else if used + x > l { Verdict::Deny { retry_after: CONCURRENCY_RETRY_HINT } }
                    else { in_flight.push(x); Verdict::Allow };
                prop_assert_eq!(d.verdict, expected);
                state = Some(d.state);
            } else {
                let cost = in_flight.swap_remove(x as usize % in_flight.len());
                state = state.map(|s| alg.release(s, cost));
            }
            let used: u32 = in_flight.iter().sum();
            let snap = alg.peek(state, 0);
            prop_assert_eq!((snap.remaining, snap.reset_after), (u64::from(l - used), 0));
            prop_assert_eq!(state.is_some_and(|s| !alg.is_idle(&s, 0)), used > 0);
        }
    }

    /// From a fresh key, any window of length D admits at most burst + ⌊D·limit/period⌋.
    #[test]
    fn gcra_and_token_bucket_obey_the_bound(
        (l, p, b) in quota(),
        gaps in prop::collection::vec(prop_oneof![Just(0u64), 0..2 * MS], 1..200),
    ) {
        let gcra = Gcra::new(nz(l), Duration::from_nanos(p), nz(b)).expect("valid quota");
        let bucket = TokenBucket::new(nz(l), Duration::from_nanos(p), nz(b)).expect("valid quota");
        let (mut t, mut gs, mut bs, mut admitted) = (0u64, None, None, Vec::new());
        for gap in gaps {
            t += gap;
            let (g, k) = (gcra.decide(gs, 1, t), bucket.decide(bs, 1, t));
            prop_assert_eq!(g.verdict.admits(), k.verdict.admits(), "same math at t={}", t);
            if g.verdict.admits() { gs = Some(g.state); bs = Some(k.state); admitted.push(t); }
        }
        for i in 0..admitted.len() {
            for j in i..admitted.len() {
                let span = u128::from(admitted[j] - admitted[i]);
                let bound = u128::from(b) + span * u128::from(l) / u128::from(p);
                prop_assert!((j - i + 1) as u128 <= bound, "{} cells in {} ns", j - i + 1, span);
            }
        }
    }

    /// After a random history, spend at one instant until denied: the reported
    /// wait is exact (deny 1 ns earlier, admit then), an earlier `now` denies
    /// too, and an idle state (checked at the reported reset) decides like an
    /// absent key.
    #[test]
    fn retry_after_is_exact_and_idle_is_sound(
        ((l, p, b), s) in scenario(),
        which in 0..4usize,
        cost in 1..4u32,
        later in 0..3 * MS,
    ) {
        let (period, l, b) = (Duration::from_nanos(p), nz(l), nz(b));
        match which {
            0 => exact_and_idle(&Gcra::new(l, period, b).expect("valid"), &s, cost.min(b.get()), later),
            1 => exact_and_idle(&TokenBucket::new(l, period, b).expect("valid"), &s, cost.min(b.get()), later),
            2 => exact_and_idle(&SlidingWindow::new(l, period).expect("valid"), &s, cost.min(l.get()), later),
            _ => exact_and_idle(&LeakyBucket::new(l, period, period / 2).expect("valid"), &s, cost, later),
        }?;
    }
}

fn exact_and_idle<A: Algorithm>(
    alg: &A,
    steps: &[(u64, u32)],
    cost: u32,
    later: u64,
) -> Result<(), TestCaseError> {
    let (mut t, mut state) = (0u64, None);
    for &(advance, c) in steps {
        t += advance;
        let d = alg.decide(state, c, t);
        if d.verdict.admits() {
            state = Some(d.state);
        }
    }
    let denied = loop {
        let d = alg.decide(state, cost, t);
        match d.verdict {
            Verdict::Deny { retry_after } => break retry_after,
            _ => state = Some(d.state),
        }
    };
    prop_assert!(denied > 0 && denied != NEVER);
    prop_assert!(!alg.decide(state, cost, t + denied - 1).verdict.admits());
    prop_assert!(alg.decide(state, cost, t + denied).verdict.admits());
    // A stale `now` (threads locking out of order) may only under-admit.
    let stale = t.saturating_sub(later);
    prop_assert!(!alg.decide(state, cost, stale).verdict.admits());

    let s = state.expect("at least one request was admitted before the deny");
    let reset = alg.peek(state, t).reset_after;
    prop_assert!(reset > 0 && !alg.is_idle(&s, t + reset - 1));
    for at in [t + reset, t + reset + later] {
        prop_assert!(alg.is_idle(&s, at), "idle at reset");
        prop_assert_eq!(alg.decide(Some(s), cost, at), alg.decide(None, cost, at));
        prop_assert_eq!(alg.peek(Some(s), at), alg.peek(None, at));
    }
    Ok(())
}
