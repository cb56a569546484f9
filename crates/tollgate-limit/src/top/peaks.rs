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
//! Aligned windows cut a burst that straddles their boundary in two, so an aligned peak
//! may be below the truth, by at most half: the true largest count in a period lies
//! between the peak and twice it.

use hashbrown::HashMap;

use super::Described;
use super::merge::Merged;
use super::minutes::{MINUTE, Minutes, RING};
use crate::clock::{Nanos, duration_to_nanos};

/// Each key's peak in a window, and how it was counted.
pub(super) struct Peaks<'a> {
    pub by_key: HashMap<&'a str, u64>,
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
        let by_key = merged.keys.iter().map(|(k, c)| (*k, c.requests)).collect();
        return Some(Peaks {
            by_key,
            window: seen,
            aligned: false,
        });
    }
    let mut by_key: HashMap<&str, u64> = HashMap::new();
    if period < MINUTE {
        for minute in requests.window(now, back) {
            for e in minute.table.entries() {
                let p = by_key.entry(&*e.key).or_default();
                *p = (*p).max(e.peak);
            }
        }
        return Some(Peaks {
            by_key,
            window: period,
            aligned: true,
        });
    }
    // Per key, its requests in each minute of the window (oldest first), then the most
    // in `run` consecutive minutes.
    let run = usize::try_from(period / MINUTE).unwrap_or(RING).min(RING);
    let first = now.saturating_sub(back);
    let mut minutes: HashMap<&str, [u64; RING]> = HashMap::new();
    for (at, minute) in requests.window_at(now, back) {
        let slot = usize::try_from(at - first).unwrap_or(0).min(RING - 1);
        for e in minute.table.entries() {
            minutes.entry(&*e.key).or_insert([0; RING])[slot] += e.weight - e.error;
        }
    }
    for (key, counts) in minutes {
        let most = counts
            .windows(run)
            .map(|w| w.iter().sum())
            .max()
            .unwrap_or(0);
        by_key.insert(key, most);
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
/// keys made requests.
pub(super) fn suggest(sorted: &[u64], k: usize) -> Option<(u64, usize)> {
    let next = *sorted.get(k)?;
    let refused = sorted.iter().take_while(|&&p| p > next).count();
    Some((next.max(1), refused))
}
