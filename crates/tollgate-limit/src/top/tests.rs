//! The top-keys summaries on a manual clock: heavy keys listed with exact counts under key
//! churn, the Space-Saving bounds, window expiry, bounded size, and the suggestion.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use super::peaks::suggest;
use super::table::{Event, Table};
use super::{CAPACITY, Seed, TopKeys, Window};
use crate::clock::ManualClock;
use crate::metrics::PolicyOutcome;
use crate::policy::PolicyRuntime;
use crate::spec::{AlgorithmName, KeyPart, Mode, Policy, Site};

/// Two policies as a config gives them: `p` (60 per minute) and `q`, `p` run in shadow.
fn summaries(clock: &ManualClock) -> TopKeys {
    TopKeys::new(Seed::new(Arc::new(clock.clone())), &policies(), |i| i == 0)
}

fn policies() -> Vec<PolicyRuntime> {
    runtimes(&[
        gcra("p", 60, Duration::from_secs(60)),
        gcra("q", 5, Duration::from_secs(1)),
    ])
}

/// A GCRA policy keyed on `ip`, burst = limit.
pub(super) fn gcra(name: &str, limit: u32, period: Duration) -> Policy {
    Policy {
        name: name.into(),
        key: vec![KeyPart::Ip],
        algorithm: AlgorithmName::Gcra,
        limit: NonZeroU32::new(limit).unwrap(),
        period,
        burst: NonZeroU32::new(limit).unwrap(),
        cost: NonZeroU32::MIN,
        max_delay: Duration::ZERO,
        mode: None,
        max_keys: NonZeroUsize::new(1_000_000).unwrap(),
        site: Site::Local,
        local_first: false,
        lease: Default::default(),
        spend: Default::default(),
        on_missing_key: None,
        show_values: Vec::new(),
    }
}

pub(super) fn runtimes(policies: &[Policy]) -> Vec<PolicyRuntime> {
    policies
        .iter()
        .enumerate()
        .map(|(i, p)| PolicyRuntime::new(i, p, &[]).unwrap())
        .collect()
}

/// xorshift64: the same churn every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Denials of policy 0: 5 %, 2 % and 1.2 % from three heavy keys, interleaved, and the
/// rest each from a key never seen before; `n` denials a minute for `minutes` minutes.
fn heavy_and_churn(top: &TopKeys, clock: &ManualClock, n: u64, minutes: u64) -> [u64; 3] {
    let mut heavy = [0u64; 3];
    let mut fresh = 0u64;
    for _ in 0..minutes {
        for i in 0..n {
            let which = if i % 20 == 0 {
                Some(0)
            } else if i % 50 == 1 {
                Some(1)
            } else if i % 83 == 2 {
                Some(2)
            } else {
                None
            };
            let key = match which {
                Some(h) => {
                    heavy[h] += 1;
                    format!("p:ip:10.0.0.{h}")
                }
                None => {
                    fresh += 1;
                    format!("p:ip:churn-{fresh}")
                }
            };
            top.record(0, &key, None, PolicyOutcome::Deny, Mode::Enforce);
        }
        clock.advance(Duration::from_secs(60));
    }
    heavy
}

#[test]
fn keys_above_one_percent_are_listed_in_order_with_exact_counts_under_churn() {
    let clock = ManualClock::new();
    let top = summaries(&clock);
    let heavy = heavy_and_churn(&top, &clock, 10_000, 3);
    let view = top.top("p", Window::FifteenMinutes, 5, None).unwrap();
    assert_eq!(view.denied, 30_000);
    for (h, want) in heavy.iter().enumerate() {
        let got = &view.top[h];
        assert_eq!(got.key, format!("p:ip:10.0.0.{h}"), "{view:?}");
        assert_eq!((got.denied, got.max_error), (*want, 0), "{got:?}");
    }
    // Churn keys each denied once: every one listed after the heavy keys has 1 at most
    // (plus its bound), and the window's bound is within total / capacity.
    assert!(view.max_error <= view.denied / CAPACITY as u64, "{view:?}");
    assert!(!view.distinct_keys_exact);
    let distinct = 3 + 30_000 - heavy.iter().sum::<u64>();
    let err = view.distinct_keys.abs_diff(distinct) as f64 / distinct as f64;
    assert!(err < 0.1, "{} for {distinct}", view.distinct_keys);
}

/// The Space-Saving invariants on a skewed stream: each key's true count lies within
/// `[own, own + error]`, every error is at most total / capacity, and every key above that
/// share is tracked.
#[test]
fn space_saving_bounds_hold_on_a_skewed_stream() {
    let mut table = Table::new(64);
    let mut truth = std::collections::HashMap::<String, u64>::new();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..50_000 {
        // Zipf-like: key i with probability about 1 / (i + 1).
        let r = rng.next() % 4096 + 1;
        let key = format!("k{}", 4096 / r);
        *truth.entry(key.clone()).or_default() += 1;
        table.count(&key, None, hash(&key), Event::Denied);
    }
    assert_eq!(table.len(), 64);
    let bound = table.total / 64;
    for e in table.entries() {
        let t = truth[&*e.key];
        assert!(e.denied <= t && t <= e.denied + e.error, "{e:?} true {t}");
        assert!(e.error <= bound);
    }
    for (k, &t) in &truth {
        if t > bound {
            assert!(table.entries().iter().any(|e| *e.key == **k), "{k} ({t})");
        }
    }
}

/// One hasher for the whole test (each `DefaultHashBuilder` has its own seed).
fn hash(key: &str) -> u64 {
    use std::hash::BuildHasher;
    static HASHER: std::sync::LazyLock<hashbrown::DefaultHashBuilder> =
        std::sync::LazyLock::new(Default::default);
    HASHER.hash_one(key)
}

#[test]
fn a_table_stays_at_capacity_under_key_churn() {
    let mut table = Table::new(CAPACITY);
    for i in 0..20 * CAPACITY {
        let key = format!("p:ip:fresh-{i}");
        table.count(&key, None, hash(&key), Event::ShadowDenied);
        assert!(table.len() <= CAPACITY);
    }
    assert_eq!(table.len(), CAPACITY);
    // And a policy's whole ring over twenty minutes of churn (both rings: shadow asks).
    let clock = ManualClock::new();
    let top = summaries(&clock);
    for minute in 0..20 {
        for i in 0..2 * CAPACITY {
            let key = format!("p:ip:{minute}-{i}");
            top.record(0, &key, None, PolicyOutcome::ShadowDeny, Mode::Shadow);
        }
        clock.advance(Duration::from_secs(60));
    }
    assert_eq!(top.keys_held("p").unwrap(), 2 * 16 * CAPACITY);
}

#[test]
fn windows_expire_as_the_clock_moves() {
    let clock = ManualClock::new();
    let top = summaries(&clock);
    for _ in 0..3 {
        top.record(1, "q:ip:a", None, PolicyOutcome::Deny, Mode::Enforce);
    }
    let denied = |w| {
        let v = top.top("q", w, 10, None).unwrap();
        v.top.first().map_or(0, |k| k.denied)
    };
    assert_eq!(
        (denied(Window::OneMinute), denied(Window::FifteenMinutes)),
        (3, 3)
    );
    clock.advance(Duration::from_secs(119));
    assert_eq!(
        denied(Window::OneMinute),
        3,
        "the previous minute is still in"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        (denied(Window::OneMinute), denied(Window::FifteenMinutes)),
        (0, 3)
    );
    clock.set(15 * 60_000_000_000 + 59_000_000_000);
    assert_eq!(denied(Window::FifteenMinutes), 3);
    clock.set(16 * 60_000_000_000);
    assert_eq!(denied(Window::FifteenMinutes), 0);
    // A minute's slot reused sixteen minutes on holds only the new minute.
    top.record(1, "q:ip:b", None, PolicyOutcome::Deny, Mode::Enforce);
    let v = top.top("q", Window::FifteenMinutes, 10, None).unwrap();
    assert_eq!((v.denied, v.top.len(), &*v.top[0].key), (1, 1, "q:ip:b"));
}

#[test]
fn allowed_requests_count_only_for_keys_denied_this_minute() {
    let clock = ManualClock::new();
    let top = summaries(&clock);
    top.record(1, "q:ip:a", None, PolicyOutcome::Allow, Mode::Enforce);
    top.record(1, "q:ip:a", None, PolicyOutcome::Deny, Mode::Enforce);
    top.record(1, "q:ip:a", None, PolicyOutcome::Allow, Mode::Enforce);
    top.record(1, "q:ip:b", None, PolicyOutcome::Allow, Mode::Enforce);
    clock.advance(Duration::from_secs(60));
    top.record(1, "q:ip:a", None, PolicyOutcome::Allow, Mode::Enforce);
    let v = top.top("q", Window::OneMinute, 10, None).unwrap();
    assert_eq!(v.top.len(), 1);
    assert_eq!((v.top[0].denied, v.top[0].allowed), (1, 1));
    assert!(matches!(
        top.top("nope", Window::OneMinute, 1, None),
        Err(super::TopError::NoPolicy(p)) if p == "nope"
    ));
}

#[test]
fn shadow_lists_shadow_policies_with_shares_and_suggestions() {
    let clock = ManualClock::new();
    clock.set(60_000_000_000);
    let top = summaries(&clock);
    // Three keys: 30, 15 and 8 requests in the minute; 60/min would deny none of them,
    // so mark the first 25, 10 and 3 as would-be denials by hand.
    for (key, requests, denied) in [("p:ip:a", 30, 25), ("p:ip:b", 15, 10), ("p:ip:c", 8, 3)] {
        for i in 0..requests {
            let outcome = if i < denied {
                PolicyOutcome::ShadowDeny
            } else {
                PolicyOutcome::Allow
            };
            top.record(0, key, None, outcome, Mode::Shadow);
        }
    }
    clock.advance(Duration::from_secs(30));
    let view = top.shadow(&|_| None);
    assert_eq!(view.policies.len(), 1, "q is not run in shadow");
    let p = &view.policies[0];
    let w = &p.windows.one_minute;
    assert_eq!(
        (w.would_be_denials, w.requests, w.distinct_keys),
        (38, 53, 3)
    );
    assert_eq!(w.span_seconds, 30.0, "counting began at 60 s");
    let keys: Vec<(&str, u64)> = w
        .top
        .iter()
        .map(|k| (&*k.key, k.would_be_denials))
        .collect();
    assert_eq!(keys, [("p:ip:a", 25), ("p:ip:b", 10), ("p:ip:c", 3)]);
    // 30 s seen, shorter than the period: each key's peak is all it sent. b made 15, so
    // 15 a minute refuses a alone; there is no fourth key for the top 3.
    let limits: Vec<Option<u64>> = w.by_top.iter().map(|t| t.suggested_limit).collect();
    assert_eq!(limits, [Some(15), None, None]);
    assert_eq!(w.by_top[0].refused_keys, Some(1));
    assert_eq!(
        (w.peak_window_seconds, w.peak_windows_aligned),
        (Some(30.0), false)
    );
    assert!((w.by_top[0].share - 25.0 / 38.0).abs() < 1e-9);
}

#[test]
fn the_suggestion_is_the_next_keys_peak() {
    assert_eq!(suggest(&[100, 40, 7], 1), Some((40, 1)));
    assert_eq!(suggest(&[100, 40, 7], 2), Some((7, 2)));
    assert_eq!(suggest(&[100, 40, 40, 7], 1), Some((40, 1)));
    assert_eq!(
        suggest(&[40, 40, 7], 1),
        Some((40, 0)),
        "a tie refuses neither"
    );
    assert_eq!(suggest(&[100, 40, 7], 3), None);
}

#[test]
fn a_reload_keeps_each_kept_policys_summary() {
    let clock = ManualClock::new();
    let top = summaries(&clock);
    top.record(1, "q:ip:a", None, PolicyOutcome::Deny, Mode::Enforce);
    let gone = TopKeys::new(top.seed(), &[], |_| false);
    assert!(gone.top("q", Window::OneMinute, 1, None).is_err());
    let again = TopKeys::new(top.seed(), &policies(), |_| false);
    assert_eq!(
        again.top("q", Window::OneMinute, 1, None).unwrap().denied,
        1
    );
}
