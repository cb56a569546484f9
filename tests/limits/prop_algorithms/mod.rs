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

use crate::common::nz;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tollgate::limit::algorithm::{
    Algorithm, CONCURRENCY_RETRY_HINT, Concurrency, Gcra, LeakyBucket, NEVER, SlidingWindow,
    TokenBucket, Verdict,
};

const MS: u64 = 1_000_000;

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

mod properties;
