//! `GET /activity`: per route and policy, the allowed, denied and shadow-denied requests per
//! second over the last 15 minutes, in 10-second buckets, oldest first.
//!
//! The request path already counts every decision (`tollgate_decisions_total`); a sampler
//! reads those counters every [`INTERVAL`] ([`Sampler::tick`]) and keeps the last
//! [`BUCKETS`] + 1 readings in a ring, and a bucket is the difference of two readings. So
//! the page costs the request path nothing: no second count, no lock, no clock read. The
//! sampler's tick comes from its caller (a tokio interval in `server`, a test by hand), so a
//! test decides what lands in which bucket without sleeping.
//!
//! Readings are matched by route and policy name: a reload keeps the counters of a pair it
//! keeps, so its series goes on; a pair the previous reading lacks (new with a reload)
//! counts from what its counters held when that config was built, and a pair the running
//! config no longer has is not shown.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::limit::LimiterHandle;
use crate::limit::limiter::DecisionTotals;
use crate::limit::metrics::OutcomeTotals;
use crate::shutdown::Shutdown;

/// How often the counters are read: one bucket.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Buckets kept: 15 minutes of [`INTERVAL`]s.
pub const BUCKETS: usize = 90;

/// One reading by (route, policy): the counts, and where a pair new with its config starts.
type Reading<'a> = HashMap<(&'a str, &'a str), (OutcomeTotals, OutcomeTotals)>;

/// The readings of the last 15 minutes.
#[derive(Default)]
pub struct ActivityLog {
    /// Oldest first; at most [`BUCKETS`] + 1 (a bucket needs the reading before it).
    ring: Mutex<VecDeque<Vec<DecisionTotals>>>,
}

impl ActivityLog {
    /// Keep one reading, dropping the oldest past the ring's size.
    pub fn record(&self, reading: Vec<DecisionTotals>) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.push_back(reading);
        while ring.len() > BUCKETS + 1 {
            ring.pop_front();
        }
    }

    /// The `/activity` body: one series per pair of the latest reading, every series as
    /// long as the ring has buckets (zeros before a pair existed).
    pub fn render(&self) -> Value {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let by_pair: Vec<Reading> = ring
            .iter()
            .map(|r| {
                r.iter()
                    .map(|d| ((&*d.route, &*d.policy), (d.totals, d.before)))
                    .collect()
            })
            .collect();
        let series: Vec<Value> = ring
            .back()
            .map(|latest| latest.iter().map(|d| series(d, &by_pair)).collect())
            .unwrap_or_default();
        json!({ "interval_seconds": INTERVAL.as_secs(), "series": series })
    }
}

/// One pair's rates, bucket by bucket.
fn series(d: &DecisionTotals, readings: &[Reading]) -> Value {
    let pair = (&*d.route, &*d.policy);
    let deltas: Vec<OutcomeTotals> = readings
        .windows(2)
        .map(|w| match (w[0].get(&pair), w[1].get(&pair)) {
            (Some((a, _)), Some((b, _))) => since(b, a),
            (None, Some((b, before))) => since(b, before),
            _ => OutcomeTotals::default(),
        })
        .collect();
    let rates = |f: fn(&OutcomeTotals) -> u64| -> Vec<f64> {
        let secs = INTERVAL.as_secs_f64();
        deltas.iter().map(|t| f(t) as f64 / secs).collect()
    };
    json!({
        "route": &*d.route,
        "policy": &*d.policy,
        "mode": if d.shadow { "shadow" } else { "enforce" },
        "allowed": rates(|t| t.allow),
        "denied": rates(|t| t.deny),
        "shadow_denied": rates(|t| t.shadow_deny),
    })
}

/// What was counted from `a` to `b`.
fn since(b: &OutcomeTotals, a: &OutcomeTotals) -> OutcomeTotals {
    OutcomeTotals {
        allow: b.allow.saturating_sub(a.allow),
        deny: b.deny.saturating_sub(a.deny),
        shadow_deny: b.shadow_deny.saturating_sub(a.shadow_deny),
    }
}

/// Reads the running limiter's counters into the log.
#[derive(Clone)]
pub struct Sampler {
    pub log: Arc<ActivityLog>,
    limiter: Arc<LimiterHandle>,
}

impl Sampler {
    pub fn new(log: Arc<ActivityLog>, limiter: Arc<LimiterHandle>) -> Sampler {
        Sampler { log, limiter }
    }

    /// Take one reading now (of whichever limiter runs: a reload swaps it).
    pub fn tick(&self) {
        self.log.record(self.limiter.load().decision_totals());
    }

    /// A reading at once (the first bucket's start), then one every [`INTERVAL`] until
    /// shutdown. A late tick is not made up for with a burst: one reading per interval.
    pub async fn run(self, mut shutdown: Shutdown) {
        let mut every = tokio::time::interval(INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => self.tick(),
                () = shutdown.recv() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (route, policy, allowed, denied, shadow-denied), each pair's config built at zero.
    fn reading(pairs: &[(&str, &str, u64, u64, u64)]) -> Vec<DecisionTotals> {
        pairs
            .iter()
            .map(
                |&(route, policy, allow, deny, shadow_deny)| DecisionTotals {
                    route: route.into(),
                    policy: policy.into(),
                    shadow: false,
                    totals: OutcomeTotals {
                        allow,
                        deny,
                        shadow_deny,
                    },
                    before: OutcomeTotals::default(),
                },
            )
            .collect()
    }

    #[test]
    fn a_bucket_is_the_difference_of_two_readings_per_second() {
        let log = ActivityLog::default();
        assert_eq!(log.render()["series"], json!([]));
        log.record(reading(&[("api", "per_ip", 0, 0, 0)]));
        log.record(reading(&[("api", "per_ip", 100, 20, 0)]));
        log.record(reading(&[("api", "per_ip", 105, 20, 0)]));
        let v = log.render();
        assert_eq!(v["interval_seconds"], 10);
        let s = &v["series"][0];
        assert_eq!(
            (&s["route"], &s["policy"]),
            (&json!("api"), &json!("per_ip"))
        );
        assert_eq!(s["allowed"], json!([10.0, 0.5]));
        assert_eq!(s["denied"], json!([2.0, 0.0]));
        assert_eq!(s["shadow_denied"], json!([0.0, 0.0]));
    }

    #[test]
    fn pairs_are_matched_by_name_across_a_reload() {
        let log = ActivityLog::default();
        log.record(reading(&[("api", "a", 0, 0, 0), ("api", "gone", 5, 0, 0)]));
        log.record(reading(&[("api", "a", 10, 0, 0), ("api", "gone", 9, 0, 0)]));
        // The reload reorders, drops `gone`, adds `b` (its counter at 7 when the config
        // was built, 12 at its first reading).
        let mut third = reading(&[("api", "b", 0, 0, 12), ("api", "a", 30, 0, 0)]);
        third[0].before.shadow_deny = 7;
        log.record(third);
        log.record(reading(&[("api", "b", 0, 0, 22), ("api", "a", 30, 0, 0)]));
        let v = log.render();
        let names: Vec<&str> = (0..2)
            .map(|i| v["series"][i]["policy"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b", "a"], "{v:#}");
        assert_eq!(v["series"][1]["allowed"], json!([1.0, 2.0, 0.0]));
        assert_eq!(v["series"][0]["shadow_denied"], json!([0.0, 0.5, 1.0]));
        assert_eq!(v["series"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_ring_keeps_fifteen_minutes() {
        let log = ActivityLog::default();
        for i in 0..200u64 {
            log.record(reading(&[("api", "p", i * 10, 0, 0)]));
        }
        let v = log.render();
        let allowed = v["series"][0]["allowed"].as_array().unwrap();
        assert_eq!(allowed.len(), BUCKETS);
        assert!(allowed.iter().all(|r| r == 1.0), "{allowed:?}");
    }
}
