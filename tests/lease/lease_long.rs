//! Long cells (`limit/lease/hold.rs`): cells a node may spend for `4 · lease_ttl` after
//! their grant, which the coordinator hands out only while the key is well under its
//! limit, and which hold the key's burst while they can still be spent: the window bound
//! (`burst + (D + lease_ttl) · rate`) holds with them as without. On explicit timestamps
//! against the in-process coordinator (the same rule `lease.lua` runs: the library's `tests/scripts/lease/`).

use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::limit::lease::{Grant, LeaseBook, LeaseParams, MemoryCoordinator, RefillAsk, Take};

const MS: u64 = 1_000_000;

fn params(per_second: u32, burst: u32, ttl_ms: u64) -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(per_second),
        Duration::from_secs(1),
        nz(burst),
        Duration::from_millis(ttl_ms),
        Duration::from_millis(ttl_ms.div_ceil(2)),
        nz(50),
    )
    .expect("valid")
}

fn ask(want: u32, long: u32) -> RefillAsk {
    RefillAsk {
        want,
        lead: 0,
        long,
        ..RefillAsk::default()
    }
}

fn admitted(t: Take) -> bool {
    matches!(t, Take::Admitted { .. })
}

/// A key seen once at 0 and then quiet: by 600 ms its grant rate has decayed well under
/// the long-cell threshold (a key with no history counts as busy).
fn quiet_key(c: &MemoryCoordinator, p: &LeaseParams) {
    let g = c.grant("k", p, ask(1, 6), 0);
    assert!(!g.long, "a key with no history is busy: no long cells");
}

/// 100/s, burst 20, TTL 50 ms: node A takes 6 long cells at 600 ms. At 700 ms, a TTL past
/// anything ordinary, A can still spend them, so node B finds only 14 of the burst: both
/// spending at once admit 20, the burst. Without the hold B would get 20 and the instant
/// would admit 26, over `burst + ttl · rate` = 25. Once A's cells can no longer be spent
/// inside any window that also holds B's next ones (after `600 + 200 − 50` ms), the burst is
/// whole again.
#[test]
fn long_cells_hold_the_burst_while_they_can_be_spent() {
    let p = params(100, 20, 50);
    let c = MemoryCoordinator::new();
    quiet_key(&c, &p);
    let (mut a, mut b) = (LeaseBook::default(), LeaseBook::default());
    let long = c.grant("k", &p, ask(1, 6), 600 * MS);
    assert!(long.long, "{long:?}");
    assert_eq!(long.granted, 6);
    a.on_grant(&p, ask(1, 6), long, 600 * MS);
    let short = c.grant("k", &p, ask(20, 0), 700 * MS);
    assert_eq!(short.granted, 14, "{short:?}");
    b.on_grant(&p, ask(20, 0), short, 700 * MS);
    let spent = (0..30)
        .filter(|_| admitted(a.take(&p, 1, 700 * MS)) || admitted(b.take(&p, 1, 700 * MS)))
        .count();
    assert_eq!(spent, 20);
    // The hold ends at 750 ms: by 900 ms the bucket has refilled from empty to the whole
    // burst (20 cells in 200 ms), no longer capped at 14.
    let after = c.grant("k", &p, ask(20, 0), 900 * MS);
    assert_eq!(after.granted, 20, "{after:?}");
}

/// A long cell is spendable from its grant until `4 · ttl` later, then dropped.
#[test]
fn long_cells_live_four_ttls_on_the_node() {
    let p = params(100, 20, 50);
    let c = MemoryCoordinator::new();
    quiet_key(&c, &p);
    let mut book = LeaseBook::default();
    let g = c.grant("k", &p, ask(1, 3), 600 * MS);
    assert!(g.long);
    book.on_grant(&p, ask(1, 3), g, 600 * MS);
    assert!(admitted(book.take(&p, 1, 600 * MS)));
    assert!(
        admitted(book.take(&p, 1, 790 * MS)),
        "an ordinary cell is gone"
    );
    assert!(admitted(book.take(&p, 1, 800 * MS)), "the last moment");
    book.take(&p, 1, 800 * MS + 1);
    assert_eq!(book.held(), 0);
    let g = c.grant("k", &p, ask(1, 3), 800 * MS);
    assert!(g.long);
    book.on_grant(&p, ask(1, 3), g, 800 * MS);
    assert!(!admitted(book.take(&p, 1, 1_000 * MS + 1)), "expired");
    assert_eq!(book.expired, 3);
}

/// Near its limit a key grants no long cells: a cell that expires unspent there is an
/// admission lost.
#[test]
fn a_busy_key_grants_ordinary_cells_to_a_long_ask() {
    let p = params(100, 20, 50);
    let c = MemoryCoordinator::new();
    for ms in (0..2_000).step_by(10) {
        let g = c.grant("k", &p, ask(1, 6), ms * MS);
        assert!(!g.long, "at {ms} ms: {g:?}");
    }
}

/// A take of two that spends an ordinary cell and a long one, given back (another policy
/// denied): the cells come back expiring with the first of them to expire, the long
/// cell's end of life, not a TTL after the ordinary one conformed, which would stretch
/// the long cell past the life its hold covers. (Found by review: before, 22 cells were
/// spendable at 229 ms here.)
#[test]
fn a_long_cell_given_back_keeps_its_end_of_life() {
    let p = params(1000, 100, 50);
    let mut b = LeaseBook::default();
    let grant = |granted, frontier_ms: i64, long| Grant {
        granted,
        frontier: frontier_ms * MS as i64,
        busy: 0,
        long,
        ..Grant::default()
    };
    // Five long cells at 0 ms (valid until 200 ms); 100 ordinary cells granted at 100 ms
    // conforming 101 to 200 ms (the first expires at 151 ms: spent first).
    b.on_grant(&p, ask(1, 5), grant(5, -95, true), 0);
    let reserve = RefillAsk {
        want: 100,
        lead: 100 * MS,
        long: 0,
        ..RefillAsk::default()
    };
    b.on_grant(&p, reserve, grant(100, 100, false), 100 * MS);
    for ms in 101..180u64 {
        assert!(admitted(b.take(&p, 1, ms * MS)), "{ms} ms");
    }
    // Two at 180 ms: the ordinary cell conforming then and a long cell; given back.
    assert!(admitted(b.take(&p, 2, 180 * MS)));
    let taken = b.last_conform();
    b.give_back(&p, 2, taken);
    // Until then both can be spent again: at 199 ms the four long cells left, the two
    // given back and the 19 ordinary cells conformed by then.
    let mut early = b.clone();
    let n = (0..40)
        .filter(|_| admitted(early.take(&p, 1, 199 * MS)))
        .count();
    assert_eq!(n, 4 + 2 + 19);
    // At 229 ms the long cells are past their life (200 ms), and so are the two given
    // back: the ordinary cells conforming 181 to 200 ms are what is left.
    let n = (0..40)
        .filter(|_| admitted(b.take(&p, 1, 229 * MS)))
        .count();
    assert_eq!(n, 20);
}

/// A key whose burst is under eight grants no long cells: a few of them would hold it
/// whole, and a thin node would find nothing for the hold's length. (Found by review.)
#[test]
fn a_small_burst_grants_no_long_cells() {
    let p = params(100, 6, 50);
    let c = MemoryCoordinator::new();
    c.grant("k", &p, ask(1, 0), 0);
    for n in 0..3 {
        let g = c.grant("k", &p, ask(1, 2), 600 * MS + n * MS);
        assert!(!g.long, "{g:?}");
    }
    assert!(c.grant("k", &p, ask(1, 0), 620 * MS).granted > 0);
}

/// A fleet as `tollgate simulate` drives it; returns the admitted times and how many grants
/// were long.
fn fleet(p: &LeaseParams, arrivals: &[(u64, usize)], nodes: usize) -> (Vec<u64>, u64) {
    let c = MemoryCoordinator::new();
    let mut books = vec![LeaseBook::default(); nodes];
    let (mut out, mut longs) = (Vec::new(), 0);
    for &(now, node) in arrivals {
        let book = &mut books[node];
        let mut taken = book.take(p, 1, now);
        if let Some(ask) = book.wants(p, now) {
            book.begin(now, ask);
            let g = c.grant("k", p, ask, now);
            longs += u64::from(g.long);
            book.on_grant(p, ask, g, now);
            if !admitted(taken) {
                taken = book.retake(p, 1, now);
            }
        }
        if admitted(taken) {
            out.push(now);
        }
    }
    (out, longs)
}

/// Every window `[a, b]` of admissions holds at most `burst + (b − a + ttl) · rate`.
fn within_the_bound(admitted: &[u64], p: (u32, u32, u64)) -> Result<(), String> {
    let (per_second, burst, ttl_ms) = p;
    let rate = f64::from(per_second) / 1e9;
    for (i, &a) in admitted.iter().enumerate() {
        for (j, &b) in admitted.iter().enumerate().skip(i) {
            let bound = u64::from(burst) + ((b - a + ttl_ms * MS) as f64 * rate).floor() as u64;
            if (j - i + 1) as u64 > bound {
                return Err(format!("{} in [{a}, {b}], bound {bound}", j - i + 1));
            }
        }
    }
    Ok(())
}

/// Arrival times from stretches of `(gap, node)`, each stretch after a pause.
fn timeline(stretches: &[(u64, &[(u64, usize)])], nodes: usize) -> Vec<(u64, usize)> {
    let mut now = 0;
    let mut out = Vec::new();
    for &(pause, gaps) in stretches {
        now += pause;
        for &(gap, node) in gaps {
            now += gap;
            out.push((now, node % nodes));
        }
    }
    out
}

/// Run the fleet on `(per_second, burst, ttl_ms)` and check the window bound.
fn bounded_fleet(
    q: (u32, u32, u64),
    arrivals: &[(u64, usize)],
    nodes: usize,
) -> Result<(), TestCaseError> {
    let (admitted, _) = fleet(&params(q.0, q.1, q.2), arrivals, nodes);
    within_the_bound(&admitted, q).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(crate::common::beside_source(ProptestConfig::with_cases(64)))]

    /// Any traffic on a key, quiet stretches (where long cells are granted) and bursts of
    /// arrivals: never more than the window bound.
    #[test]
    fn thin_fleets_with_long_cells_stay_within_the_bound(
        per_second in 20u32..2_000,
        burst in 6u32..60,
        ttl_ms in 5u64..100,
        nodes in 2usize..9,
        gaps in prop::collection::vec(
            (prop_oneof![3 => 0u64..2 * MS, 2 => 0u64..60 * MS, 1 => 0u64..400 * MS], 0usize..9),
            50..1_200,
        ),
    ) {
        let arrivals = timeline(&[(0, &gaps)], nodes);
        bounded_fleet((per_second, burst, ttl_ms), &arrivals, nodes)?;
    }
}

proptest! {
    #![proptest_config(crate::common::beside_source(ProptestConfig::with_cases(128)))]

    /// The shape the hold is for: sparse traffic (long cells granted and partly spent),
    /// a silence in which the bucket refills, then every node at once: the held cells and
    /// a refilled burst must not both land in one window. (The test above rarely builds
    /// this; with the cap's `now` term removed this one fails, that one passes.)
    #[test]
    fn held_cells_and_a_refilled_burst_stay_within_the_bound(
        per_second in 20u32..500,
        burst in 9u32..40,
        ttl_ms in 10u64..100,
        nodes in 2usize..9,
        sparse in prop::collection::vec((20 * MS..200 * MS, 0usize..9), 5..40),
        silence_pct in 0u64..400,
        rush in prop::collection::vec((0u64..100_000, 0usize..9), 10..120),
    ) {
        let silence = ttl_ms * MS * silence_pct / 100;
        let arrivals = timeline(&[(0, &sparse), (silence, &rush)], nodes);
        bounded_fleet((per_second, burst, ttl_ms), &arrivals, nodes)?;
    }
}

/// The property tests above reach long cells: the normal-load shape (eight nodes at half
/// the limit, weights 40/20/10/10/5/5/5/5, fixed gaps) gets long grants, admits every
/// request, and stays within the bound.
#[test]
fn a_fleet_at_half_the_limit_gets_long_cells_within_the_bound() {
    let p = params(1_000, 96, 50);
    let weights = [40u64, 20, 10, 10, 5, 5, 5, 5];
    let mut arrivals: Vec<(u64, usize)> = weights
        .iter()
        .enumerate()
        .flat_map(|(n, &w)| {
            let gap = 1_000 * MS / (5 * w);
            (1..4_000 * MS / gap).map(move |i| (i * gap + n as u64 * 37_000, n))
        })
        .collect();
    arrivals.sort();
    let (admitted, longs) = fleet(&p, &arrivals, weights.len());
    assert!(longs > 100, "{longs} long grants");
    assert_eq!(
        admitted.len(),
        arrivals.len(),
        "half the limit: all admitted"
    );
    within_the_bound(&admitted, (1_000, 96, 50)).expect("the bound");
}
