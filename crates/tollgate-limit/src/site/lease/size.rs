//! How much a node asks for, as pure functions of its demand (`book.rs` applies them). The
//! numbers were chosen on `tollgate simulate --matrix` (nine traces, see `simulate/matrix.rs`)
//! and each says why in its doc; the derivations are here so they can be checked.

use super::params::LeaseParams;
use crate::clock::Nanos;

/// Expected requests per TTL from which a node takes reservations. A reserved cell is
/// spent only by a request that comes within the TTL after it conforms; with Poisson
/// arrivals it expires unspent with probability e^-λ (λ: requests per TTL): 5 % at 3 (the
/// old threshold, which lost 7 % on 32 nodes), 0.25 % at 6. Below this a node asks only
/// with a request waiting, for cells that conform now, and spends them at once.
pub(super) const RESERVE_FROM: f64 = 6.0;

/// Expected requests per TTL from which a node below [`RESERVE_FROM`] takes a spare cell
/// with its waiting request's while the key is in a returnable run (`returns.rs`): the
/// spare is spent by the node's next request if it comes within the cell's life, and
/// given back if not. Below 2.5 (a spare wasted one time in nine or more) the returns a
/// key may take run out: with no threshold the "limit 200" trace lost 2.8 %; at 2.5,
/// 0.3 %, and 32 nodes made 0.400 calls a request instead of 0.571 (at 2, 0.385 but
/// 0.6 % short).
pub(super) const SPARE_FROM: f64 = 2.5;

/// Standard deviations of Poisson slowness a reserved batch must survive (see
/// [`reserve_batch`]). At 2 the at-the-limit trace lost 8 %; at 3 it loses 0.3 %.
const Z: f64 = 3.0;

/// Cap on the node's share of the key's rate in [`reserve_batch`]: a node that sees nearly
/// the whole rate would otherwise be trusted with batches its own noise can strand (at
/// 0.9 the node-loss trace strands 0.2 % more).
const MAX_SHARE: f64 = 0.5;

/// First back-off after an empty answer, in TTLs (doubling per empty answer in a row).
const BACK_OFF_TTLS: f64 = 2.0;

/// Longest back-off, in TTLs.
const MAX_BACK_OFF_TTLS: f64 = 16.0;

/// Cells in a reserved batch. `per_ttl`: the node's requests per TTL (λ); `share`: its
/// requests per emission interval `T` (its rate over the key's, `u`).
///
/// A batch's `k` cells conform one `T` apart; the node spends them at its own rate `d`.
/// Cell `k` must be spent within the TTL of conforming: `k` requests take `k/d` on average,
/// with a standard deviation of `√k/d`, so `k/d + Z·√k/d ≤ TTL + k·T`, that is
/// `(1 − u)·k + Z·√k − λ ≤ 0`, whose largest root is `k = x²` with
/// `x = (−Z + √(Z² + 4(1 − u)λ)) / (2(1 − u))`. A node close to the key's rate (`u → 1`)
/// spends its cells about as fast as they conform and may take far more than a TTL's worth:
/// that, not the horizon, is what lets a hot node make few calls.
pub(super) fn reserve_batch(per_ttl: f64, share: f64) -> f64 {
    let u = share.clamp(0.0, MAX_SHARE);
    let a = 1.0 - u;
    let x = (-Z + (Z * Z + 4.0 * a * per_ttl.max(0.0)).sqrt()) / (2.0 * a);
    (x * x).floor()
}

/// Standard deviations of Poisson slowness a contended key's batch must survive
/// ([`contended_batch`]). On the simulator's default trace (8 skewed nodes at twice the
/// limit), in an early form of the rule, at 3 the nodes made 0.109 calls a request, at 2
/// 0.091, both 0.4 % short; at 1 0.065 but 1.5 % short (cells expired on thin nodes).
const Z_CONTENDED: f64 = 2.0;

/// Cells in a reserved batch of a contended key's node (`fair.rs`): the largest `k` with
/// `k + Z·√k ≤ λ` at [`Z_CONTENDED`] deviations, at least `reserve_batch`'s. The node wants
/// more than its share, so its requests wait for its cells, and a cell is spent by the
/// first request after it conforms: `k` cells need `k` requests within about a TTL (the
/// batch conforms within `k·T`).
pub(super) fn contended_batch(per_ttl: f64) -> u32 {
    let z = Z_CONTENDED;
    let x = (-z + (z * z + 4.0 * per_ttl.max(0.0)).sqrt()) / 2.0;
    ((x * x).floor() as u32).max(1)
}

/// Cells in a batch while the key's bucket has slack: a TTL's demand plus two standard
/// deviations and one, so the node asks about once per TTL it is busy (cells that expire
/// cost nothing while the bucket is nearly full, and the node stops as soon as it is not).
pub(super) fn slack_batch(per_ttl: f64) -> f64 {
    let l = per_ttl.max(0.0);
    (l + 2.0 * l.sqrt() + 1.0).round()
}

/// A calm key's grant rate (`Grant::busy`, per mille of its limit) stays below this. At
/// 700 the three-gateway bench (60 % offered) was calm on 92 % of its grants and made 0.21
/// script calls per request with Poisson arrivals; at 800 a small-burst trace at the limit
/// lost 0.3 % more; 750 kept every trace where it was (`benches/README.md`).
pub(super) const CALM_BUSY: u32 = 750;

/// A key found calm stays calm until a grant reports this grant rate (per mille): entering
/// at [`CALM_BUSY`] and leaving at the same figure made a thin node flap. At 60 % of the
/// limit with Poisson arrivals (`benches/lease_fleet.sh`'s shape: 30/20/10 requests a
/// second, limit 100, burst 20, TTL 500 ms) the rate, wasted cells included, wanders
/// between 650 and 850; each grant over 750 sent the 10/s node back to asking for cells
/// that conform now, which the others' reservations had taken, and its empty answer kept
/// it away a second or more. In the simulator (8 seeds × 600 s after a 5 s warm-up) that
/// node was denied 893 requests, up to 32 in a row; leaving at 850, 359; with `book.rs`'s
/// calm empty answer too, 264, at most 5 in a row, and 0.111 calls per request instead of
/// 0.132 (back to 0.132 with [`calm_cap`]). No matrix trace is ever calm: all unchanged.
pub(super) const CALM_LEAVE_BUSY: u32 = 850;

/// A calm verdict holds this many TTLs after the grant that gave it.
pub(super) const CALM_TTLS: u64 = 4;

/// No calm verdict for this many TTLs after an empty answer (the longest back-off). Under
/// overload every node can be away at once; the grant rate then decays, and the first
/// grant after looks calm: at 2× on three nodes with burst 10, one such call in 4 300
/// cost up to 26 admissions.
pub(super) const CALM_AFTER_EMPTY_TTLS: u64 = 16;

/// Long cells (`hold.rs`) a node asks for: its demand over a long cell's life with one
/// deviation and one, or none (ordinary cells) when that is more than a third of the
/// key's burst: long cells hold burst while they live, and a node that needs that many
/// makes few calls with ordinary batches anyway; at most `lease_max`, like any batch.
/// Asked for whatever the key's state; the
/// coordinator grants them only while the key is well under its limit (`hold.rs`).
/// (On `simulate --normal`: a margin of two deviations made 0.134 calls a request, one
/// 0.123, none 0.124; a cap of half the burst 0.127, a third 0.123.)
pub(super) fn long_batch(p: &LeaseParams, per_ttl: f64) -> u32 {
    let l = per_ttl.max(0.0) * p.long_life as f64 / p.ttl.max(1) as f64;
    let k = (l + l.sqrt() + 1.0).round() as u32;
    match k <= p.burst / 3 {
        true => k.min(p.max),
        false => 0,
    }
}

/// Cells in a calm batch: a TTL of the node's demand and one, no margin. Cells that expire
/// cost nothing while the key is calm, but they count in its grant rate: with a margin of
/// one deviation the bench's wasted cells kept the key above `CALM_BUSY` a third of the
/// time, and it made 0.19 script calls per request where this makes 0.18.
pub(super) fn calm_batch(per_ttl: f64) -> f64 {
    (per_ttl.max(0.0) + 1.0).round()
}

/// Most cells in one calm batch: under half the key's burst, so that two nodes refilling
/// at the same moment leave a cell that conforms now for a third one's waiting request. A
/// calm batch is a TTL of the node's demand, and when a TTL holds more than the burst (the
/// fleet bench: limit 100, burst 20, TTL 500 ms, 60 requests a second), nodes refilling
/// together took every cell that conforms now and the last one's request was denied. In
/// the simulator, that shape with Poisson arrivals (8 seeds × 600 s after a 5 s warm-up):
/// denied 15/108/264 on the 30/20/10 nodes without the cap, 0/37/48 with it, for 0.132
/// calls per request instead of 0.111. At exactly half the burst (10), 0/41/59, but on
/// fixed arrivals every 5 s all three nodes refilled at once, the two busy ones took the
/// whole burst and the thin one was denied (`tests/lease/lease_book.rs`' 60 % fleet). The cap
/// is on the ask, not on `book.rs`'s fit test (a TTL of demand within `lease_max`).
pub(super) fn calm_cap(p: &LeaseParams) -> u32 {
    (p.burst.saturating_sub(1) / 2).clamp(1, p.max)
}

/// Span of a node's long demand average: a TTL, or four `lease_target`s if longer.
pub(super) fn calm_span(ttl: Nanos, target: Nanos) -> Nanos {
    ttl.max(4 * target).max(1)
}

/// How long to stay away after the `empties`-th empty answer in a row: a node the key's
/// other holders have reserved past gets nothing by asking sooner, and each empty answer
/// is a store call (on 32 nodes they were half of all calls). When nothing is reserved past
/// the node's reach, `book.rs` cuts this to the time the bucket takes to fill again.
pub(super) fn back_off(ttl: Nanos, empties: u8) -> Nanos {
    let ttls = (BACK_OFF_TTLS * f64::from(1u32 << empties.saturating_sub(1).min(8)))
        .min(MAX_BACK_OFF_TTLS);
    (ttl as f64 * ttls) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_batch_survives_three_deviations() {
        // Check the root against the inequality it solves, on a grid.
        for per_ttl in [0.5, 3.0, 6.0, 10.0, 40.0, 400.0] {
            for share in [0.0, 0.1, 0.4, 0.8] {
                let k = reserve_batch(per_ttl, share);
                let u = f64::min(share, MAX_SHARE);
                let f = |k: f64| (1.0 - u) * k + Z * k.sqrt() - per_ttl;
                assert!(f(k) <= 1e-9, "λ {per_ttl} u {share}: k {k}");
                assert!(
                    f(k + 1.0) > 0.0,
                    "λ {per_ttl} u {share}: k {k} not the largest"
                );
            }
        }
    }

    #[test]
    fn a_busier_node_takes_more_per_call() {
        assert_eq!(reserve_batch(6.0, 0.0), 1.0);
        assert!(reserve_batch(20.0, 0.4) > reserve_batch(20.0, 0.1));
        assert!(reserve_batch(40.0, 0.5) > 2.0 * 40.0 * 0.4);
    }

    #[test]
    fn slack_batches_cover_a_ttl_with_margin() {
        assert_eq!(slack_batch(0.0), 1.0);
        assert_eq!(slack_batch(1.0), 4.0);
        assert_eq!(slack_batch(100.0), 121.0);
    }

    #[test]
    fn two_calm_batches_leave_a_cell_of_the_burst() {
        let nz = |n| std::num::NonZeroU32::new(n).expect("non-zero");
        let ms = std::time::Duration::from_millis;
        for (burst, max) in [(1, 50), (2, 50), (3, 50), (10, 50), (20, 50), (96, 20)] {
            let p = LeaseParams::new(nz(100), ms(1000), nz(burst), ms(50), ms(20), nz(max))
                .expect("valid");
            let cap = calm_cap(&p);
            assert!((1..=max).contains(&cap), "burst {burst}: cap {cap}");
            assert!(burst < 3 || 2 * cap < burst, "burst {burst}: cap {cap}");
        }
    }

    #[test]
    fn back_off_doubles_up_to_its_cap() {
        let ttl = 50_000_000;
        let got: Vec<Nanos> = (1..=6).map(|e| back_off(ttl, e) / ttl).collect();
        assert_eq!(got, [2, 4, 8, 16, 16, 16]);
    }
}
