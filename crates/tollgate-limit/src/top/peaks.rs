//! Each shadow key's peak — the most requests it made in one window of the policy's period
//! — and the suggested limits taken from them; a child of `top/mod.rs`, read by `view.rs`.
//!
//! Counts, not rates: a key refused under a limit `L` per period is one that sent more
//! than `L` within one period, so the smallest limit under which at most `k` keys are
//! refused is the `(k+1)`-th largest peak. Averaging a key's requests over the time seen
//! and scaling that to the period (what this replaced) suggests 2 700 per 15 minutes for a
//! key that sent 3 requests in 2 seconds.
//!
//! How a peak is counted, from what the requests ring keeps:
//! - the window seen is no longer than the period: the key's requests in all of it (one
//!   window holds them all);
//! - a period of a minute or more: the most requests in `period / 1 min` consecutive whole
//!   minutes of the window (windows aligned to the clock's minutes);
//! - a shorter period: the most requests in one slice of the clock as long as the period
//!   (`table.rs` counts each key's slices as its requests arrive).
//!
//! Aligned windows cut a burst that straddles their edge in two, so an aligned peak may be
//! below the truth (300 requests a minute over t = 30–90 s: 150 in each of two minutes,
//! 60 a minute for the next key read as 30). Each aligned peak therefore comes with an
//! upper bound, the most in any run of windows a sliding window of the period can touch:
//! one minute more than the run for a period of whole minutes (two more when the period is
//! not a whole number of minutes), two adjacent slices for a shorter one (and, across a
//! minute's edge, the last two slices of one minute and the first two of the next). The
//! true most in one period lies between the two; when the window seen is no longer than
//! the period, both are the exact count.

use hashbrown::HashMap;

use super::Described;
use super::merge::Merged;
use super::minutes::{MINUTE, Minutes, RING};
use crate::clock::{Nanos, duration_to_nanos};

/// A key's most requests in one period: at least `low` (the busiest aligned window), at
/// most `high`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Peak {
    pub low: u64,
    pub high: u64,
}

impl Peak {
    fn exact(n: u64) -> Self {
        Peak { low: n, high: n }
    }

    fn widen(&mut self, low: u64, high: u64) {
        self.low = self.low.max(low);
        self.high = self.high.max(high).max(self.low);
    }
}

/// Each key's peak in a window, and how it was counted.
pub(super) struct Peaks<'a> {
    pub by_key: HashMap<&'a str, Peak>,
    /// The length of the windows a peak is counted in.
    pub window: Nanos,
    /// Counted in windows aligned to the clock (a burst may straddle two).
    pub aligned: bool,
}

/// The peaks of the window `[now - back, now]` (minutes) of `requests`, which covers `seen`
/// nanoseconds of traffic; `None` for a policy without a period (concurrency).
pub(super) fn peaks<'a>(
    policy: &Described,
    requests: &'a Minutes,
    merged: &Merged<'a>,
    now: u64,
    back: u64,
    seen: Nanos,
) -> Option<Peaks<'a>> {
    let period = duration_to_nanos(policy.period);
    if period == 0 {
        return None;
    }
    if seen <= period {
        let by_key = (merged.keys.iter())
            .map(|(k, c)| (*k, Peak::exact(c.requests)))
            .collect();
        return Some(Peaks {
            by_key,
            window: seen,
            aligned: false,
        });
    }
    let first = now.saturating_sub(back);
    let mut by_key: HashMap<&str, Peak> = HashMap::new();
    if period < MINUTE {
        // Per key: the busiest slice and pair of slices of each minute, then the pairs
        // across each minute's edge (its tail and the next minute's head).
        let mut edges: HashMap<&str, [(u64, u64); RING]> = HashMap::new();
        for (at, minute) in requests.window_at(now, back) {
            let slot = usize::try_from(at - first).unwrap_or(0).min(RING - 1);
            for e in minute.table.entries() {
                by_key
                    .entry(&*e.key)
                    .or_default()
                    .widen(e.peak, e.peak_pair);
                edges.entry(&*e.key).or_insert([(0, 0); RING])[slot] = (e.head, e.tail);
            }
        }
        for (key, edges) in edges {
            let across = edges.windows(2).map(|w| w[0].1 + w[1].0).max();
            let p = by_key.entry(key).or_default();
            p.widen(0, across.unwrap_or(0));
        }
        return Some(Peaks {
            by_key,
            window: period,
            aligned: true,
        });
    }
    // Per key, its requests in each minute of the window (oldest first: at least what was
    // counted, at most the entry's weight), then the most in `run` consecutive minutes and
    // in the run a sliding window of the period may touch.
    let run = usize::try_from(period / MINUTE).unwrap_or(RING).min(RING);
    let touched = (run + 1 + usize::from(!period.is_multiple_of(MINUTE))).min(RING);
    let mut minutes: HashMap<&str, [(u64, u64); RING]> = HashMap::new();
    for (at, minute) in requests.window_at(now, back) {
        let slot = usize::try_from(at - first).unwrap_or(0).min(RING - 1);
        for e in minute.table.entries() {
            let m = &mut minutes.entry(&*e.key).or_insert([(0, 0); RING])[slot];
            (m.0, m.1) = (m.0 + e.weight - e.error, m.1 + e.weight);
        }
    }
    for (key, counts) in minutes {
        let most = |n: usize, of: fn(&(u64, u64)) -> u64| {
            (counts.windows(n))
                .map(|w| w.iter().map(of).sum())
                .max()
                .unwrap_or(0)
        };
        let low = most(run, |c| c.0);
        let high = most(touched, |c| c.1);
        by_key.entry(key).or_default().widen(low, high);
    }
    Some(Peaks {
        by_key,
        window: run as u64 * MINUTE,
        aligned: true,
    })
}

/// The smallest limit per period under which at most `k` keys are refused — the
/// `(k+1)`-th largest peak (`sorted`: most first) — and how many keys it refuses (those
/// whose peak is above it: fewer than `k` when keys tie); `None` when fewer than `k + 1`
/// keys made requests. Taken from the low peaks and from the high ones, it bounds the
/// true figure on both sides (the `(k+1)`-th largest of numbers each between a low and a
/// high lies between the `(k+1)`-th largest lows and highs).
pub(super) fn suggest(sorted: &[u64], k: usize) -> Option<(u64, usize)> {
    let next = *sorted.get(k)?;
    let refused = sorted.iter().take_while(|&&p| p > next).count();
    Some((next.max(1), refused))
}
