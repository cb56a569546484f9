//! The summaries as the admin API shows them (`GET /limits/{policy}/top`, `GET /shadow`),
//! and the shadow report's suggested limits; a child of `top/mod.rs`.
//!
//! The suggestion: each key's requests in the window (the requests ring, shadow asks only)
//! as a rate per policy period, `requests × period / span`; sorted from the busiest, the
//! smallest limit under which only the top `k` keys exceed it is the `(k+1)`-th rate,
//! rounded up. It is an average: a key that bursts within the window is denied under a
//! limit its average passes (or let through by a burst allowance), so the suggestion says
//! what the window's averages would have done, not what an algorithm would.

use serde::Serialize;

use super::merge::{Counts, Merged, merge};
use super::minutes::MINUTE;
use super::{Described, Rings, Window};
use crate::clock::Nanos;

/// `GET /limits/{policy}/top`.
#[derive(Debug, Serialize)]
pub struct TopView {
    pub policy: String,
    pub window: &'static str,
    /// Seconds of traffic the window covers (`1m`: 60 to 120, `15m`: 900 to 960, less
    /// since the gateway started).
    pub span_seconds: f64,
    /// Exact totals of the window.
    pub denied: u64,
    pub shadow_denied: u64,
    pub distinct_keys: u64,
    /// `distinct_keys` is exact (no minute's table replaced a key), else an estimate.
    pub distinct_keys_exact: bool,
    /// The most any key missing from `top` may have been denied in the window.
    pub max_error: u64,
    /// Sorted by `denied + shadow_denied`, most first.
    pub top: Vec<KeyCount>,
}

/// One key of `top`.
#[derive(Debug, Serialize)]
pub struct KeyCount {
    pub key: String,
    pub denied: u64,
    pub shadow_denied: u64,
    /// Allowed requests counted since the key's first denial in each minute.
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
    pub span_seconds: f64,
    /// Shadow denials: requests the policy would have denied.
    pub would_be_denials: u64,
    /// Requests the policy was asked in shadow mode.
    pub requests: u64,
    /// Distinct keys that would have been denied.
    pub distinct_keys: u64,
    pub distinct_keys_exact: bool,
    /// The ten keys with most would-be denials.
    pub top: Vec<ShareKey>,
    /// For the top 1, 3 and 10 keys.
    pub by_top: Vec<TopK>,
}

#[derive(Debug, Serialize)]
pub struct ShareKey {
    pub key: String,
    pub would_be_denials: u64,
    /// Of the window's would-be denials.
    pub share: f64,
    pub max_error: u64,
}

/// What the top `k` keys did, and the limit under which only they are denied.
#[derive(Debug, Serialize)]
pub struct TopK {
    pub k: usize,
    /// Their share of the window's would-be denials.
    pub share: f64,
    /// The smallest limit per `period_seconds` that only they exceed, on average over the
    /// window; `null` when fewer than `k + 1` keys made requests (or for concurrency).
    pub suggested_limit: Option<u64>,
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

pub(super) fn top(policy: &str, rings: &Rings, now: Nanos, window: Window, n: usize) -> TopView {
    let minute = now / MINUTE;
    let merged = merge(&rings.denials, minute, window.back());
    let top = ranked(&merged, |c| c.denied + c.shadow_denied)
        .into_iter()
        .take(n)
        .map(|(key, c)| KeyCount {
            key: key.to_string(),
            denied: c.denied,
            shadow_denied: c.shadow_denied,
            allowed: c.allowed,
            max_error: merged.max_error(&c),
        })
        .collect();
    TopView {
        policy: policy.to_string(),
        window: window.name(),
        span_seconds: seconds(span(rings, now, window.back())),
        denied: merged.denied,
        shadow_denied: merged.shadow_denied,
        distinct_keys: merged.distinct,
        distinct_keys_exact: merged.distinct_exact,
        max_error: merged.bound(),
        top,
    }
}

pub(super) fn shadow(policy: &Described, rings: &Rings, now: Nanos) -> ShadowPolicy {
    let window = |w: Window| shadow_window(policy, rings, now, w.back());
    ShadowPolicy {
        policy: policy.name.to_string(),
        limit: policy.limit,
        period_seconds: policy.period.as_secs_f64(),
        windows: ShadowWindows {
            one_minute: window(Window::OneMinute),
            fifteen_minutes: window(Window::FifteenMinutes),
        },
    }
}

fn shadow_window(policy: &Described, rings: &Rings, now: Nanos, back: u64) -> ShadowWindow {
    let minute = now / MINUTE;
    let denials = merge(&rings.denials, minute, back);
    let requests = merge(&rings.requests, minute, back);
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
    let rates: Vec<u64> = ranked(&requests, |c| c.requests)
        .iter()
        .map(|(_, c)| c.requests)
        .collect();
    let by_top = KS
        .iter()
        .map(|&k| TopK {
            k,
            share: share(deniers.iter().take(k).map(|(_, c)| c.shadow_denied).sum()),
            suggested_limit: suggest(&rates, k, span, policy.period.as_nanos()),
        })
        .collect();
    ShadowWindow {
        span_seconds: seconds(span),
        would_be_denials: total,
        requests: requests.total,
        distinct_keys: denials.distinct,
        distinct_keys_exact: denials.distinct_exact,
        top: deniers
            .iter()
            .take(10)
            .map(|(key, c)| ShareKey {
                key: key.to_string(),
                would_be_denials: c.shadow_denied,
                share: share(c.shadow_denied),
                max_error: denials.max_error(c),
            })
            .collect(),
        by_top,
    }
}

/// The smallest limit per `period` that only the `k` busiest keys exceed: the next key's
/// requests over `span` as a rate per `period`, rounded up (`rates`: most first).
pub(super) fn suggest(rates: &[u64], k: usize, span: Nanos, period: u128) -> Option<u64> {
    let next = *rates.get(k)?;
    if period == 0 || span == 0 {
        return None;
    }
    let limit = (u128::from(next) * period).div_ceil(u128::from(span));
    Some(u64::try_from(limit).unwrap_or(u64::MAX).max(1))
}
