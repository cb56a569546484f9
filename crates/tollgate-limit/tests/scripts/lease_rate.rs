//! `lease.lua`'s second value per key against a real Redis: the key's grant rate
//! (`Grant::busy`, which makes a node calm, `lease/calm.rs`) agrees with the Rust average
//! (`grant.rs` `busy`, the memory store's and the simulator's) call after call.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate_limit::clock::Nanos;
use tollgate_limit::lease::{GrantRate, LEASE_LUA, LeaseParams, busy, busy_span};

/// 1000/s, burst 10, lease_ttl 50 ms: T = 1 000 µs, τ = 10 000 µs.
const INTERVAL_US: i64 = 1_000;
const TOLERANCE_US: i64 = 10_000;
/// The grant-rate span the gateway sends for [`params`]: four TTLs.
const SPAN_US: i64 = 200_000;

fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(1_000),
        Duration::from_secs(1),
        nz(10),
        Duration::from_millis(50),
        Duration::from_millis(20),
        nz(50),
    )
    .expect("a valid quota")
}

/// One reply: granted, now (ns), busy.
#[derive(Debug)]
struct Reply {
    granted: u32,
    now_us: i64,
    busy: u32,
}

impl Reply {
    fn now_ns(&self) -> Nanos {
        u64::try_from(self.now_us).expect("Redis TIME is after 1970") * 1_000
    }
}

/// `lease.lua` as the gateway calls it (`refill.rs`): the key, its rate key, cells that
/// conform now (`lead` 0).
async fn lease(conn: &mut MultiplexedConnection, key: &str, want: u32) -> Reply {
    let reply: Vec<i64> = redis::Script::new(LEASE_LUA)
        .key(key)
        .key(format!("{key}:busy"))
        .arg("lease")
        .arg(INTERVAL_US)
        .arg(TOLERANCE_US)
        .arg(0)
        .arg(want)
        .arg(SPAN_US)
        .invoke_async(conn)
        .await
        .expect("lease.lua runs");
    match reply[..] {
        [
            granted,
            _frontier,
            now_us,
            busy,
            _long,
            _returnable,
            _demand,
        ] => Reply {
            granted: u32::try_from(granted).expect("a cell count"),
            now_us,
            busy: u32::try_from(busy).expect("not negative"),
        },
        _ => panic!("lease.lua replied {reply:?}, not seven values"),
    }
}

fn pttl(redis: &RedisServer, key: &str) -> i64 {
    let out = redis.cli(&["PTTL", key]);
    out.parse()
        .unwrap_or_else(|e| panic!("PTTL {key} replied `{out}`: {e}"))
}

/// The grant rate (`Grant::busy`, what makes a node generous): the script's agrees with the
/// Rust average (`busy.rs` `busy`) call after call, sees a young key over its first TTL,
/// is written only with a grant, and is forgotten four spans after the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_rate_agrees_with_the_rust_average() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    assert_eq!(
        busy_span(&p),
        SPAN_US as Nanos * 1_000,
        "the span the test sends"
    );

    // A fresh key, as seen: the 3 cells granted over its first window, one TTL (50 cells
    // at 1 000/s): 60 per mille.
    let first = lease(&mut conn, "rate", 3).await;
    assert_eq!(first.granted, 3, "{first:?}");
    let (mut avg, rust) = busy(&p, None, 3, first.now_ns());
    assert_eq!((first.busy, rust), (60, 60), "{first:?}");
    let ttl_ms = pttl(&redis, "rate:busy");
    assert!(
        (700..=801).contains(&ttl_ms),
        "PTTL {ttl_ms} ms, wanted 801 (four spans)"
    );

    // Later calls: the decayed average, as the Rust one computes it from the same times
    // (the script keeps the count to four decimals: one per mille either way).
    for want in [5, 0, 7] {
        std::thread::sleep(Duration::from_millis(20));
        let r = lease(&mut conn, "rate", want).await;
        let (next, rust) = busy(&p, Some(avg), r.granted, r.now_ns());
        assert!(
            r.busy.abs_diff(rust) <= 1,
            "script {} Rust {rust}: {r:?}",
            r.busy
        );
        if r.granted > 0 {
            avg = next;
        }
    }

    // Without the second key (a caller that does not read the rate): 1 000, nothing written.
    let reply: Vec<i64> = redis::Script::new(LEASE_LUA)
        .key("rate-one-key")
        .arg(&["lease", "1000", "10000", "0", "3"][..])
        .invoke_async(&mut conn)
        .await
        .expect("lease.lua runs with one key");
    assert_eq!((reply[0], reply[3]), (3, 1_000), "{reply:?}");
    assert_eq!(pttl(&redis, "rate-one-key:busy"), -2, "no rate key written");

    // Nothing granted: nothing written (a key asked with no cell left keeps no average).
    let none = lease(&mut conn, "rate-none", 0).await;
    assert_eq!((none.granted, none.busy), (0, 1_000), "{none:?}");
    assert_eq!(pttl(&redis, "rate-none:busy"), -2, "no key written");
}

/// A grant-rate value of two fields (`count:at_us`, written before the average kept its
/// start) reads as an average born long ago, as it did: a gateway upgraded mid-flight sees
/// the same rate its predecessor wrote, and the next grant writes the three fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_average_written_before_its_start_was_kept_reads_as_old() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    // 200 cells over the 200 ms span at 1 000/s: the full rate, written "now".
    let time = redis.cli(&["TIME"]);
    let secs: Vec<i64> = time.lines().map(|l| l.trim().parse().unwrap()).collect();
    let now_us = secs[0] * 1_000_000 + secs[1];
    redis.cli(&[
        "SET",
        "old:busy",
        &format!("200.0000:{now_us}"),
        "PX",
        "801",
    ]);
    let r = lease(&mut conn, "old", 1).await;
    let avg = GrantRate {
        count: 200.0,
        at: now_us as Nanos * 1_000,
        born: 0,
    };
    let (_, rust) = busy(&p, Some(avg), r.granted, r.now_ns());
    assert!(
        r.busy.abs_diff(rust) <= 1 && rust > 900,
        "script {} Rust {rust}: {r:?}",
        r.busy
    );
    let written = redis.cli(&["GET", "old:busy"]);
    assert_eq!(
        written.split(':').count(),
        3,
        "rewritten as count:at:born: {written}"
    );
}
