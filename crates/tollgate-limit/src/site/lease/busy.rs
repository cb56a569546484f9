//! A leased key's grant rate: the cells the coordinator granted to all nodes lately, per
//! mille of what the key's limit allows in that time, read two ways from one average.
//!
//! - **As seen** ([`busy`], reported as `Grant::busy`): the granted cells over the time the
//!   average has lived, at least [`FIRST_WINDOW_TTLS`] TTLs of it. It makes a node calm
//!   (`calm.rs`), and a wrong calm verdict is cheap: a calm batch is a TTL of the node's own
//!   demand, under half the burst (`size.rs`).
//! - **Cautiously** ([`cautious`]): as if the key had run at its full rate before its
//!   first grant, that guess decaying like any cell. It gates long cells (`hold.rs`: they
//!   hold burst for four TTLs) and returnable grants (`returns.rs`), which a young key's
//!   misjudged rate made cost admissions when a node died.
//!
//! Before, both were the cautious reading, and a young key's nodes refilled by
//! `lease_target` until four TTLs of decay had brought the guess down: three gateways at
//! 60 % of a 100/s limit made 0.233 lease calls a request over their first 3 s in the
//! simulator (0.22–0.24 against a real Redis), where their steady state is 0.13. Read as
//! seen, 0.178 (BENCHMARKS.md, issue 37). `lease.lua` computes the same from the same
//! three numbers.

use super::params::LeaseParams;
use crate::clock::Nanos;

/// Time constant of the grant rate in TTLs: long enough that one node's batch moves it
/// little, short enough to notice an overload within a second at the default TTL.
pub const BUSY_TTLS: u64 = 4;

/// The shortest window a young key's rate is seen over, in TTLs: the first cells granted
/// are read as granted over one TTL, not over the instant the key has lived (which would
/// read any grant as an overload). Over one TTL an overload is already plain: the
/// coordinator grants the burst and two TTLs of reservations ahead. `lease.lua` writes
/// the same floor as a quarter of the span.
pub const FIRST_WINDOW_TTLS: u64 = 1;

/// The grant-rate time constant of `p` (ns).
pub fn busy_span(p: &LeaseParams) -> Nanos {
    p.ttl.saturating_mul(BUSY_TTLS).max(1)
}

/// One key's grant-rate average, as the coordinator keeps it between calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GrantRate {
    /// Cells granted, decayed to `at`.
    pub count: f64,
    /// When `count` was last decayed (ns).
    pub at: Nanos,
    /// When the average started (ns): what it has seen is `1 − e^(−(now − born) / span)`
    /// of a whole span, and the cautious guess is the rest.
    pub born: Nanos,
}

/// The grant-rate average after `granted` cells at `now`, from `prev` (none: the key's
/// average starts now, with nothing granted), and the rate as seen
/// ([`Grant::busy`](super::Grant::busy)). With nothing seen at all (no average, nothing
/// granted: a bucket emptied by other takes than grants), the cautious 1 000.
pub fn busy(
    p: &LeaseParams,
    prev: Option<GrantRate>,
    granted: u32,
    now: Nanos,
) -> (GrantRate, u32) {
    let fresh = GrantRate {
        count: 0.0,
        at: now,
        born: now,
    };
    let Some(prev) = prev else {
        return match granted {
            0 => (fresh, 1_000),
            _ => busy(p, Some(fresh), granted, now),
        };
    };
    let count = decayed(p, &prev, now) + f64::from(granted);
    let floor = FIRST_WINDOW_TTLS as f64 / BUSY_TTLS as f64;
    let seen = (1.0 - unseen(p, &prev, now)).max(floor);
    let next = GrantRate {
        count,
        at: now,
        born: prev.born,
    };
    (next, per_mille(p, count / seen))
}

/// The rate before a grant at `now`, read cautiously: what the average has not seen counts
/// as at the full rate (a key with no average: 1 000).
pub fn cautious(p: &LeaseParams, prev: Option<GrantRate>, now: Nanos) -> u32 {
    match prev {
        None => 1_000,
        Some(r) => {
            let full = busy_span(p) as f64 / interval_ns(p);
            per_mille(p, decayed(p, &r, now) + full * unseen(p, &r, now))
        }
    }
}

/// `r`'s cells decayed to `now`.
fn decayed(p: &LeaseParams, r: &GrantRate, now: Nanos) -> f64 {
    r.count * (-(now.saturating_sub(r.at) as f64) / busy_span(p) as f64).exp()
}

/// The share of a span the average has not seen by `now`: `e^(−age / span)`.
fn unseen(p: &LeaseParams, r: &GrantRate, now: Nanos) -> f64 {
    (-(now.saturating_sub(r.born) as f64) / busy_span(p) as f64).exp()
}

fn interval_ns(p: &LeaseParams) -> f64 {
    p.ns_ceil(p.interval()).max(1) as f64
}

/// `cells` over a span, per mille of what the limit allows in it.
fn per_mille(p: &LeaseParams, cells: f64) -> u32 {
    (cells * interval_ns(p) / busy_span(p) as f64 * 1000.0)
        .round()
        .clamp(0.0, 1e9) as u32
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    /// 100/s, burst 20, lease_ttl 500 ms (T = 10 ms, span 2 s).
    fn params() -> LeaseParams {
        let nz = |n| NonZeroU32::new(n).unwrap();
        let ttl = Duration::from_millis(500);
        LeaseParams::new(
            nz(100),
            Duration::from_secs(1),
            nz(20),
            ttl,
            ttl / 5,
            nz(20),
        )
        .unwrap()
    }

    const MS: Nanos = 1_000_000;
    const START: Nanos = 1_000 * MS;

    /// Grants at `per_s` cells a second, spread over 10 ms steps, for `ms`: the average and
    /// the last rate as seen.
    fn steady(p: &LeaseParams, per_s: u64, ms: u64) -> (GrantRate, u32) {
        let mut avg = None;
        let mut seen = 0;
        for i in 0..ms / 10 {
            let granted = ((i + 1) * per_s / 100 - i * per_s / 100) as u32;
            let (a, b) = busy(p, avg, granted, START + i * 10 * MS);
            (avg, seen) = (Some(a), b);
        }
        (avg.unwrap(), seen)
    }

    #[test]
    fn a_young_key_is_seen_at_its_true_rate_and_read_cautiously_at_the_full_one() {
        let p = params();
        // 60 % of the limit, seen near 600 after two TTLs and after twenty (after one, the
        // floor's whole TTL over 490 ms of grants: a little under).
        let (_, seen) = steady(&p, 60, 500);
        assert!((500..=600).contains(&seen), "after a TTL: {seen}");
        let (young, seen) = steady(&p, 60, 1_000);
        assert!((560..=640).contains(&seen), "after two TTLs: {seen}");
        let (_, seen_old) = steady(&p, 60, 10_000);
        assert!((580..=620).contains(&seen_old), "after 10 s: {seen_old}");
        // The cautious reading still counts most of the unseen span as full: over 750.
        let at = young.at;
        let c = cautious(&p, Some(young), at);
        assert!((800..=900).contains(&c), "cautious after two TTLs: {c}");
        // The limit itself is seen over 850 from the first TTL on: uncalm (`size.rs`).
        let (_, full) = steady(&p, 100, 500);
        assert!((850..=1_000).contains(&full), "at the limit: {full}");
    }

    #[test]
    fn the_first_grant_is_seen_over_one_ttl_and_a_new_key_is_cautiously_full() {
        let p = params();
        // 50 cells in a TTL are the limit: 1 000 per mille, however soon after the start.
        assert_eq!(busy(&p, None, 50, 7 * MS).1, 1_000);
        // The burst and two TTLs of reservations at a key's first call: an overload.
        assert_eq!(busy(&p, None, 20 + 100, 7 * MS).1, 2_400);
        // Three cells: calm as seen; the cautious reading of a new key is the full rate.
        assert_eq!(busy(&p, None, 3, 7 * MS).1, 60);
        assert_eq!(cautious(&p, None, 7 * MS), 1_000);
        // Nothing granted and nothing seen: cautious too.
        assert_eq!(busy(&p, None, 0, 7 * MS).1, 1_000);
    }

    #[test]
    fn an_old_average_reads_the_same_both_ways() {
        let p = params();
        // Born long ago: nothing unseen. 200 cells over a 2 s span at 100/s is 1 000 per
        // mille; one span later e^-1 of it.
        let old = GrantRate {
            count: 200.0,
            at: 100_000 * MS,
            born: 0,
        };
        assert_eq!(busy(&p, Some(old), 0, 100_000 * MS).1, 1_000);
        assert_eq!(cautious(&p, Some(old), 100_000 * MS), 1_000);
        let later = (1_000.0 * (-1.0f64).exp()).round() as u32;
        assert_eq!(busy(&p, Some(old), 0, 102_000 * MS).1, later);
        assert_eq!(cautious(&p, Some(old), 102_000 * MS), later);
    }
}
