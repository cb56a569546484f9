//! The suggested limits and the counts of every decision, on a manual clock: the
//! operator's trial counted by hand (4 usernames, 30 / 3 / 1 / 1 requests in 2 s, 5 per
//! 15 minutes: 3 refuses alice alone), a one-minute limit (300 / 60 / 6 / 2 requests in a
//! minute: 60), peaks of whole minutes and of sub-minute slices, keys seen and allowed, and
//! a value looked up.

use std::sync::Arc;
use std::time::Duration;

use super::tests::{gcra, runtimes};
use super::{Seed, ShadowWindow, TopKeys, Window};
use crate::clock::ManualClock;
use crate::metrics::PolicyOutcome;
use crate::spec::Mode;

const SECOND: u64 = 1_000_000_000;

/// One shadow policy `p` of `limit` per `period`.
fn shadow_policy(clock: &ManualClock, limit: u32, period: Duration) -> TopKeys {
    let policies = runtimes(&[gcra("p", limit, period)]);
    TopKeys::new(Seed::new(Arc::new(clock.clone())), &policies, |_| true)
}

/// `sends` requests of `key`, the first `burst` allowed and the rest shadow denied (what
/// a fresh GCRA key of that burst does within a short time).
fn shadow_requests(top: &TopKeys, key: &str, burst: usize, sends: usize) {
    for i in 0..sends {
        let outcome = match i < burst {
            true => PolicyOutcome::Allow,
            false => PolicyOutcome::ShadowDeny,
        };
        top.record(0, key, None, outcome, Mode::Shadow);
    }
}

fn limits(w: &ShadowWindow) -> Vec<(Option<u64>, Option<usize>)> {
    w.by_top
        .iter()
        .map(|t| (t.suggested_limit, t.refused_keys))
        .collect()
}

/// The trial: within 2 s, alice 30, bob 3, carol and dave 1 each, against 5 per 15
/// minutes. By hand: any limit from 3 to 29 refuses alice alone, 3 the smallest; 1
/// refuses alice and bob (carol and dave tie at 1); there is no eleventh key.
fn the_trial(top: &TopKeys, clock: &ManualClock) {
    let sends = [
        ("login:f:alice", 30),
        ("login:f:bob", 3),
        ("login:f:carol", 1),
        ("login:f:dave", 1),
    ];
    let total: u64 = sends.iter().map(|s| s.1 as u64).sum();
    let step = 2 * SECOND / total;
    for (key, n) in sends {
        // GCRA with burst 5 within 2 s: the first 5 pass, the rest would be denied.
        for i in 0..n {
            let outcome = match i < 5 {
                true => PolicyOutcome::Allow,
                false => PolicyOutcome::ShadowDeny,
            };
            top.record(0, key, None, outcome, Mode::Shadow);
            clock.advance(Duration::from_nanos(step));
        }
    }
}

fn check_trial(w: &ShadowWindow) {
    assert_eq!(
        limits(w),
        [(Some(3), Some(1)), (Some(1), Some(2)), (None, None)]
    );
    assert_eq!((w.would_be_denials, w.requests, w.allowed), (25, 35, 10));
    assert_eq!((w.keys_seen, w.keys_seen_exact), (4, true));
    assert_eq!((w.keys_denied, w.distinct_keys), (1, 1));
    let alice = &w.top[0];
    assert_eq!(
        (
            &*alice.key,
            alice.would_be_denials,
            alice.requests,
            alice.peak
        ),
        ("login:f:alice", 25, 30, Some(30))
    );
}

#[test]
fn the_trial_suggests_three_for_five_per_fifteen_minutes() {
    let clock = ManualClock::new();
    clock.set(600 * SECOND);
    let top = shadow_policy(&clock, 5, Duration::from_secs(900));
    the_trial(&top, &clock);
    let view = top.shadow(&|_| None);
    let p = &view.policies[0];
    for w in [&p.windows.one_minute, &p.windows.fifteen_minutes] {
        check_trial(w);
        // Counting began 2 s ago: all of it fits in one period, so a peak is all a key sent.
        assert!((w.seen_seconds - 2.0).abs() < 0.01, "{}", w.seen_seconds);
        assert_eq!(w.peak_window_seconds, Some(w.seen_seconds));
        assert!(!w.peak_windows_aligned);
    }
    assert!(
        p.suggestion_means.contains("burst"),
        "{}",
        p.suggestion_means
    );
}

/// The same trial an hour after the gateway started: the 15-minute window has seen more
/// than one period, so peaks are counted in runs of 15 whole minutes — the same numbers.
#[test]
fn the_trial_an_hour_on_suggests_the_same() {
    let clock = ManualClock::new();
    let top = shadow_policy(&clock, 5, Duration::from_secs(900));
    clock.set(3630 * SECOND);
    the_trial(&top, &clock);
    let view = top.shadow(&|_| None);
    let w = &view.policies[0].windows.fifteen_minutes;
    check_trial(w);
    assert!(w.seen_seconds > 900.0, "{}", w.seen_seconds);
    assert_eq!(
        (w.peak_window_seconds, w.peak_windows_aligned),
        (Some(900.0), true)
    );
}

/// A search limit of one minute: over one minute, a 300 requests, b 60, c 6, d 2, spread
/// evenly. The smallest limit refusing a alone is b's 60; both when the time seen is that
/// minute and when it is longer (whole minutes).
#[test]
fn a_one_minute_limit_over_a_minute_suggests_sixty() {
    let clock = ManualClock::new();
    let top = shadow_policy(&clock, 100, Duration::from_secs(60));
    let mut sent = [0usize; 4];
    for s in 0..60u64 {
        for (i, (key, per_second, every)) in [("a", 5, 1), ("b", 1, 1), ("c", 1, 10), ("d", 1, 30)]
            .into_iter()
            .enumerate()
        {
            if s % every == 0 {
                for _ in 0..per_second {
                    let outcome = match sent[i] < 100 {
                        true => PolicyOutcome::Allow,
                        false => PolicyOutcome::ShadowDeny,
                    };
                    top.record(0, key, None, outcome, Mode::Shadow);
                    sent[i] += 1;
                }
            }
        }
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(sent, [300, 60, 6, 2]);
    let view = top.shadow(&|_| None);
    let w = &view.policies[0].windows.one_minute;
    assert_eq!(w.seen_seconds, 60.0);
    assert_eq!(
        limits(w),
        [(Some(60), Some(1)), (Some(2), Some(3)), (None, None)]
    );
    clock.advance(Duration::from_secs(30));
    let view = top.shadow(&|_| None);
    for w in [
        &view.policies[0].windows.one_minute,
        &view.policies[0].windows.fifteen_minutes,
    ] {
        assert_eq!(w.seen_seconds, 90.0);
        assert_eq!(
            (w.peak_window_seconds, w.peak_windows_aligned),
            (Some(60.0), true)
        );
        assert_eq!(limits(w)[0], (Some(60), Some(1)));
    }
}

/// Seen longer than the period: a key's peak is its busiest run of `period` whole minutes,
/// never its total or its average.
#[test]
fn longer_than_the_period_a_peak_is_the_busiest_run_of_whole_minutes() {
    for (period, want) in [(60, 30), (120, 60)] {
        let clock = ManualClock::new();
        let top = shadow_policy(&clock, 1000, Duration::from_secs(period));
        for (a, b) in [(10, 30), (50, 30), (20, 30)] {
            shadow_requests(&top, "a", a, a);
            shadow_requests(&top, "b", b, b);
            clock.advance(Duration::from_secs(60));
        }
        clock.advance(Duration::from_secs(30));
        let view = top.shadow(&|_| None);
        let w = &view.policies[0].windows.fifteen_minutes;
        // a: 50 in one minute, 70 in two; b: 30 and 60.
        assert_eq!(limits(w)[0], (Some(want), Some(1)), "period {period}");
        assert_eq!(w.top.len(), 0, "nothing would be denied");
    }
}

/// A period shorter than a minute: peaks are counted in slices of the period.
#[test]
fn a_period_under_a_minute_counts_peaks_in_its_slices() {
    let clock = ManualClock::new();
    let top = shadow_policy(&clock, 10, Duration::from_secs(1));
    for s in 0..30u64 {
        let a = match s {
            5 => 8,
            6 => 3,
            _ => 0,
        };
        shadow_requests(&top, "a", a, a);
        shadow_requests(&top, "b", 1, 1);
        clock.advance(Duration::from_secs(1));
    }
    let view = top.shadow(&|_| None);
    let w = &view.policies[0].windows.one_minute;
    assert_eq!(
        (w.peak_window_seconds, w.peak_windows_aligned),
        (Some(1.0), true)
    );
    assert_eq!(limits(w)[0], (Some(1), Some(1)), "b's peak is 1, a's 8");
    assert_eq!(w.requests, 41);
}

/// An enforcing policy: every allowed request and every key counts, not only those of
/// keys once denied; the per-key `allowed` still starts at the key's first denial.
#[test]
fn every_allowed_request_and_key_seen_is_counted() {
    let clock = ManualClock::new();
    let policies = runtimes(&[gcra("q", 3, Duration::from_secs(60))]);
    let top = TopKeys::new(Seed::new(Arc::new(clock.clone())), &policies, |_| false);
    for outcome in [
        PolicyOutcome::Allow,
        PolicyOutcome::Allow,
        PolicyOutcome::Allow,
        PolicyOutcome::Deny,
        PolicyOutcome::Deny,
        PolicyOutcome::Allow,
    ] {
        top.record(0, "q:ip:a", None, outcome, Mode::Enforce);
    }
    for key in ["q:ip:b", "q:ip:c", "q:ip:d"] {
        top.record(0, key, None, PolicyOutcome::Allow, Mode::Enforce);
    }
    let v = top.top("q", Window::OneMinute, 10, None).unwrap();
    assert_eq!((v.allowed, v.denied), (7, 2));
    assert_eq!(
        (
            v.keys_seen,
            v.keys_seen_exact,
            v.keys_denied,
            v.distinct_keys
        ),
        (4, true, 1, 1)
    );
    assert_eq!((v.top.len(), v.top[0].allowed), (1, 1));
    // Past 64 keys in a minute, keys seen is an estimate.
    for i in 0..200 {
        top.record(
            0,
            &format!("q:ip:10.1.0.{i}"),
            None,
            PolicyOutcome::Allow,
            Mode::Enforce,
        );
    }
    let v = top.top("q", Window::FifteenMinutes, 10, None).unwrap();
    assert_eq!(v.allowed, 207);
    assert!(!v.keys_seen_exact);
    assert!(v.keys_seen.abs_diff(204) < 20, "{}", v.keys_seen);
    // A minute on, the 1m window still holds them; two minutes on, nothing.
    clock.advance(Duration::from_secs(120));
    let v = top.top("q", Window::OneMinute, 10, None).unwrap();
    assert_eq!((v.allowed, v.keys_seen, v.keys_seen_exact), (0, 0, true));
}

/// A looked-up value lists only its keys, and in the shadow view also a key it would not
/// have denied.
#[test]
fn a_lookup_lists_only_the_keys_it_matches() {
    let clock = ManualClock::new();
    clock.set(SECOND);
    let top = shadow_policy(&clock, 5, Duration::from_secs(900));
    the_trial(&top, &clock);
    let bob = |k: &str| k.ends_with(":bob");
    let v = top.top("p", Window::OneMinute, 10, Some(&bob)).unwrap();
    assert_eq!(v.top.len(), 0, "bob was never denied: /top lists denials");
    let view = top.shadow(&|_| Some(Box::new(bob)));
    let w = &view.policies[0].windows.one_minute;
    let listed: Vec<(&str, u64, u64)> = w
        .top
        .iter()
        .map(|k| (&*k.key, k.would_be_denials, k.requests))
        .collect();
    assert_eq!(listed, [("login:f:bob", 0, 3)]);
    let alice = |k: &str| k.ends_with(":alice");
    let v = top.top("p", Window::OneMinute, 10, Some(&alice)).unwrap();
    assert_eq!((v.top.len(), v.top[0].shadow_denied), (1, 25));
}

/// A key recorded without a label (before `show_values`), then with one a minute later, is
/// one key: its counts add up across the minutes, every view prints the label, and a
/// look-up finds it by either form.
#[test]
fn a_label_names_the_stored_key_across_minutes() {
    let clock = ManualClock::new();
    let shows = |show_values: Vec<crate::spec::KeyPart>| {
        let mut p = gcra("p", 2, Duration::from_secs(3600));
        (p.key, p.show_values) = (vec![form()], show_values);
        let seed = Seed::new(Arc::new(clock.clone()));
        TopKeys::new(seed, &runtimes(&[p]), |_| true)
    };
    let top = shows(vec![form()]);
    let (stored, label) = ("p:f:8e33af", "p:f:alice");
    for _ in 0..3 {
        top.record(0, stored, None, PolicyOutcome::ShadowDeny, Mode::Shadow);
    }
    clock.advance(Duration::from_secs(60));
    top.record(
        0,
        stored,
        Some(label),
        PolicyOutcome::ShadowDeny,
        Mode::Shadow,
    );
    top.record(
        0,
        "p:f:0b0b",
        Some("p:f:bob"),
        PolicyOutcome::Allow,
        Mode::Shadow,
    );
    let v = top.top("p", Window::FifteenMinutes, 10, None).unwrap();
    let rows: Vec<(&str, u64)> = v.top.iter().map(|k| (&*k.key, k.shadow_denied)).collect();
    assert_eq!(rows, [(label, 4)]);
    assert_eq!((v.keys_seen, v.keys_denied), (2, 1));
    let w = &top.shadow(&|_| None).policies[0].windows.fifteen_minutes;
    assert_eq!((w.top[0].key.as_str(), w.top[0].requests), (label, 4));
    for needle in [":f:alice", ":f:8e33af"] {
        let l = |k: &str| super::holds(k, needle);
        let v = top.top("p", Window::FifteenMinutes, 10, Some(&l)).unwrap();
        assert_eq!(v.top.len(), 1, "{needle}");
    }
    // Turned off by a reload (the summary kept): hashes again, and the clear value is no
    // longer matched.
    let off = TopKeys::new(
        top.seed(),
        &runtimes(&[{
            let mut p = gcra("p", 2, Duration::from_secs(3600));
            p.key = vec![form()];
            p
        }]),
        |_| true,
    );
    let v = off.top("p", Window::FifteenMinutes, 10, None).unwrap();
    assert_eq!(v.top[0].key, stored);
    let l = |k: &str| super::holds(k, ":f:alice");
    let v = off.top("p", Window::FifteenMinutes, 10, Some(&l)).unwrap();
    assert!(v.top.is_empty());
}

/// `form:username`.
fn form() -> crate::spec::KeyPart {
    crate::spec::KeyPart::Form(crate::spec::BodyField {
        name: "username".into(),
        lowercase: false,
    })
}

/// A burst straddling the edge of the aligned windows: the aligned peak is half the truth,
/// and the upper bound is the truth. One-minute period, a 300, b 60, c 6, d 2 a minute
/// over t = 30–90 s (b's truth: 60, aligned 30 + 30); a 10-second period, 10 requests
/// over t = 5–15 s and over t = 55–65 s (across a minute's edge): 5 aligned, 10 at most.
#[test]
fn a_burst_across_aligned_windows_gets_a_range_that_holds_the_truth() {
    let clock = ManualClock::new();
    let top = shadow_policy(&clock, 100, Duration::from_secs(60));
    clock.advance(Duration::from_secs(30));
    for _ in 0..60 {
        for (key, per_second) in [("a", 5), ("b", 1)] {
            shadow_requests(&top, key, per_second, per_second);
        }
        clock.advance(Duration::from_secs(1));
    }
    clock.advance(Duration::from_secs(5));
    let w = &top.shadow(&|_| None).policies[0].windows.one_minute;
    assert_eq!(w.seen_seconds, 95.0);
    let t = &w.by_top[0];
    assert_eq!(
        (t.suggested_limit, t.suggested_limit_upper),
        (Some(30), Some(60))
    );
    let b = w.top.iter().find(|k| k.key == "b");
    assert!(b.is_none(), "nothing was shadow denied");

    for start in [5, 55] {
        let clock = ManualClock::new();
        let top = shadow_policy(&clock, 100, Duration::from_secs(10));
        clock.advance(Duration::from_secs(start));
        for _ in 0..10 {
            shadow_requests(&top, "a", 1, 1);
            shadow_requests(&top, "b", 1, 1);
            clock.advance(Duration::from_secs(1));
        }
        let w = &top.shadow(&|_| None).policies[0].windows.one_minute;
        let t = &w.by_top[0];
        assert_eq!(
            (t.suggested_limit, t.suggested_limit_upper),
            (Some(5), Some(10)),
            "from {start} s"
        );
    }
}
