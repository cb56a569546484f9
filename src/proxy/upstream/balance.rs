//! Step 5: which of an upstream's URLs a request goes to (`balance`), among those a
//! predicate allows (in, healthy, not yet tried by this request; `pool.rs` decides
//! which predicates, and falls back when none passes).
//!
//! - `round_robin`: a fixed schedule in which each URL appears as often as its weight,
//!   spread out (nginx's smooth weighted round robin, computed once), walked by a cursor:
//!   weights 3:1 send exactly three of every four requests to the first URL.
//! - `random`: a URL drawn by weight.
//! - `least_request`: two URLs drawn by weight, the one with fewer requests in flight per
//!   unit of weight taken (power of two choices: nearly as good as asking every URL, at
//!   the cost of two reads, and no herd on the one idle URL).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::Balance;

/// One worker's chooser for one upstream.
#[derive(Debug)]
pub(super) struct Picker {
    balance: Balance,
    weights: Box<[u32]>,
    /// Running sums of `weights`, for a draw by weight.
    sums: Box<[u32]>,
    /// Round robin's order, one entry per unit of (reduced) weight.
    schedule: Box<[u32]>,
    next: AtomicUsize,
}

impl Picker {
    pub fn new(balance: Balance, weights: &[u32]) -> Self {
        let sums = (weights.iter())
            .scan(0u32, |s, w| {
                *s += w;
                Some(*s)
            })
            .collect();
        Picker {
            balance,
            weights: weights.into(),
            sums,
            schedule: smooth_schedule(weights),
            next: AtomicUsize::new(0),
        }
    }

    /// A URL `ok` allows, chosen by the balance; `None` when it allows none. `in_flight`
    /// is read for least-request only.
    pub fn pick(
        &self,
        ok: impl Fn(usize) -> bool,
        in_flight: impl Fn(usize) -> i64,
    ) -> Option<usize> {
        match self.balance {
            // A turn that falls on a URL not allowed is passed, not given to its neighbour
            // (which would then get twice its share): the cursor moves on. Other workers move
            // it too, so a few turns may all miss: then a scan settles it.
            Balance::RoundRobin => (0..self.schedule.len())
                .find_map(|_| {
                    let at = self.next.fetch_add(1, Ordering::Relaxed) % self.schedule.len();
                    let i = self.schedule[at] as usize;
                    ok(i).then_some(i)
                })
                .or_else(|| self.scan(&ok)),
            Balance::Random => self.draw(&ok).or_else(|| self.scan(&ok)),
            Balance::LeastRequest => {
                let Some(a) = self.draw(&ok) else {
                    return self.scan(&ok);
                };
                let other = |i: usize| i != a && ok(i);
                let Some(b) = self.draw(&other).or_else(|| self.scan(&other)) else {
                    return Some(a);
                };
                // Fewer in flight per unit of weight, (fa + 1) / wa against (fb + 1) / wb
                // multiplied out (the + 1: the request being placed), ties to the first draw.
                let cost = |i: usize, other: usize| {
                    (in_flight(i).max(0) as u64 + 1) * u64::from(self.weights[other])
                };
                Some(if cost(a, b) <= cost(b, a) { a } else { b })
            }
        }
    }

    /// A URL for a request's next attempt: as [`Self::pick`], except that round robin does
    /// not take a turn. A retry that took one would push the next request's turn past the
    /// URL it retried on, so with two URLs a failing one would get every first attempt.
    pub fn pick_again(
        &self,
        ok: impl Fn(usize) -> bool,
        in_flight: impl Fn(usize) -> i64,
    ) -> Option<usize> {
        if self.balance != Balance::RoundRobin {
            return self.pick(ok, in_flight);
        }
        let n = self.schedule.len();
        let at = self.next.load(Ordering::Relaxed);
        (0..n)
            .map(|k| self.schedule[(at + k) % n] as usize)
            .find(|&i| ok(i))
    }

    /// A URL drawn by weight that `ok` allows, in a few tries (a rejected draw is drawn
    /// again; after that the caller scans).
    fn draw(&self, ok: &impl Fn(usize) -> bool) -> Option<usize> {
        let total = *self.sums.last()?;
        (0..4).find_map(|_| {
            let r = fastrand::u32(0..total);
            let i = self.sums.partition_point(|&s| s <= r);
            ok(i).then_some(i)
        })
    }

    /// The first URL `ok` allows from a random start.
    fn scan(&self, ok: &impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.weights.len();
        let start = fastrand::usize(0..n.max(1));
        (0..n).map(|k| (start + k) % n).find(|&i| ok(i))
    }
}

/// Smooth weighted round robin (nginx `ngx_http_upstream_get_peer`) run once over a whole
/// cycle of the weights reduced by their greatest common divisor: `[3, 1]` gives
/// `[0, 0, 1, 0]`, equal weights give `0, 1, …, n-1`.
fn smooth_schedule(weights: &[u32]) -> Box<[u32]> {
    let g = weights.iter().copied().fold(0, gcd).max(1);
    let w: Vec<i64> = weights.iter().map(|&x| i64::from(x / g)).collect();
    let total: i64 = w.iter().sum();
    let mut current = vec![0i64; w.len()];
    (0..total)
        .map(|_| {
            for (c, wi) in current.iter_mut().zip(&w) {
                *c += wi;
            }
            let best = (0..w.len())
                .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
                .unwrap_or(0);
            current[best] -= total;
            best as u32
        })
        .collect()
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests;
