//! The summaries as the admin API shows them (`GET /limits/{policy}/top`, `GET /shadow`),
//! and the shadow report's suggested limits (counted in `peaks.rs`); a child of
//! `top/mod.rs`.

use serde::Serialize;

use super::means::means;
use super::merge::{Counts, Merged, labelled, matches, merge, shown};
use super::minutes::MINUTE;
use super::peaks::{Peak, peaks, suggest};
use super::seen::SeenWindow;
use super::{Described, Lookup, Rings, Summary, Window};
use crate::clock::Nanos;

/// `GET /limits/{policy}/top`.
#[derive(Debug, Serialize)]
pub struct TopView {
    pub policy: String,
    pub window: &'static str,
    /// Seconds of traffic the window covers (`1m`: the current minute and the one before,
    /// 60 to 120 s; `15m`: 900 to 960 s; less since the gateway started).
    pub span_seconds: f64,
    /// The same: how much time the counts below were seen over.
    pub seen_seconds: f64,
    /// Exact totals of the window.
    pub denied: u64,
    pub shadow_denied: u64,
    /// Every allowed request of the window (exact), whichever key made it.
    pub allowed: u64,
    /// Distinct keys denied or shadow denied (as `keys_denied`).
    pub distinct_keys: u64,
    /// `distinct_keys` is exact (no minute's table replaced a key), else an estimate.
    pub distinct_keys_exact: bool,
    /// Distinct keys denied or shadow denied in the window.
    pub keys_denied: u64,
    /// Distinct keys that made a request the policy decided, allowed or not.
    pub keys_seen: u64,
    /// `keys_seen` is exact (at most 64 keys in each minute), else an estimate.
    pub keys_seen_exact: bool,
    /// The keys show their `show_values` parts in clear (else every sent value is a hash).
    pub values_shown: bool,
    /// The most any key missing from `top` may have been denied in the window.
    pub max_error: u64,
    /// Sorted by `denied + shadow_denied`, most first; with `?value=`, only the keys with
    /// that value.
    pub top: Vec<KeyCount>,
}

/// One key of `top`.
#[derive(Debug, Serialize)]
pub struct KeyCount {
    pub key: String,
    /// The key as the limiter stores it, when `key` shows its values in clear
    /// (`show_values`): what `/limits/{policy}` and a reset take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_key: Option<String>,
    pub denied: u64,
    pub shadow_denied: u64,
    /// The key's allowed requests counted from its first denial in each minute (a key is
    /// tracked once it is denied; the window's every allowed request is `allowed` above).
    pub allowed: u64,
    /// The counts are exact when 0; else each is at most this much below the truth.
    pub max_error: u64,
}

/// `GET /shadow`.
#[derive(Debug, Serialize)]
pub struct ShadowView {
    pub policies: Vec<ShadowPolicy>,
}

/// One policy that a route runs in shadow mode.
#[derive(Debug, Serialize)]
pub struct ShadowPolicy {
    pub policy: String,
    /// The policy's configured limit and period (0 for concurrency).
    pub limit: u64,
    pub period_seconds: f64,
    pub algorithm: &'static str,
    /// The keys show their `show_values` parts in clear.
    pub values_shown: bool,
    /// What a suggested limit means for this policy's algorithm (its burst).
    pub suggestion_means: &'static str,
    pub windows: ShadowWindows,
}

#[derive(Debug, Serialize)]
pub struct ShadowWindows {
    #[serde(rename = "1m")]
    pub one_minute: ShadowWindow,
    #[serde(rename = "15m")]
    pub fifteen_minutes: ShadowWindow,
}

/// One window of a shadow policy.
#[derive(Debug, Serialize)]
pub struct ShadowWindow {
    /// Seconds of traffic the window covers (`1m`: 60 to 120 s, `15m`: 900 to 960 s, less
    /// since the gateway started).
    pub span_seconds: f64,
    /// The same: how much time the counts were seen over.
    pub seen_seconds: f64,
    /// Shadow denials: requests the policy would have denied.
    pub would_be_denials: u64,
    /// Requests the policy was asked in shadow mode.
    pub requests: u64,
    /// Every allowed request (shadow asks and any route that enforces the policy).
    pub allowed: u64,
    /// Distinct keys that would have been denied (as `keys_denied`).
    pub distinct_keys: u64,
    pub distinct_keys_exact: bool,
    /// Distinct keys denied or shadow denied.
    pub keys_denied: u64,
    /// Distinct keys that made a request, denied or not.
    pub keys_seen: u64,
    pub keys_seen_exact: bool,
    /// The length of the windows each key's `peak` is counted in: `seen_seconds` when the
    /// time seen is no longer than the period (every request in one window), else the
    /// period (whole minutes of it when it is a minute or more); `null` for concurrency.
    pub peak_window_seconds: Option<f64>,
    /// Peaks are counted in windows aligned to the clock: a burst that straddles two may
    /// be split, so a key's true most in one period lies between its peak and twice it.
    pub peak_windows_aligned: bool,
    /// The ten keys with most would-be denials; with `?value=`, every key with that value.
    pub top: Vec<ShareKey>,
    /// For the top 1, 3 and 10 keys.
    pub by_top: Vec<TopK>,
}

#[derive(Debug, Serialize)]
pub struct ShareKey {
    pub key: String,
    /// As [`KeyCount::stored_key`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_key: Option<String>,
    pub would_be_denials: u64,
    /// Of the window's would-be denials.
    pub share: f64,
    pub max_error: u64,
    /// The key's requests in the window.
    pub requests: u64,
    /// The most requests the key made in one window of `peak_window_seconds` (aligned to
    /// the clock when `peak_windows_aligned`: a lower bound of its most in one period).
    pub peak: Option<u64>,
    /// An upper bound of its most requests in one period, sliding: `peak` when not
    /// aligned, else the most in the run of aligned windows one period can touch.
    pub peak_upper: Option<u64>,
}

/// The limit under which at most the `k` keys of highest peak are denied.
#[derive(Debug, Serialize)]
pub struct TopK {
    pub k: usize,
    /// The share of the window's would-be denials of the `k` keys with most of them.
    pub share: f64,
    /// The smallest limit per `period_seconds` under which at most `k` keys are refused:
    /// the `(k+1)`-th largest peak (a count of requests, never more than a key sent).
    /// `null` when fewer than `k + 1` keys made requests (or for concurrency). With
    /// `peak_windows_aligned`, taken from the aligned peaks: the true figure may be above
    /// it, up to `suggested_limit_upper`.
    pub suggested_limit: Option<u64>,
    /// The same from each key's `peak_upper`: under it, at most `k` keys are refused
    /// whatever the aligned windows cut (equal to `suggested_limit` when not aligned).
    pub suggested_limit_upper: Option<u64>,
    /// The keys whose peak is above `suggested_limit`: those it refuses (`k`, or fewer
    /// when keys tie).
    pub refused_keys: Option<usize>,
}

/// The `k` of `by_top`.
const KS: [usize; 3] = [1, 3, 10];

/// Nanoseconds the window `back` minutes from `now` covers.
fn span(rings: &Rings, now: Nanos, back: u64) -> Nanos {
    let start = (now / MINUTE).saturating_sub(back) * MINUTE;
    now.saturating_sub(start.max(rings.since))
        .max(1_000_000_000)
}

fn seconds(n: Nanos) -> f64 {
    n as f64 / 1e9
}

/// Keys by `weight`, most first (ties by key, so answers are stable).
fn ranked<'a>(merged: &Merged<'a>, weight: impl Fn(&Counts) -> u64) -> Vec<(&'a str, Counts)> {
    let mut keys: Vec<(&str, Counts)> = merged
        .keys
        .iter()
        .map(|(k, c)| (*k, *c))
        .filter(|(_, c)| weight(c) > 0)
        .collect();
    keys.sort_unstable_by(|a, b| weight(&b.1).cmp(&weight(&a.1)).then(a.0.cmp(b.0)));
    keys
}

pub(super) fn top(
    policy: &Described,
    rings: &Rings,
    seen: &SeenWindow,
    now: Nanos,
    window: Window,
    n: usize,
    lookup: Lookup<'_>,
) -> TopView {
    let minute = now / MINUTE;
    let merged = labelled(policy, merge(&rings.denials, minute, window.back()));
    let top = ranked(&merged, |c| c.denied + c.shadow_denied)
        .into_iter()
        .filter(|(key, _)| lookup.is_none_or(|l| matches(l, key, &[&merged])))
        .take(n)
        .map(|(key, c)| KeyCount {
            key: merged.shown(key).to_string(),
            stored_key: stored(merged.shown(key), key),
            denied: c.denied,
            shadow_denied: c.shadow_denied,
            allowed: c.allowed,
            max_error: merged.max_error(&c),
        })
        .collect();
    let span = seconds(span(rings, now, window.back()));
    TopView {
        policy: policy.name.to_string(),
        window: window.name(),
        span_seconds: span,
        seen_seconds: span,
        denied: merged.denied,
        shadow_denied: merged.shadow_denied,
        allowed: seen.allowed,
        distinct_keys: merged.distinct,
        distinct_keys_exact: merged.distinct_exact,
        keys_denied: merged.distinct,
        keys_seen: seen.keys,
        keys_seen_exact: seen.keys_exact,
        values_shown: policy.shows,
        max_error: merged.bound(),
        top,
    }
}

pub(super) fn shadow(
    policy: &Described,
    summary: &Summary,
    now: Nanos,
    lookup: Lookup<'_>,
) -> ShadowPolicy {
    let seen = |w: Window| summary.seen.window(now / MINUTE, w.back());
    let (one, fifteen) = (seen(Window::OneMinute), seen(Window::FifteenMinutes));
    let rings = summary.lock();
    let window = |w: Window, seen| shadow_window(policy, &rings, seen, now, w.back(), lookup);
    ShadowPolicy {
        policy: policy.name.to_string(),
        limit: policy.limit,
        period_seconds: policy.period.as_secs_f64(),
        algorithm: policy.algorithm.name(),
        values_shown: policy.shows,
        suggestion_means: means(policy.algorithm),
        windows: ShadowWindows {
            one_minute: window(Window::OneMinute, &one),
            fifteen_minutes: window(Window::FifteenMinutes, &fifteen),
        },
    }
}

fn shadow_window(
    policy: &Described,
    rings: &Rings,
    seen: &SeenWindow,
    now: Nanos,
    back: u64,
    lookup: Lookup<'_>,
) -> ShadowWindow {
    let minute = now / MINUTE;
    let denials = labelled(policy, merge(&rings.denials, minute, back));
    let requests = labelled(policy, merge(&rings.requests, minute, back));
    let span = span(rings, now, back);
    let total = denials.shadow_denied;
    let share = |n: u64| {
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    };
    let deniers = ranked(&denials, |c| c.shadow_denied);
    let peaks = peaks(policy, &rings.requests, &requests, minute, back, span);
    let sorted = |of: fn(&Peak) -> u64| {
        let mut sorted: Vec<u64> = (peaks.as_ref())
            .map(|p| p.by_key.values().map(of).collect())
            .unwrap_or_default();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted
    };
    let (low, high) = (sorted(|p| p.low), sorted(|p| p.high));
    let by_top = KS
        .iter()
        .map(|&k| {
            // None for concurrency (no peaks, nothing sorted).
            let suggested = suggest(&low, k);
            TopK {
                k,
                share: share(deniers.iter().take(k).map(|(_, c)| c.shadow_denied).sum()),
                suggested_limit: suggested.map(|s| s.0),
                suggested_limit_upper: suggest(&high, k).map(|s| s.0),
                refused_keys: suggested.map(|s| s.1),
            }
        })
        .collect();
    let listed = listed(&denials, &requests, lookup);
    let peak = |key: &str| {
        peaks
            .as_ref()
            .map(|p| p.by_key.get(key).copied().unwrap_or_default())
    };
    ShadowWindow {
        span_seconds: seconds(span),
        seen_seconds: seconds(span),
        would_be_denials: total,
        requests: requests.total,
        allowed: seen.allowed,
        distinct_keys: denials.distinct,
        distinct_keys_exact: denials.distinct_exact,
        keys_denied: denials.distinct,
        keys_seen: seen.keys,
        keys_seen_exact: seen.keys_exact,
        peak_window_seconds: peaks.as_ref().map(|p| seconds(p.window)),
        peak_windows_aligned: peaks.as_ref().is_some_and(|p| p.aligned),
        top: listed
            .into_iter()
            .take(if lookup.is_some() { usize::MAX } else { 10 })
            .map(|(key, c, asked)| ShareKey {
                key: shown(&denials, &requests, key).to_string(),
                stored_key: stored(shown(&denials, &requests, key), key),
                would_be_denials: c.shadow_denied,
                share: share(c.shadow_denied),
                max_error: denials.max_error(&c),
                requests: asked,
                peak: peak(key).map(|p| p.low),
                peak_upper: peak(key).map(|p| p.high),
            })
            .collect(),
        by_top,
    }
}

/// The keys a window lists: those with would-be denials, most first; with `lookup`, every
/// key it matches that made a request (with or without would-be denials). Each with its
/// denial counts and its requests.
fn listed<'a>(
    denials: &Merged<'a>,
    requests: &Merged<'a>,
    lookup: Lookup<'_>,
) -> Vec<(&'a str, Counts, u64)> {
    let asked = |k: &str| requests.keys.get(k).map_or(0, |c| c.requests);
    let mut keys: Vec<(&str, Counts, u64)> = match lookup {
        None => ranked(denials, |c| c.shadow_denied)
            .into_iter()
            .map(|(k, c)| (k, c, asked(k)))
            .collect(),
        Some(l) => {
            let mut keys: Vec<&str> = denials
                .keys
                .keys()
                .chain(requests.keys.keys())
                .copied()
                .collect();
            keys.sort_unstable();
            keys.dedup();
            keys.into_iter()
                .filter(|k| matches(l, k, &[denials, requests]))
                .map(|k| {
                    (
                        k,
                        denials.keys.get(k).copied().unwrap_or_default(),
                        asked(k),
                    )
                })
                .collect()
        }
    };
    keys.sort_by(|a, b| {
        (b.1.shadow_denied, b.2)
            .cmp(&(a.1.shadow_denied, a.2))
            .then(a.0.cmp(b.0))
    });
    keys
}

/// The stored key beside a shown one, when the two differ.
fn stored(shown: &str, key: &str) -> Option<String> {
    (shown != key).then(|| key.to_string())
}
