//! The lease site's node book and grant rule, on explicit timestamps: cells spend only once
//! they conform, expire a TTL later, go back on a give-back, a slow node asks only for a
//! waiting request (batch sizes and the back-off: the limiter's `tests/lease/batches.rs`); and
//! a property test that any fleet of books sharing one coordinator never admits more than
//! one GCRA of the policy would (and spends at most a TTL late).

use crate::common::nz;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::limit::lease::{Grant, LeaseBook, LeaseParams, MemoryCoordinator, RefillAsk, Take};

const MS: u64 = 1_000_000;

fn params(per_second: u32, burst: u32, ttl_ms: u64, target_ms: u64, max: u32) -> LeaseParams {
    LeaseParams::new(
        nz(per_second),
        Duration::from_secs(1),
        nz(burst),
        Duration::from_millis(ttl_ms),
        Duration::from_millis(target_ms),
        nz(max),
    )
    .expect("valid")
}

fn admitted(t: Take) -> bool {
    matches!(t, Take::Admitted { .. })
}

#[test]
fn cells_spend_only_once_they_conform() {
    let p = params(1000, 2, 50, 20, 50);
    let mut book = LeaseBook::default();
    // Five cells; the last conforms 3 ms after the reply: 0, 0, 1, 2, 3 ms.
    let ask = RefillAsk {
        want: 5,
        lead: 50 * MS,
        long: 0,
        ..RefillAsk::default()
    };
    book.on_grant(
        &p,
        ask,
        Grant {
            granted: 5,
            frontier: 3 * MS as i64,
            busy: 1_000,
            long: false,
            ..Grant::default()
        },
        0,
    );
    assert_eq!(book.take(&p, 1, 0), Take::Admitted { remaining: 1 });
    assert_eq!(book.take(&p, 1, 0), Take::Admitted { remaining: 0 });
    assert_eq!(book.take(&p, 1, 0), Take::Denied { retry_after: MS });
    assert!(admitted(book.take(&p, 1, MS)));
    assert!(!admitted(book.take(&p, 1, MS + MS / 2)));
    assert_eq!(book.take(&p, 2, 3 * MS), Take::Admitted { remaining: 0 });
    assert_eq!(book.held(), 0);
}

#[test]
fn unspent_cells_expire_a_ttl_after_they_conform() {
    let p = params(1000, 10, 50, 20, 50);
    let mut book = LeaseBook::default();
    let ask = RefillAsk {
        want: 3,
        lead: 0,
        long: 0,
        ..RefillAsk::default()
    };
    book.on_grant(
        &p,
        ask,
        Grant {
            granted: 3,
            frontier: -(7 * MS as i64),
            busy: 1_000,
            long: false,
            ..Grant::default()
        },
        0,
    );
    assert!(admitted(book.take(&p, 1, 50 * MS)), "valid up to the TTL");
    assert!(!admitted(book.take(&p, 1, 50 * MS + 1)));
    assert_eq!(book.expired, 2);
    assert_eq!(book.held(), 0);
}

#[test]
fn a_give_back_can_be_spent_again() {
    let p = params(1000, 10, 50, 20, 50);
    let mut book = LeaseBook::default();
    let ask = RefillAsk {
        want: 1,
        lead: 0,
        long: 0,
        ..RefillAsk::default()
    };
    book.on_grant(
        &p,
        ask,
        Grant {
            granted: 1,
            frontier: 0,
            busy: 1_000,
            long: false,
            ..Grant::default()
        },
        0,
    );
    assert!(admitted(book.take(&p, 1, 0)));
    assert!(!admitted(book.take(&p, 1, 0)));
    book.give_back(&p, 1, book.last_conform());
    assert!(admitted(book.take(&p, 1, MS)));
    // Given back again, it still expires a TTL after it first conformed, not later.
    let conformed = book.last_conform();
    book.give_back(&p, 1, conformed);
    assert!(!admitted(book.take(&p, 1, 50 * MS + 1)));
}

#[test]
fn a_slow_node_asks_only_for_cells_that_conform_now() {
    let p = params(1000, 10, 50, 20, 50);
    let mut book = LeaseBook::default();
    book.take(&p, 1, 0);
    let ask = book.wants(&p, 0).expect("nothing held");
    // One cell that conforms now, or, if the coordinator finds the key well under its
    // limit, long cells (which conform now too) for its demand over their life; and the
    // request it counted, for the key's demand (`fair.rs`).
    assert_eq!(
        ask,
        RefillAsk {
            want: 1,
            lead: 0,
            long: 3,
            demand: 1,
            ..RefillAsk::default()
        }
    );
    book.begin(0, ask);
    // Two cells, both conforming now; the key's bucket is nearly empty (no slack).
    book.on_grant(
        &p,
        ask,
        Grant {
            granted: 2,
            frontier: -(MS as i64),
            busy: 1_000,
            long: false,
            ..Grant::default()
        },
        0,
    );
    // The waiting request took one; the other is held. The next request takes it and asks
    // nothing: no request is left waiting.
    assert!(admitted(book.retake(&p, 1, 0)));
    assert!(admitted(book.take(&p, 1, 10 * MS)));
    assert_eq!(book.held(), 0);
    assert_eq!(book.wants(&p, 10 * MS), None, "no request waiting");
    // The next one finds nothing: now it asks.
    assert!(!admitted(book.take(&p, 1, 60 * MS)));
    assert_eq!(book.wants(&p, 60 * MS).map(|a| a.lead), Some(0));
}

/// One fleet run, as `tollgate simulate` drives it: admitted request times, and how many
/// asks were made while the key was calm (`calm.rs`: reservations of a TTL of demand,
/// whatever the node's traffic). An arrival marked `undo` is denied by "another policy"
/// after its take: its cells are given back.
fn fleet(p: &LeaseParams, arrivals: &[(u64, usize, bool)], nodes: usize) -> (Vec<u64>, u64) {
    let c = MemoryCoordinator::new();
    let mut books = vec![LeaseBook::default(); nodes];
    let mut out = Vec::new();
    let mut calm_asks = 0;
    for &(now, node, undo) in arrivals {
        let book = &mut books[node];
        let mut taken = book.take(p, 1, now);
        if let Some(ask) = book.wants(p, now) {
            calm_asks += u64::from(book.calm(p, now));
            book.begin(now, ask);
            let g = c.grant("k", p, ask, now);
            book.on_grant(p, ask, g, now);
            if !admitted(taken) {
                taken = book.retake(p, 1, now);
            }
        }
        if admitted(taken) && undo {
            let conformed = book.last_conform();
            book.give_back(p, 1, conformed);
        } else if admitted(taken) {
            out.push(now);
        }
    }
    (out, calm_asks)
}

/// The property test below reaches the calm rule: a fleet at 60 % of the limit is calm
/// once the key's grant rate has been seen under the threshold, and then still admits
/// what the policy allows and no more.
#[test]
fn a_fleet_under_the_limit_asks_while_calm_within_the_bound() {
    let p = params(100, 20, 500, 20, 20);
    // Three nodes at 30, 20 and 10 requests/s for 20 s.
    let mut arrivals: Vec<(u64, usize, bool)> = (0..3usize)
        .flat_map(|n| {
            let gap = 1_000 * MS / [30, 20, 10][n];
            (1..20_000 * MS / gap).map(move |i| (i * gap + n as u64, n, false))
        })
        .collect();
    arrivals.sort();
    let (admitted, calm_asks) = fleet(&p, &arrivals, 3);
    assert!(calm_asks > 20, "{calm_asks} calm asks");
    assert_eq!(
        admitted.len(),
        arrivals.len(),
        "60 % of the limit: all admitted"
    );
    for (i, &t) in admitted.iter().enumerate() {
        assert!((i as u64) < 20 + t * 100 / (1_000 * MS), "{} by {t}", i + 1);
    }
}

proptest! {
    #![proptest_config(crate::common::beside_source(ProptestConfig::with_cases(96)))]

    /// Every grant rule is exercised: busy stretches (reservations up to two TTLs ahead,
    /// batches sized by demand), quiet ones (slack batches of cells that conform now, thin
    /// nodes asking only with a request waiting, and once the key's grant rate has decayed
    /// under the calm threshold, calm reservations of a TTL of demand), overload (short and
    /// empty answers, the back-off), give-backs, and up to eight nodes.
    #[test]
    fn a_fleet_never_admits_more_than_one_gcra(
        per_second in 10u32..3_000,
        burst in 1u32..60,
        ttl_ms in 1u64..120,
        target_pct in 1u64..=100,
        max in 1u32..80,
        nodes in 1usize..9,
        gaps in prop::collection::vec(
            (
                prop_oneof![4 => 0u64..4 * MS, 1 => 0u64..200 * MS],
                0usize..9,
                prop::bool::weighted(0.2),
            ),
            1..1_500,
        ),
    ) {
        let target_ms = (ttl_ms * target_pct / 100).max(1);
        let p = params(per_second, burst, ttl_ms, target_ms, max);
        let mut now = 0;
        let arrivals: Vec<(u64, usize, bool)> = gaps
            .iter()
            .map(|&(gap, node, undo)| {
                now += gap;
                (now, node % nodes, undo)
            })
            .collect();
        let (admitted, _) = fleet(&p, &arrivals, nodes);
        let rate = f64::from(per_second) / 1e9;
        // From the start (a full key at time 0): what one GCRA admits by each admission.
        for (i, &t) in admitted.iter().enumerate() {
            let bound = u64::from(burst) + (t as f64 * rate).floor() as u64;
            prop_assert!((i as u64) < bound, "{} admitted by {t} ns, bound {bound}", i + 1);
        }
        // Any window: cells spent in [a, b] conformed in [a − ttl, b].
        let ttl = ttl_ms * MS;
        for (i, &a) in admitted.iter().enumerate() {
            for (j, &b) in admitted.iter().enumerate().skip(i) {
                let span = (b - a + ttl) as f64;
                let bound = u64::from(burst) + (span * rate).floor() as u64;
                prop_assert!((j - i + 1) as u64 <= bound, "{} in [{a}, {b}], bound {bound}", j - i + 1);
            }
        }
    }
}
