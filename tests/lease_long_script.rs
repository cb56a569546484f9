//! `lease.lua`'s long cells (`limit/lease/hold.rs`) against a real Redis: granted only
//! under the grant-rate threshold, the same cells and frontier as the Rust rule, holds kept
//! in `KEYS[3]` that cap the next grants as the Rust `Holds` do, and that key gone when the
//! last hold ends.

mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate::limit::clock::Nanos;
use tollgate::limit::lease::{Grant, Holds, LEASE_LUA, LeaseParams, RefillAsk, grant};

/// 1/s, burst 20, lease_ttl 1 s: slow enough that nothing refills between calls however
/// slow the machine (a cell per second).
const INTERVAL_US: i64 = 1_000_000;
const BURST: u32 = 20;
const TTL_US: i64 = 1_000_000;

fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(1),
        Duration::from_secs(1),
        nz(BURST),
        Duration::from_micros(TTL_US as u64),
        Duration::from_millis(250),
        nz(50),
    )
    .expect("valid")
}

/// `granted, frontier_us, now_us, busy, long`.
async fn lease(conn: &mut MultiplexedConnection, want: u32, long: u32) -> Vec<i64> {
    redis::Script::new(LEASE_LUA)
        .key("k")
        .key("~busy:k")
        .key("~hold:k")
        .arg("lease")
        .arg(INTERVAL_US)
        .arg(i64::from(BURST) * INTERVAL_US)
        .arg(0)
        .arg(want)
        .arg(4 * TTL_US)
        .arg(long)
        .arg(3 * TTL_US) // held: a life of four TTLs less one
        .arg(BURST / 8)
        .arg(800)
        .invoke_async(conn)
        .await
        .expect("lease.lua runs")
}

fn as_grant(r: &[i64]) -> Grant {
    Grant {
        granted: u32::try_from(r[0]).expect("a count"),
        frontier: r[1] * 1_000,
        busy: 0,
        long: r[4] == 1,
    }
}

fn now_ns(r: &[i64]) -> Nanos {
    u64::try_from(r[2]).expect("after 1970") * 1_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_cells_are_granted_and_held_as_the_rust_rule_does() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    // A key with no grant rate counts as busy: an ordinary grant.
    let first = lease(&mut conn, 1, 6).await;
    assert_eq!((first[0], first[4]), (1, 0), "{first:?}");
    // A quiet key (grant rate 0 per mille): six long cells, conforming now.
    redis.cli(&["SET", "~busy:k", &format!("0:{}", first[2])]);
    let long = lease(&mut conn, 1, 6).await;
    assert_eq!((long[0], long[4]), (6, 1), "{long:?}");
    let mut holds = Holds::default();
    let ask = RefillAsk {
        want: 1,
        lead: 0,
        long: 6,
    };
    let one = RefillAsk { long: 0, ..ask };
    let (tat, _) = grant(&p, None, &mut holds, one, now_ns(&first));
    let (tat, rust) = grant(&p, Some(tat), &mut holds, ask, now_ns(&long));
    assert_eq!(rust, as_grant(&long), "the Rust rule on the same state");
    assert_eq!(holds.held(), 6);
    let stored = redis.cli(&["GET", "~hold:k"]);
    assert_eq!(
        stored.trim(),
        format!("{}.000:6", long[2] + 3 * TTL_US),
        "the hold: until its life less a TTL"
    );
    let pttl: i64 = redis
        .cli(&["PTTL", "~hold:k"])
        .trim()
        .parse()
        .expect("PTTL");
    assert!((2_900..=3_002).contains(&pttl), "PTTL {pttl}");
    // The burst less the one cell and the six held: 13 conform, not 19.
    let ordinary = lease(&mut conn, 20, 0).await;
    assert_eq!((ordinary[0], ordinary[4]), (13, 0), "{ordinary:?}");
    let ask = RefillAsk {
        want: 20,
        lead: 0,
        long: 0,
    };
    let (_, rust) = grant(&p, Some(tat), &mut holds, ask, now_ns(&ordinary));
    assert_eq!(
        rust,
        as_grant(&ordinary),
        "the cap as the Rust Holds apply it"
    );
}

/// Two long grants in a row keep one hold (they end within a sixteenth of a hold of each
/// other), ending at the later one's end, of both grants' cells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_grants_close_together_keep_one_hold() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let first = lease(&mut conn, 1, 0).await;
    redis.cli(&["SET", "~busy:k", &format!("0:{}", first[2])]);
    let a = lease(&mut conn, 1, 3).await;
    let b = lease(&mut conn, 1, 3).await;
    assert_eq!((a[4], b[4]), (1, 1), "{a:?} {b:?}");
    let stored = redis.cli(&["GET", "~hold:k"]);
    assert_eq!(stored.trim(), format!("{}.000:6", b[2] + 3 * TTL_US));
}

/// No room: a long ask the key cannot leave an eighth of its burst after gets ordinary
/// cells (and no hold is written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_ask_without_room_gets_ordinary_cells() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let first = lease(&mut conn, 10, 0).await;
    assert_eq!(first[0], 10);
    redis.cli(&["SET", "~busy:k", &format!("0:{}", first[2])]);
    // 10 left; a long grant of 9 would leave 1 < 20 / 8 = 2.
    let r = lease(&mut conn, 3, 9).await;
    assert_eq!((r[0], r[4]), (3, 0), "{r:?}");
    assert_eq!(redis.cli(&["EXISTS", "~hold:k"]).trim(), "0");
}

/// A hold that has ended is dropped at the next call, and with it the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_hold_is_dropped() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let first = lease(&mut conn, 1, 0).await;
    // A hold that ended a second ago, of 5 cells, and one still running.
    let now = first[2];
    let holds = format!("{}:5,{}:2", now - 1_000_000, now + 10_000_000);
    redis.cli(&["SET", "~hold:k", &holds]);
    let r = lease(&mut conn, 0, 0).await;
    assert_eq!(r[0], 0);
    let left = redis.cli(&["GET", "~hold:k"]);
    assert_eq!(left.trim(), format!("{}.000:2", now + 10_000_000));
    redis.cli(&["SET", "~hold:k", &format!("{}:2", now - 1)]);
    lease(&mut conn, 0, 0).await;
    assert_eq!(redis.cli(&["EXISTS", "~hold:k"]).trim(), "0");
}
