//! A calm key as one node's book sees it (`lease/calm.rs`): the verdict's hysteresis, an
//! empty answer while the key is calm, and the cap on a calm batch. Each was a way the
//! thin node of the three-gateway bench (`benches/lease_fleet.sh`, Poisson arrivals at
//! 60 % of the limit) was denied; `tests/cli/simulate_fleet.rs` runs that shape whole.

use std::num::NonZeroU32;
use std::time::Duration;

use tollgate_limit::lease::{Grant, LeaseBook, LeaseParams, RefillAsk, Take};

const MS: u64 = 1_000_000;

/// 1 000/s, burst 10, TTL 50 ms (horizon 100 ms), target 20 ms, batches of at most 50.
fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    let ms = Duration::from_millis;
    LeaseParams::new(nz(1000), ms(1000), nz(10), ms(50), ms(20), nz(50)).expect("valid")
}

fn admitted(t: Take) -> bool {
    matches!(t, Take::Admitted { .. })
}

/// A node that saw a request every 10 ms (5 per TTL, below the reservation threshold) up
/// to 400 ms, holding nothing.
fn thin(p: &LeaseParams) -> LeaseBook {
    let mut book = LeaseBook::default();
    for i in 0..40 {
        book.take(p, 1, i * 10 * MS);
    }
    book
}

/// One answer of `granted` cells (the last conforming `frontier_ms` from now) reporting
/// `busy`, to the ask the book wants at `now` (or a one-cell ask at lead 0).
fn answer(
    book: &mut LeaseBook,
    p: &LeaseParams,
    now: u64,
    granted: u32,
    frontier_ms: i64,
    busy: u32,
) -> RefillAsk {
    let ask = book.wants(p, now).unwrap_or(RefillAsk {
        want: 1,
        lead: 0,
        long: 0,
        ..RefillAsk::default()
    });
    book.begin(now, ask);
    let g = Grant {
        granted,
        frontier: frontier_ms * MS as i64,
        busy,
        long: false,
        ..Grant::default()
    };
    book.on_grant(p, ask, g, now);
    ask
}

/// Calm from a grant rate under 750 per mille, and still calm up to 850: at 60 % of the
/// limit the rate wanders across 750, and a verdict that flipped with it sent the thin node
/// back to asking for cells that conform now. Past 850 it is not calm until under 750.
#[test]
fn a_calm_key_stays_calm_until_its_rate_reaches_850() {
    let p = params();
    let mut book = thin(&p);
    let mut now = 400 * MS;
    let mut verdict = |busy: u32| {
        book.take(&p, 1, now);
        answer(&mut book, &p, now, 1, 0, busy);
        let calm = book.calm(&p, now);
        now += 10 * MS;
        calm
    };
    assert!(!verdict(800), "not calm before a grant under 750 said so");
    assert!(verdict(700));
    assert!(verdict(800), "calm stays calm under 850");
    assert!(verdict(849));
    assert!(!verdict(850), "and leaves at 850");
    assert!(!verdict(800), "not calm again before under 750");
    assert!(verdict(740));
}

/// An empty answer past the node's reach while the key is calm (the other nodes' calm
/// reservations hold the cells that conform now) keeps the node calm, and a node that
/// was calm lately comes back when those cells have come due, not after the two-TTL
/// back-off meant for a node the fleet has reserved past under overload.
#[test]
fn an_empty_answer_of_a_calm_key_is_not_an_overload() {
    let p = params();
    let mut book = thin(&p);
    let now = 400 * MS;
    assert!(!admitted(book.take(&p, 1, now)));
    answer(&mut book, &p, now, 1, 0, 700);
    assert!(admitted(book.retake(&p, 1, now)));
    assert!(book.calm(&p, now));

    // Holding nothing, it reserves up to the horizon; everything there is taken.
    let later = now + 5 * MS;
    let ask = answer(&mut book, &p, later, 0, 120, 800);
    assert_eq!(ask.lead, 100 * MS, "a calm ask");
    assert!(
        book.calm(&p, later + 26 * MS),
        "still calm after the empty answer"
    );
    assert!(
        book.wants(&p, later + 26 * MS).is_some(),
        "back once the cells it wants past the reservations are in its reach (25 ms)"
    );

    // Out of calm (a grant at 900), asking for cells that conform now: the same kind of
    // answer sends it away only until those reserved cells have come due.
    let mut book = thin(&p);
    answer(&mut book, &p, now, 1, 0, 700);
    assert!(admitted(book.take(&p, 1, now)));
    answer(&mut book, &p, now + MS, 1, 0, 900);
    assert!(admitted(book.take(&p, 1, now + MS)));
    assert!(!book.calm(&p, now + MS));
    let t = now + 10 * MS;
    assert!(!admitted(book.take(&p, 1, t)));
    let ask = answer(&mut book, &p, t, 0, 30, 900);
    assert_eq!(ask.lead, 0, "not calm: cells that conform now");
    assert!(!admitted(book.take(&p, 1, t + 32 * MS)));
    assert!(
        book.wants(&p, t + 32 * MS).is_some(),
        "back after 31 ms, not the 100 ms back-off"
    );
}

/// A calm batch is a TTL of the node's demand, under half the key's burst: where a TTL
/// holds more than the burst, nodes refilling together took every cell that conforms now
/// and the last one's request was denied.
#[test]
fn a_calm_batch_is_at_most_half_the_burst() {
    // The fleet bench's key: 100/s, burst 20, TTL 500 ms; a node at 30 requests a second.
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    let ms = Duration::from_millis;
    let p = LeaseParams::new(nz(100), ms(1000), nz(20), ms(500), ms(20), nz(20)).expect("valid");
    let mut book = LeaseBook::default();
    let step = 1_000 * MS / 30;
    for i in 0..90 {
        book.take(&p, 1, i * step);
    }
    let now = 90 * step;
    answer(&mut book, &p, now, 1, 0, 600);
    book.take(&p, 1, now);
    assert!(book.calm(&p, now));
    let ask = book.wants(&p, now).expect("calm, holding nothing: ask");
    assert_eq!(ask.lead, 1_000 * MS, "up to the horizon");
    assert_eq!(
        ask.want, 9,
        "under half the burst, not a TTL of demand (16)"
    );
}
