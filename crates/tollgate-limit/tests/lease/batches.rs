//! How much a lease book asks for, and when: batches sized by the node's demand (reserved
//! batches it spends within the TTL three deviations slow, slack batches of a TTL's traffic
//! with margin), reservations past the TTL (the horizon is two TTLs) spent when they come
//! due, and the back-off after empty answers. (Spending, expiry and the fleet bound:
//! the gateway's `tests/lease/lease_book.rs`.)

use std::num::NonZeroU32;
use std::time::Duration;

use tollgate_limit::lease::{Grant, LeaseBook, LeaseParams, RefillAsk, Take};

const MS: u64 = 1_000_000;

fn params(per_second: u32, burst: u32, ttl_ms: u64, target_ms: u64, max: u32) -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
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

/// The largest reserved batch for `per_ttl` requests per TTL at `share` of the key's rate,
/// searched on the inequality the book's closed form solves (`size.rs`): `k` requests at
/// that rate, three standard deviations slow, come within the TTL plus the `k` cells'
/// spread. The share counts at most one half.
fn largest_batch(per_ttl: f64, share: f64) -> u32 {
    let u = share.min(0.5);
    (1..100_000u32)
        .take_while(|&k| (1.0 - u) * f64::from(k) + 3.0 * f64::from(k).sqrt() <= per_ttl)
        .last()
        .unwrap_or(1)
}

#[test]
fn batches_follow_demand_within_the_bounds() {
    let p = params(100_000, 1000, 50, 20, 50);
    let mut book = LeaseBook::default();
    assert_eq!(book.batch_size(&p), 1, "no traffic yet");
    // 10 requests per 20 ms window for 400 ms: about 25 per TTL (the average is still
    // climbing: 24.9), at 0.5 % of the key's rate.
    for i in 0..200 {
        book.take(&p, 1, i * 2 * MS);
    }
    let k = book.batch_size(&p);
    assert_eq!(k, largest_batch(24.5, 0.005), "{k}");
    assert_eq!(k, largest_batch(25.0, 0.005), "{k}");
    assert!(
        k > 10,
        "more than the 40 % of a TTL the old rule allowed: {k}"
    );
    // 1 000 per window: capped at lease_max.
    for i in 0..20_000 {
        book.take(&p, 1, 400 * MS + i * 20_000);
    }
    assert_eq!(book.batch_size(&p), 50);
    // A quiet second: back to one.
    book.take(&p, 1, 2_000 * MS);
    assert_eq!(book.batch_size(&p), 1);
}

/// A book that has seen 40 requests per 20 ms (2 000/s) of a 1 000/s key: it reserves.
fn busy_book(p: &LeaseParams) -> LeaseBook {
    let mut book = LeaseBook::default();
    for i in 0..200 {
        book.take(p, 1, i * MS / 2);
    }
    book
}

#[test]
fn a_busy_node_reserves_past_the_ttl() {
    let p = params(1000, 10, 50, 20, 50);
    let book = busy_book(&p);
    let ask = book.wants(&p, 100 * MS).expect("nothing held: ask");
    assert_eq!(ask.lead, 100 * MS, "the horizon is two TTLs");
    assert_eq!(ask.want, 50, "a node at the key's rate takes lease_max");
}

#[test]
fn a_short_grant_blocks_until_the_rest_fits() {
    let p = params(1000, 10, 50, 20, 50);
    let mut book = busy_book(&p);
    let now = 100 * MS;
    let ask = book.wants(&p, now).expect("nothing held: ask");
    book.begin(now, ask);
    assert_eq!(book.wants(&p, now), None, "one call at a time");
    // 20 of 50 fit: the last conforms 100 ms out, at the horizon's edge.
    let g = Grant {
        granted: 20,
        frontier: 100 * MS as i64,
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    book.on_grant(&p, ask, g, now);
    // The 30 cells still wanted enter the horizon 30 ms later; nothing is asked before.
    for i in 0..20 {
        book.take(&p, 1, now + 81 * MS + i * MS); // spend the 20 as they conform
    }
    assert_eq!(book.held(), 0);
    assert_eq!(book.wants(&p, now + 30 * MS - 1), None);
    assert!(book.wants(&p, now + 30 * MS).is_some());
}

/// How long a thin node (one request waiting, asking for cells that conform now) stays
/// away after the empty answer `g` at `now`: the first instant it asks again.
fn away_after(book: &mut LeaseBook, p: &LeaseParams, now: u64, g: Grant) -> u64 {
    assert!(!admitted(book.take(p, 1, now)), "a request waits");
    let ask = book.wants(p, now).expect("the back-off is over: ask");
    assert_eq!(ask.lead, 0, "a thin node");
    book.begin(now, ask);
    book.on_grant(p, ask, g, now);
    let mut wait = 0;
    loop {
        // The request still waiting (not counted again as demand).
        book.retake(p, 1, now + wait);
        if book.wants(p, now + wait).is_some() {
            return wait;
        }
        wait += MS;
    }
}

#[test]
fn empty_answers_past_reach_back_off_doubling() {
    let p = params(1000, 10, 50, 20, 50);
    let mut book = LeaseBook::default();
    let mut now = 0;
    let mut waits = Vec::new();
    // Other nodes hold reservations up to 20 ms ahead: the next cell fits in 21 ms, but the
    // back-off decides.
    let reserved = Grant {
        granted: 0,
        frontier: 20 * MS as i64,
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    for _ in 0..5 {
        let wait = away_after(&mut book, &p, now, reserved);
        waits.push(wait / MS);
        now += wait;
    }
    // Two TTLs, doubling, capped at sixteen.
    assert_eq!(waits, [100, 200, 400, 800, 800]);
    // A grant resets it.
    assert!(!admitted(book.take(&p, 1, now)));
    let ask = book.wants(&p, now).expect("ask");
    book.begin(now, ask);
    let one = Grant {
        granted: 1,
        frontier: 0,
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    book.on_grant(&p, ask, one, now);
    assert!(admitted(book.retake(&p, 1, now)));
    assert_eq!(away_after(&mut book, &p, now, reserved), 100 * MS);
}

#[test]
fn an_empty_bucket_keeps_a_node_away_only_until_it_refills() {
    // Nothing reserved past the node's reach: the bucket is merely empty (perhaps this
    // node's own doing). The next cell fits 1 ms from now, the tenth (the burst) 9 ms
    // later: the node is back by then, whatever the back-off says.
    let p = params(1000, 10, 50, 20, 50);
    let mut book = LeaseBook::default();
    let empty = Grant {
        granted: 0,
        frontier: 0,
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    assert_eq!(away_after(&mut book, &p, 0, empty), 10 * MS);
    assert_eq!(away_after(&mut book, &p, 10 * MS, empty), 10 * MS);
}

#[test]
fn a_reserved_cell_past_the_ttl_is_spent_when_it_comes_due() {
    let p = params(1000, 10, 50, 20, 50);
    let mut book = LeaseBook::default();
    let ask = RefillAsk {
        want: 3,
        lead: 100 * MS,
        long: 0,
        ..RefillAsk::default()
    };
    // Three cells conforming 88, 89 and 90 ms after the grant: past the 50 ms TTL.
    let g = Grant {
        granted: 3,
        frontier: 90 * MS as i64,
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    book.on_grant(&p, ask, g, 0);
    assert!(
        !admitted(book.take(&p, 1, 87 * MS)),
        "not before it conforms"
    );
    assert!(admitted(book.take(&p, 1, 88 * MS)));
    // The TTL counts from each cell's conform time: the last is good until 140 ms.
    assert!(admitted(book.take(&p, 1, 139 * MS)));
    assert!(admitted(book.take(&p, 1, 140 * MS)));
    assert_eq!(book.expired, 0);
}

#[test]
fn a_key_with_slack_takes_a_ttl_with_margin() {
    let p = params(100_000, 1_000, 50, 20, 500);
    let mut book = LeaseBook::default();
    for i in 0..200 {
        book.take(&p, 1, i * 2 * MS); // 10 per 20 ms: 25 per TTL
    }
    let tight = book.batch_size(&p);
    assert_eq!(
        tight,
        largest_batch(25.0, 0.005),
        "no grant seen yet: reserve"
    );
    let ask = book.wants(&p, 400 * MS).expect("nothing held");
    let full = Grant {
        granted: ask.want,
        frontier: -(9 * MS as i64), // 900 of the burst's 1 000 cells still conform now
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    book.begin(400 * MS, ask);
    book.on_grant(&p, ask, full, 400 * MS);
    // A TTL's demand plus two deviations and one: 24.9 + 2·5 + 1.
    assert_eq!(
        book.batch_size(&p),
        36,
        "slack: a TTL's traffic with margin"
    );
    // With slack a node asks for cells that conform now.
    while book.held() > 0 {
        book.take(&p, 1, 400 * MS);
    }
    assert_eq!(book.wants(&p, 400 * MS).map(|a| a.lead), Some(0));
    let ask = RefillAsk {
        want: 1,
        lead: 0,
        long: 0,
        ..RefillAsk::default()
    };
    book.begin(400 * MS, ask);
    let tight_grant = Grant {
        granted: 1,
        frontier: -(MS as i64), // 100 of 1 000
        busy: 1_000,
        long: false,
        ..Grant::default()
    };
    book.on_grant(&p, ask, tight_grant, 400 * MS);
    assert_eq!(book.batch_size(&p), tight, "no slack: back to reserving");
}

/// A grant that says the key's grant rate is low (`busy` under 750 per mille) makes even a
/// thin node reserve a TTL of its demand up to the horizon once it holds nothing, with no
/// request waiting; at the full rate the same node asks only for a waiting request, for
/// cells that conform now. The verdict lasts four TTLs.
#[test]
fn a_calm_key_lets_a_thin_node_reserve_a_ttl() {
    // Burst 20: a calm batch is capped under half the burst (`size::calm_cap`), over 7.
    let p = params(1000, 20, 50, 20, 50);
    // One request every 10 ms: 5 per TTL, below the reservation threshold.
    let thin = |busy: u32| {
        let mut book = LeaseBook::default();
        for i in 0..40 {
            book.take(&p, 1, i * 10 * MS);
        }
        let now = 400 * MS;
        assert!(!admitted(book.take(&p, 1, now)), "nothing held yet");
        let ask = book.wants(&p, now).expect("a request waits");
        book.begin(now, ask);
        // The bucket empty after the grant: no slack either way.
        let g = Grant {
            granted: 1,
            frontier: 0,
            busy,
            long: false,
            ..Grant::default()
        };
        book.on_grant(&p, ask, g, now);
        assert!(admitted(book.retake(&p, 1, now)));
        (book, ask)
    };
    let (busy_book, first) = thin(1_000);
    assert_eq!(first.lead, 0, "not calm before a grant says so");
    assert_eq!(busy_book.wants(&p, 400 * MS), None, "no request waiting");

    let (calm_book, _) = thin(700);
    let ask = calm_book
        .wants(&p, 400 * MS)
        .expect("calm: holding nothing, ask");
    assert_eq!(ask.lead, 100 * MS, "up to the horizon");
    assert!(
        (5..=7).contains(&ask.want),
        "a TTL of demand and one: {ask:?}"
    );
    assert!(calm_book.calm(&p, 400 * MS + 199 * MS));
    assert!(!calm_book.calm(&p, 400 * MS + 200 * MS), "four TTLs later");
}

/// A node whose TTL of demand does not fit in one batch never asks as calm, however low the
/// key's grant rate: calm's one call at a time, made only once the node holds nothing,
/// would make its requests wait on every batch (`benches/load.sh`'s lease row, 50 000
/// requests a second on one key with `lease_max` 50, fell from 0.96 to 0.82 of local).
#[test]
fn a_calm_key_leaves_a_busy_node_its_refills() {
    let p = params(1000, 10, 50, 20, 20);
    let mut book = LeaseBook::default();
    // One request a millisecond: 50 per TTL, in batches of at most 20.
    for i in 0..400 {
        book.take(&p, 1, i * MS);
    }
    let now = 400 * MS;
    let ask = book
        .wants(&p, now)
        .expect("a busy node holding nothing asks");
    book.begin(now, ask);
    let g = Grant {
        granted: 1,
        frontier: 0,
        busy: 100,
        long: false,
        ..Grant::default()
    };
    book.on_grant(&p, ask, g, now);
    assert!(
        !book.calm(&p, now),
        "50 requests per TTL do not fit in batches of 20"
    );
}
