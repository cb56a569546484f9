//! "Denied until t": when the central site denies a key with a wait of t, this node denies
//! that key locally until t without asking the store again, so attack traffic costs no round
//! trips. Safe because nothing can make a denied key admissible sooner than its own wait:
//! other nodes' spends only push it later. (Concurrency denials are not cached: their slots
//! free up at no predictable time.)
//!
//! When a denial runs out, the first request to see it asks the store and the others keep
//! being denied until that one call answers (or `probe` passes): without this, every
//! concurrent connection of an abusive client raced to the store at each expiry, 64 calls
//! where one suffices (benches/load.sh measured 0.116 calls per request). The store can
//! admit at most what refilled since the expiry, which that one call takes. A denial long
//! expired (beyond `probe` after its end) is just forgotten: the key may have refilled.
//!
//! Also "empty until t": when the store admits a gcra or token_bucket key and reports it
//! too empty for the next request of the same cost, the key is denied until the earliest
//! moment that request could conform ([`refill_wait`]): at moderate overload most store
//! calls were such admissions, each followed by a call the store denied with a tiny wait.
//! Safe for the same reason, and the moment errs early (the reply's rounding, and the clock
//! is read before the call): other nodes' spends only push it later. A refund (a request
//! denied after its central spend) moves a key back: this node forgets the keys it refunds,
//! when the refund starts and again when it has landed, and caches no answer to a call
//! sent before then (it may have been decided before the refund). A refund by another node
//! (a cluster reservation undone) can still leave a denial here up to its wait: that errs
//! toward denying, by at most one request's spend.
//!
//! Bounded: at most `capacity` keys; a full shard first drops expired entries, then its
//! oldest-by-hash half (a forgotten entry only costs one more store call). Expired entries
//! also go before the shard is full: a shard drops them once the keys it took in since it
//! last did pass a quarter of its size, so under a churn of denied keys it holds about the
//! live denials, not `capacity` stale ones (at a cost spread over the inserts).

use std::hash::BuildHasher;
use std::sync::Mutex;

use hashbrown::{DefaultHashBuilder, HashMap};

use super::clock::Nanos;

const SHARDS: usize = 16;

/// One remembered denial (or only a refund mark: `until` 0).
#[derive(Debug, Clone, Copy)]
struct Denial {
    /// Denied until then.
    until: Nanos,
    /// A request is asking the store since the denial ran out; others wait until this.
    probing_until: Nanos,
    /// When the key is full again as the store last reported it (for `RateLimit` headers).
    full_at: Nanos,
    /// When this node last started or finished refunding the key: a store answer to a call
    /// sent before then may predate the refund, so it is not cached.
    refunded_at: Nanos,
}

/// Slack for the store's reply: its times are rounded up to the microsecond and computed
/// in doubles (timestamps near 2^51 µs keep a quarter microsecond), and it admits 1 ns early.
const REPLY_SLACK: Nanos = 2_000;

/// After the store admitted a gcra or token_bucket key with `limit` per `period_ns`,
/// bursts of `burst` (all as sent, with headroom) and reported it full again in
/// `reset_after`: how long until the next request of `cost` can conform, `None` if it could
/// now. GCRA: admitted at `t'` iff `tat + c·T − t' ≤ burst·T`, and `reset_after = tat −
/// now`, so `t' ≥ now + reset_after − (burst − c)·T` (T = period / limit). Token bucket:
/// `reset_after = (burst − left)·T` and `t'` needs `left + (t' − now)/T ≥ c`: the same.
/// Errs early by [`REPLY_SLACK`] so that it never denies what the store would admit.
pub fn refill_wait(
    limit: f64,
    period_ns: f64,
    burst: f64,
    cost: f64,
    reset_after: Nanos,
) -> Option<Nanos> {
    if !(limit > 0.0 && period_ns > 0.0 && burst.is_finite() && cost.is_finite()) {
        return None;
    }
    let spare = ((burst - cost).max(0.0) * period_ns / limit).ceil();
    if !spare.is_finite() || spare >= u64::MAX as f64 {
        return None;
    }
    reset_after
        .checked_sub(spare as Nanos)?
        .checked_sub(REPLY_SLACK)
        .filter(|&w| w > 0)
}

/// One lock's entries, and the keys inserted since its expired entries were last dropped.
#[derive(Default)]
struct Shard {
    map: HashMap<String, Denial>,
    fresh: usize,
}

/// New keys a shard takes in beyond a quarter of its size before it drops expired entries.
const SWEEP_SLACK: usize = 8;

pub struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: DefaultHashBuilder,
    /// Entries per shard.
    per_shard: usize,
    /// How long one store call may take (the store timeout): the probe's window.
    probe: Nanos,
}

impl DenyCache {
    pub fn new(capacity: usize, probe: Nanos) -> Self {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: DefaultHashBuilder::default(),
            per_shard: (capacity / SHARDS).max(1),
            probe: probe.max(1),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nanoseconds left of a cached denial of `key`, if any, and until the key is full
    /// again. `None` means "ask the store"; right after a denial ran out only one caller
    /// gets `None` per probe window.
    pub fn denied_for(&self, key: &str, now: Nanos) -> Option<(Nanos, Nanos)> {
        let mut guard = self.shard(key);
        let shard = &mut guard.map;
        let d = shard.get_mut(key)?;
        if d.until == 0 {
            // Only a refund mark.
            if now.saturating_sub(d.refunded_at) >= self.probe {
                shard.remove(key);
            }
            return None;
        }
        let full = d.full_at.saturating_sub(now);
        if d.until > now {
            return Some((d.until - now, full.max(d.until - now)));
        }
        if d.probing_until > now {
            return Some((d.probing_until - now, full.max(d.probing_until - now)));
        }
        if now - d.until >= self.probe {
            shard.remove(key);
            return None;
        }
        d.probing_until = now.saturating_add(self.probe);
        None
    }

    /// The store admitted `key`: nothing to remember (but a recent refund mark stays).
    pub fn forget(&self, key: &str) {
        let mut guard = self.shard(key);
        let shard = &mut guard.map;
        if let Some(d) = shard.get_mut(key) {
            if d.refunded_at == 0 {
                shard.remove(key);
            } else {
                d.until = 0;
                d.probing_until = 0;
            }
        }
    }

    /// This node is refunding `key` (call it when the refund starts and when it ends): any
    /// denial remembered is forgotten, and store answers to calls sent before `now` are not
    /// cached (they may have been decided before the refund landed).
    pub fn refunding(&self, key: &str, now: Nanos) {
        self.insert(
            key,
            Denial {
                until: 0,
                probing_until: 0,
                full_at: 0,
                refunded_at: now,
            },
            now,
        );
    }

    /// Remember that `key` is denied until `until` (and full again at `full_at`), from a
    /// store call sent at `sent` — unless this node refunded the key since then.
    pub fn deny(&self, key: &str, until: Nanos, full_at: Nanos, now: Nanos, sent: Nanos) {
        let refunded_at = match self.shard(key).map.get(key) {
            Some(d) if d.refunded_at >= sent => return,
            Some(d) => d.refunded_at,
            None => 0,
        };
        let denial = Denial {
            until,
            probing_until: 0,
            full_at,
            refunded_at,
        };
        self.insert(key, denial, now);
    }

    fn insert(&self, key: &str, denial: Denial, now: Nanos) {
        let mut guard = self.shard(key);
        let Shard { map: shard, fresh } = &mut *guard;
        if !shard.contains_key(key) {
            let live = |d: &Denial| {
                d.until > now
                    || now.saturating_sub(d.until) < self.probe
                    || now.saturating_sub(d.refunded_at) < self.probe
            };
            if shard.len() >= self.per_shard {
                shard
                    .retain(|_, d| d.until > now || now.saturating_sub(d.refunded_at) < self.probe);
                *fresh = 0;
                if shard.len() >= self.per_shard {
                    let drop: Vec<String> =
                        shard.keys().take(shard.len() / 2 + 1).cloned().collect();
                    for k in drop {
                        shard.remove(&k);
                    }
                }
            } else if *fresh > shard.len() / 4 + SWEEP_SLACK {
                shard.retain(|_, d| live(d));
                *fresh = 0;
            }
            *fresh += 1;
        }
        shard.insert(key.to_owned(), denial);
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A churn of keys each denied for a moment holds about the live denials, not the
    /// capacity: 20 000 keys, each denied for 10 ns at its own instant, 10 ns apart, in a
    /// cache of 100 000 (issue 47: memory follows live keys).
    #[test]
    fn expired_denials_leave_before_the_cache_is_full() {
        let c = DenyCache::new(100_000, 10);
        for i in 0..20_000u64 {
            let now = i * 10;
            c.deny(&format!("k{i}"), now + 10, now + 10, now, now);
        }
        // Each shard sweeps at a quarter of its size plus 8 new keys: 16 shards hold
        // at most (8 + 2 live) × 4/3 each, about 13, and never all 20 000.
        assert!(c.len() <= 16 * 16, "{} entries held", c.len());
        // A live denial is never swept.
        c.deny("live", 1_000_000, 1_000_000, 200_000, 200_000);
        for i in 0..1_000u64 {
            let now = 200_000 + i * 10;
            c.deny(&format!("j{i}"), now + 10, now + 10, now, now);
        }
        assert!(c.denied_for("live", 210_000).is_some());
    }

    #[test]
    fn denies_until_then_lets_one_probe_through() {
        let c = DenyCache::new(1000, 10);
        c.deny("k", 100, 150, 0, 0);
        assert_eq!(c.denied_for("k", 40), Some((60, 110)));
        assert_eq!(
            c.denied_for("k", 100),
            None,
            "the first caller after expiry asks the store"
        );
        assert_eq!(
            c.denied_for("k", 101),
            Some((9, 49)),
            "the others wait for that answer"
        );
        c.forget("k");
        assert_eq!(c.denied_for("k", 102), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_refund_voids_answers_to_calls_sent_before_it() {
        let c = DenyCache::new(64, 10);
        c.deny("k", 100, 150, 0, 0);
        // The refund starts at 5: the denial is gone.
        c.refunding("k", 5);
        assert_eq!(c.denied_for("k", 6), None);
        // A denial from a call sent at 4 (before the refund) arrives at 7: not cached.
        c.deny("k", 100, 150, 7, 4);
        assert_eq!(c.denied_for("k", 8), None);
        // The refund lands at 9; a call sent at 8 may have been decided before it.
        c.refunding("k", 9);
        c.deny("k", 100, 150, 12, 8);
        assert_eq!(c.denied_for("k", 13), None);
        // A call sent after the refund landed is cached as usual.
        c.deny("k", 100, 150, 12, 10);
        assert_eq!(c.denied_for("k", 13), Some((87, 137)));
    }

    #[test]
    fn a_long_expired_denial_is_forgotten() {
        let c = DenyCache::new(1000, 10);
        c.deny("k", 100, 100, 0, 0);
        assert_eq!(c.denied_for("k", 200), None);
        assert_eq!(c.denied_for("k", 201), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn stays_bounded() {
        let c = DenyCache::new(160, 10);
        for i in 0..10_000 {
            c.deny(&format!("key{i}"), u64::MAX, u64::MAX, 0, 0);
        }
        assert!(c.len() <= 160, "{}", c.len());
    }

    /// `refill_wait` against the exact algorithms: after every admission that leaves the
    /// key too empty for the next request, the cache ends at most 3 µs before the earliest
    /// admitting moment, never after it (with `reset_after` rounded up to the microsecond,
    /// as the script replies).
    fn check_exact<A: crate::algorithm::Algorithm>(
        alg: &A,
        limit: u32,
        period: std::time::Duration,
        burst: u32,
        cost: u32,
    ) {
        let mut state = None;
        let mut now: Nanos = 1_000_000_007;
        let mut checked = 0;
        for step in 0..200u64 {
            let d = alg.decide(state, cost, now);
            if !d.verdict.admits() {
                let crate::algorithm::Verdict::Deny { retry_after } = d.verdict else {
                    unreachable!()
                };
                now += retry_after;
                continue;
            }
            state = Some(d.state);
            let reset_us = d.reset_after.div_ceil(1_000) * 1_000;
            let wait = refill_wait(
                f64::from(limit),
                period.as_nanos() as f64,
                f64::from(burst),
                f64::from(cost),
                reset_us,
            );
            let next = alg.decide(state, cost, now);
            match next.verdict {
                crate::algorithm::Verdict::Deny { retry_after } => {
                    let wait = wait.unwrap_or(0);
                    assert!(wait <= retry_after, "{wait} > {retry_after} at step {step}");
                    assert!(retry_after - wait <= 3_000, "{wait} vs {retry_after}");
                    assert!(
                        alg.decide(state, cost, now + retry_after).verdict.admits(),
                        "retry_after is the earliest admitting moment"
                    );
                    checked += 1;
                }
                _ => assert_eq!(wait, None, "admissible now, step {step}"),
            }
            // Arrive at odd moments: sometimes at once, sometimes a little later.
            now += (step % 3) * 7_777_777;
        }
        assert!(checked > 50, "{checked}");
    }

    #[test]
    fn refill_wait_is_exact_for_gcra_and_token_bucket() {
        use crate::algorithm::{Gcra, TokenBucket};
        use std::num::NonZeroU32;
        use std::time::Duration;
        let nz = |n: u32| NonZeroU32::new(n).expect("non-zero");
        for (limit, period, burst, cost) in [
            (10, Duration::from_secs(1), 1, 1),
            (10, Duration::from_secs(1), 5, 1),
            (7, Duration::from_secs(3), 9, 2),
            (3, Duration::from_millis(1_000), 4, 3),
            (1000, Duration::from_secs(60), 50, 7),
        ] {
            let g = Gcra::new(nz(limit), period, nz(burst)).expect("valid");
            check_exact(&g, limit, period, burst, cost);
            let t = TokenBucket::new(nz(limit), period, nz(burst)).expect("valid");
            check_exact(&t, limit, period, burst, cost);
        }
    }

    #[test]
    fn refill_wait_is_none_when_it_could_conform_now() {
        // 10/s, burst 5, cost 1: full again in 400 ms means 1 cell left.
        assert_eq!(refill_wait(10.0, 1e9, 5.0, 1.0, 400_000_000), None);
        assert_eq!(
            refill_wait(10.0, 1e9, 5.0, 1.0, 500_000_000),
            Some(100_000_000 - REPLY_SLACK)
        );
    }
}
