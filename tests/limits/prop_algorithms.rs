//! Property tests for the per-key decisions of the limit step
//! (`tollgate::limit::algorithm`).
//!
//! Each algorithm is replayed against a slow reference model that is written
//! from the definition rather than from the implementation's state machine:
//! GCRA and the token bucket against the arrival-curve condition over the full
//! log of admitted requests, the sliding window against naive per-window
//! counts, the leaky bucket against an explicit queue of slots, concurrency
//! against the list of requests in flight. The model never computes waits
//! analytically: `retry_after` and `reset_after` are found by binary search
//! over its admission predicate, and `remaining` by admitting cost-1 requests
//! one by one. All comparisons are exact; the only tolerance (1 ns) is in the
//! leaky bucket's spacing check, where delays are rounded up to whole ns.

use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tollgate::limit::algorithm::{
    Algorithm, CONCURRENCY_RETRY_HINT, Concurrency, Gcra, LeakyBucket, NEVER, SlidingWindow,
    TokenBucket, Verdict,
};

const MS: u64 = 1_000_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("strategies only produce non-zero values")
}

/// A reference model: slow, but correct by inspection.
trait Model: Clone {
    /// `Some(delay)` if a request of cost `c` at `t` is admitted (held `delay` ns).
    fn admit(&self, t: u64, c: u32) -> Option<u64>;
    /// Records an admitted request.
    fn commit(&mut self, t: u64, c: u32, delay: u64);
    /// True when the key at `t` behaves like a fresh one.
    fn is_full(&self, t: u64) -> bool;
}

/// Smallest `t' ≥ from` where the monotone `pred` holds, searching `horizon` ns.
fn earliest(from: u64, horizon: u64, pred: impl Fn(u64) -> bool) -> Option<u64> {
    if pred(from) {
        return Some(from);
    }
    let (mut lo, mut hi) = (from, from + horizon);
    if !pred(hi) {
        return None;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}

/// `remaining` by brute force: admit cost-1 requests at `t` until one fails.
fn remaining<M: Model>(model: &M, t: u64) -> u64 {
    let mut m = model.clone();
    let mut n = 0;
    while let Some(delay) = m.admit(t, 1) {
        m.commit(t, 1, delay);
        n += 1;
    }
    n
}

/// Replays `steps` (time advance, cost) through `alg` and `model`, comparing
/// verdict, wait, remaining and reset at every step. Denied states are stored
/// too, checking that they are equivalent to the input as documented.
fn replay<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    steps: &[(u64, u32)],
    horizon: u64,
) -> Result<(), TestCaseError> {
    let (mut t, mut state) = (0u64, None);
    for &(advance, cost) in steps {
        t += advance;
        let d = alg.decide(state, cost, t);
        let expected = match model.admit(t, cost) {
            Some(0) => Verdict::Allow,
            Some(delay) => Verdict::Delay(delay),
            None => {
                let at = earliest(t, horizon, |x| model.admit(x, cost).is_some());
                Verdict::Deny {
                    retry_after: at.map_or(NEVER, |at| at - t),
                }
            }
        };
        prop_assert_eq!(d.verdict, expected, "t={} cost={}", t, cost);
        if let Some(delay) = model.admit(t, cost) {
            model.commit(t, cost, delay);
        }
        prop_assert_eq!(d.remaining, remaining(&model, t), "remaining at t={}", t);
        let full = earliest(t, horizon, |x| model.is_full(x)).map(|x| x - t);
        prop_assert_eq!(Some(d.reset_after), full, "reset at t={}", t);
        let peek = alg.peek(Some(d.state), t);
        prop_assert_eq!(
            (peek.remaining, peek.reset_after),
            (d.remaining, d.reset_after)
        );
        state = Some(d.state);
    }
    Ok(())
}

/// GCRA / token bucket by definition: a request of cost `c` at `t` fits iff for
/// every admitted arrival `a_i`, the cells admitted in `[a_i, t]` plus `c` stay
/// within `burst + (t − a_i)·limit/period` (and `c ≤ burst`).
#[derive(Clone)]
struct ArrivalCurve {
    limit: u128,
    period: u128,
    burst: u128,
    log: Vec<(u64, u32)>,
}

impl ArrivalCurve {
    fn new(limit: u32, period: u64, burst: u32) -> Self {
        let (limit, period, burst) = (limit.into(), period.into(), burst.into());
        Self {
            limit,
            period,
            burst,
            log: Vec::new(),
        }
    }
    /// Does every suffix of the log plus `extra` cells fit within `slack` cells of burst?
    fn fits(&self, t: u64, extra: u128, slack: u128) -> bool {
        (0..self.log.len()).all(|i| {
            let n: u128 = self.log[i..].iter().map(|&(_, c)| u128::from(c)).sum();
            let dt = u128::from(t - self.log[i].0);
            (n + extra) * self.period <= slack * self.period + dt * self.limit
        })
    }
}

impl Model for ArrivalCurve {
    fn admit(&self, t: u64, c: u32) -> Option<u64> {
        let c = u128::from(c);
        (c <= self.burst && self.fits(t, c, self.burst)).then_some(0)
    }
    fn commit(&mut self, t: u64, c: u32, _: u64) {
        self.log.push((t, c));
    }
    fn is_full(&self, t: u64) -> bool {
        self.fits(t, 0, 0)
    }
}

/// Sliding window by definition: raw counts per aligned window, never rolled.
#[derive(Clone)]
struct WindowCounts {
    limit: u128,
    period: u64,
    counts: std::collections::BTreeMap<u64, u128>,
}

impl WindowCounts {
    /// Is `prev·(1 − e/P) + curr + c ≤ limit` at `t` (multiplied out by P)?
    fn estimate_fits(&self, t: u64, c: u128, limit: u128) -> bool {
        let (w, e) = (t / self.period, u128::from(t % self.period));
        let count = |w: Option<u64>| w.and_then(|w| self.counts.get(&w)).copied().unwrap_or(0);
        let (prev, curr) = (count(w.checked_sub(1)), count(Some(w)));
        let p = u128::from(self.period);
        prev * (p - e) + (curr + c) * p <= limit * p
    }
}

impl Model for WindowCounts {
    fn admit(&self, t: u64, c: u32) -> Option<u64> {
        self.estimate_fits(t, c.into(), self.limit).then_some(0)
    }
    fn commit(&mut self, t: u64, c: u32, _: u64) {
        *self.counts.entry(t / self.period).or_default() += u128::from(c);
    }
    fn is_full(&self, t: u64) -> bool {
        self.estimate_fits(t, 0, 0)
    }
}

/// Leaky bucket by definition: the queue of reserved slots, times kept in
/// units of 1/limit ns so a slot is exactly `period` units long.
#[derive(Clone)]
struct SlotQueue {
    limit: u128,
    period: u128,
    max_delay: u128,
    /// (first slot start, cells) of every admitted request, in order.
    queue: Vec<(u128, u128)>,
}

impl SlotQueue {
    /// Where a request arriving at `t` starts: after the last reserved slot.
    fn start(&self, t: u64) -> u128 {
        let now = u128::from(t) * self.limit;
        self.queue
            .last()
            .map_or(now, |&(s, c)| (s + c * self.period).max(now))
    }
}

impl Model for SlotQueue {
    fn admit(&self, t: u64, c: u32) -> Option<u64> {
        if c == 0 {
            return Some(0);
        }
        let wait = self.start(t) - u128::from(t) * self.limit;
        let delay = u64::try_from(wait.div_ceil(self.limit)).expect("small test times");
        (wait <= self.max_delay * self.limit).then_some(delay)
    }
    fn commit(&mut self, t: u64, c: u32, _: u64) {
        if c > 0 {
            let start = self.start(t);
            self.queue.push((start, c.into()));
        }
    }
    fn is_full(&self, t: u64) -> bool {
        self.start(t) == u128::from(t) * self.limit
    }
}

/// Quota parameters: limit, period in ns (often not a multiple of the limit), burst.
fn quota() -> impl Strategy<Value = (u32, u64, u32)> {
    let period = prop_oneof![MS..20 * MS, (1..20u64).prop_map(|m| m * MS)];
    (1..7u32, period, 1..7u32)
}

/// Random (advance, cost) sequences: bursts, near-interval gaps and long idles.
fn steps(period: u64, max_cost: u32) -> impl Strategy<Value = Vec<(u64, u32)>> {
    let advance = prop_oneof![2 => Just(0), 3 => 0..period / 3, 1 => 0..3 * period];
    let cost = prop_oneof![4 => Just(1), 1 => 0..=max_cost + 1];
    prop::collection::vec((advance, cost), 1..30)
}

fn scenario() -> impl Strategy<Value = ((u32, u64, u32), Vec<(u64, u32)>)> {
    quota().prop_flat_map(|q| (Just(q), steps(q.1, q.2.max(q.0))))
}

/// A generous search horizon for the model's binary searches.
fn horizon(period: u64) -> u64 {
    100 * period
}

/// Modest case counts keep the file at about a second in debug builds;
/// failures are persisted under `proptest-regressions/` so they replay first.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/prop_algorithms.txt",
        ))),
        ..ProptestConfig::default()
    }
}

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
