//! The store's scripts against a real Redis: `lease.lua` grants what the Rust grant rule
//! (`grant.rs`, the memory store's and the simulator's coordinator) grants for the same
//! state and time, keeps its state in the format `check.lua`'s GCRA keeps (so either can
//! read a key the other wrote) with a TTL until the key is full again. (Its grant rate:
//! `lease_rate.rs`; `membership.lua`: `membership_script.rs`.)

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate::limit::central::CHECK_LUA;
use tollgate::limit::clock::Nanos;
use tollgate::limit::lease::LEASE_LUA;
use tollgate::limit::lease::{Grant, Holds, grant};
use tollgate::limit::lease::{LeaseParams, RefillAsk};

/// 1000/s: one cell every 1000 µs.
const INTERVAL_US: i64 = 1_000;
const BURST: u32 = 10;
/// `burst · T`.
const TOLERANCE_US: i64 = BURST as i64 * INTERVAL_US;
/// `lease_ttl` (the horizon is two of them).
const LEAD_US: i64 = 50_000;

/// The grant-rate time constant the gateway sends for [`params`]: four TTLs.
const SPAN_US: i64 = 4 * LEAD_US;

/// A quota as lease.lua takes it: `T` and `τ` in µs.
#[derive(Debug, Clone, Copy)]
struct Quota {
    interval_us: i64,
    tolerance_us: i64,
}

/// 1000/s, burst 10: the policy the Rust rule is compared on.
const FAST: Quota = Quota {
    interval_us: INTERVAL_US,
    tolerance_us: TOLERANCE_US,
};
/// 1/s, burst 10: keys that live for seconds, so checks that read them back have no
/// race with their expiry however slow the test machine is.
const SLOW: Quota = Quota {
    interval_us: 1_000_000,
    tolerance_us: 10_000_000,
};

/// The Rust side of the same policy: 1000/s, burst 10, lease_ttl 50 ms (horizon 100 ms).
fn params() -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(1_000),
        Duration::from_secs(1),
        nz(BURST),
        Duration::from_micros(LEAD_US as u64),
        Duration::from_millis(20),
        nz(50),
    )
    .expect("a valid quota")
}

/// One `lease.lua` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reply {
    granted: u32,
    frontier_us: i64,
    now_us: i64,
    /// The key's grant rate, per mille (`Grant::busy`).
    busy: u32,
}

impl Reply {
    /// The reply as the gateway reads it (site.rs): the frontier in ns. Without the grant
    /// rate, which the Rust rule `grant` leaves to `busy` (compared apart).
    fn as_grant(self) -> Grant {
        Grant {
            granted: self.granted,
            frontier: self.frontier_us * 1_000,
            busy: 0,
            long: false,
            ..Grant::default()
        }
    }

    /// Redis TIME of the call, as the Rust rule's `now`.
    fn now_ns(self) -> Nanos {
        u64::try_from(self.now_us).expect("Redis TIME is after 1970") * 1_000
    }
}

/// `lease.lua` on the [`FAST`] quota.
async fn lease(conn: &mut MultiplexedConnection, key: &str, lead_us: i64, want: u32) -> Reply {
    lease_on(conn, key, FAST, lead_us, want).await
}

/// `lease.lua` with the gateway's arguments (site.rs).
async fn lease_on(
    conn: &mut MultiplexedConnection,
    key: &str,
    q: Quota,
    lead_us: i64,
    want: u32,
) -> Reply {
    let reply: Vec<i64> = redis::Script::new(LEASE_LUA)
        .key(key)
        .key(format!("{key}:busy"))
        .arg("lease")
        .arg(q.interval_us)
        .arg(q.tolerance_us)
        .arg(lead_us)
        .arg(want)
        .arg(SPAN_US)
        .invoke_async(conn)
        .await
        .expect("lease.lua runs");
    match reply[..] {
        [granted, frontier_us, now_us, busy, 0, 0] => Reply {
            granted: u32::try_from(granted).expect("granted is a cell count"),
            frontier_us,
            now_us,
            busy: u32::try_from(busy).expect("busy is not negative"),
        },
        _ => {
            panic!("lease.lua replied {reply:?}, not {{granted, frontier_us, now_us, busy, 0, 0}}")
        }
    }
}

/// The stored state: the GCRA `tat` in µs, as `"%.3f"` (what check.lua writes for gcra).
fn stored_tat(redis: &RedisServer, key: &str) -> f64 {
    parse_tat(key, &redis.cli(&["GET", key]))
}

fn parse_tat(key: &str, raw: &str) -> f64 {
    let (whole, frac) = raw
        .split_once('.')
        .unwrap_or_else(|| panic!("{key} holds `{raw}`, not a %.3f float"));
    assert!(
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && frac.len() == 3
            && frac.bytes().all(|b| b.is_ascii_digit()),
        "{key} holds `{raw}`, not a %.3f float of µs"
    );
    raw.parse().expect("a float")
}

/// `GET` and `PTTL` of `key` in one round trip.
async fn state_and_pttl(conn: &mut MultiplexedConnection, key: &str) -> (Option<String>, i64) {
    redis::pipe()
        .get(key)
        .pttl(key)
        .query_async(conn)
        .await
        .expect("GET and PTTL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_key_grants_the_burst_plus_the_horizon_as_the_rust_rule_does() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    let ask = RefillAsk {
        want: 100,
        lead: LEAD_US as Nanos * 1_000,
        long: 0,
        ..RefillAsk::default()
    };

    let started = Instant::now();
    let first = lease(&mut conn, "k", LEAD_US, 100).await;
    let (raw, ttl_ms) = state_and_pttl(&mut conn, "k").await;
    let elapsed_ms = started.elapsed().as_millis() as i64;
    // burst (10) conform now, then one per ms up to 50 ms: 60, the last conforming at 50 ms.
    assert_eq!(
        (first.granted, first.frontier_us),
        (60, 50_000),
        "{first:?}"
    );
    let (tat, rust) = grant(&p, None, &mut Holds::default(), ask, first.now_ns());
    assert_eq!(rust, first.as_grant(), "the Rust rule at the same now");
    assert_eq!(rust.frontier, 50_000_000);

    // State: tat = now + 60 cells, in the format check.lua's GCRA keeps, and a TTL until
    // the key is full again: (tat - now) ms + 2 = 62 ms, minus what has passed since. (A
    // machine that stalled past that finds the key gone, as it should be.)
    match raw {
        Some(raw) => {
            assert_eq!(parse_tat("k", &raw), (first.now_us + 60_000) as f64);
            assert!(ttl_ms > 0, "no TTL on the key: PTTL {ttl_ms}");
            assert!(
                (62 - elapsed_ms - 1..=62).contains(&ttl_ms),
                "PTTL {ttl_ms} ms, wanted about 62 ms ({elapsed_ms} ms after the call)"
            );
        }
        None => assert!(
            elapsed_ms >= 60,
            "the key vanished {elapsed_ms} ms after the grant, before its 62 ms TTL"
        ),
    }

    // Asked again at once: nothing new conforms within the horizon unless Redis's clock
    // moved a whole interval (1 ms) since, and then one cell per interval; the frontier
    // stays at the last cell granted. (After 60 ms the key is full again: 60 cells anew.)
    let second = lease(&mut conn, "k", LEAD_US, 100).await;
    let moved_us = second.now_us - first.now_us;
    assert!(moved_us >= 0, "Redis TIME went back: {first:?} {second:?}");
    let expected = (moved_us / INTERVAL_US).min(60);
    assert_eq!(
        i64::from(second.granted),
        expected,
        "{second:?} {moved_us} µs later"
    );
    if moved_us < INTERVAL_US {
        assert_eq!(second.granted, 0, "{second:?}");
    }
    let expected = if moved_us < 60_000 {
        50_000 - moved_us % INTERVAL_US
    } else {
        50_000
    };
    assert_eq!(
        second.frontier_us, expected,
        "{second:?} {moved_us} µs later"
    );
    assert!(
        (49_000..=50_000).contains(&second.frontier_us),
        "{second:?}: frontier not close to 50 ms"
    );
    let (_, rust) = grant(&p, Some(tat), &mut Holds::default(), ask, second.now_ns());
    assert_eq!(rust, second.as_grant(), "the Rust rule on the same state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_lives_until_it_is_full_again() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    // 1/s, burst 10: ten cells now, tat 10 s ahead, so PX 10 002 ms.
    let started = Instant::now();
    let first = lease_on(&mut conn, "slow-ttl", SLOW, 0, 100).await;
    let ttl_ms = pttl(&redis, "slow-ttl");
    let elapsed_ms = started.elapsed().as_millis() as i64;
    assert_eq!((first.granted, first.frontier_us), (BURST, 0), "{first:?}");
    assert_eq!(
        stored_tat(&redis, "slow-ttl"),
        (first.now_us + 10_000_000) as f64
    );
    assert!(
        (10_002 - elapsed_ms - 1..=10_002).contains(&ttl_ms),
        "PTTL {ttl_ms} ms, wanted about 10002 ms ({elapsed_ms} ms after the call)"
    );

    // A call that grants nothing writes nothing: neither the state nor its TTL moves.
    let denied = lease_on(&mut conn, "slow-ttl", SLOW, 0, 100).await;
    if denied.now_us - first.now_us < SLOW.interval_us {
        assert_eq!(denied.granted, 0, "{denied:?}");
        assert_eq!(
            stored_tat(&redis, "slow-ttl"),
            (first.now_us + 10_000_000) as f64
        );
        let after = pttl(&redis, "slow-ttl");
        assert!(after <= ttl_ms, "PTTL went from {ttl_ms} to {after} ms");
    }
}

fn pttl(redis: &RedisServer, key: &str) -> i64 {
    let out = redis.cli(&["PTTL", key]);
    out.parse()
        .unwrap_or_else(|e| panic!("PTTL {key} replied `{out}`: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_zero_grants_exactly_the_burst_then_nothing() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    let ask = RefillAsk {
        want: 1_000,
        lead: 0,
        long: 0,
        ..RefillAsk::default()
    };

    let first = lease(&mut conn, "slow", 0, 1_000).await;
    // A full key: exactly `burst` cells conform now, the last of them at now (frontier 0).
    assert_eq!((first.granted, first.frontier_us), (BURST, 0), "{first:?}");
    let (tat, rust) = grant(&p, None, &mut Holds::default(), ask, first.now_ns());
    assert_eq!(rust, first.as_grant(), "the Rust rule at the same now");

    let second = lease(&mut conn, "slow", 0, 1_000).await;
    let moved_us = second.now_us - first.now_us;
    let (_, rust) = grant(&p, Some(tat), &mut Holds::default(), ask, second.now_ns());
    assert_eq!(
        rust,
        second.as_grant(),
        "the Rust rule on the same state, {moved_us} µs later"
    );
    // Only cells that conform now: one per whole interval Redis's clock moved (none at
    // once), at most the burst.
    assert_eq!(
        i64::from(second.granted),
        (moved_us / INTERVAL_US).min(i64::from(BURST)),
        "{second:?} {moved_us} µs later"
    );
    if moved_us < INTERVAL_US {
        assert_eq!(second.granted, 0, "{second:?}");
    }

    // A small want is granted as asked, never more.
    let small = lease(&mut conn, "small", 0, 3).await;
    assert_eq!((small.granted, small.frontier_us), (3, -7_000), "{small:?}");
    let (_, rust) = grant(
        &p,
        None,
        &mut Holds::default(),
        RefillAsk {
            want: 3,
            lead: 0,
            long: 0,
            ..RefillAsk::default()
        },
        small.now_ns(),
    );
    assert_eq!(rust, small.as_grant());
}

/// Reservations past the TTL (the horizon is two TTLs): the script grants, for the lead the
/// gateway sends, exactly what the Rust rule grants, on a fresh key and on the state it
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_past_the_ttl_grants_as_the_rust_rule_does() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = params();
    let lead_us = 2 * LEAD_US;
    let ask = RefillAsk {
        want: 500,
        lead: lead_us as Nanos * 1_000,
        long: 0,
        ..RefillAsk::default()
    };
    let first = lease(&mut conn, "far", lead_us, 500).await;
    // burst (10) conform now, then one per ms up to 100 ms: 110, the last at 100 ms.
    assert_eq!(
        (first.granted, first.frontier_us),
        (110, 100_000),
        "{first:?}"
    );
    let (tat, rust) = grant(&p, None, &mut Holds::default(), ask, first.now_ns());
    assert_eq!(rust, first.as_grant(), "the Rust rule at the same now");
    let second = lease(&mut conn, "far", lead_us, 500).await;
    let (_, rust) = grant(&p, Some(tat), &mut Holds::default(), ask, second.now_ns());
    assert_eq!(rust, second.as_grant(), "the Rust rule on the same state");
}

/// `check.lua`'s gcra decision for one cell of the [`SLOW`] quota: (admitted, now_us).
async fn central_check(conn: &mut MultiplexedConnection, key: &str) -> (bool, i64) {
    let reply: Vec<i64> = redis::Script::new(CHECK_LUA)
        .key(key)
        .arg("check")
        // gcra, limit, period_us, burst, cost, max_delay_us, mode (enforce)
        .arg(&[1, 1, 1_000_000, i64::from(BURST), 1, 0, 1][..])
        .invoke_async(conn)
        .await
        .expect("check.lua runs");
    // 6 integers for the key, then now_us.
    assert_eq!(reply.len(), 7, "check.lua replied {reply:?}");
    (reply[0] == 1, reply[6])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_and_central_gcra_read_each_others_keys() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;

    // 1/s, burst 10 on both sides (so the keys outlive the test's reads).
    // A central admission spends one cell of a full key; a lease then gets the other nine.
    let (admitted, checked_at) = central_check(&mut conn, "shared").await;
    assert!(admitted);
    assert_eq!(
        stored_tat(&redis, "shared"),
        (checked_at + 1_000_000) as f64
    );
    let leased = lease_on(&mut conn, "shared", SLOW, 0, 100).await;
    let moved = (leased.now_us - checked_at) / SLOW.interval_us;
    assert_eq!(
        i64::from(leased.granted),
        (9 + moved).min(10),
        "{leased:?} after one central cell"
    );

    // A key the lease emptied: central denies until Redis's clock has moved an interval.
    let emptied = lease_on(&mut conn, "emptied", SLOW, 0, 100).await;
    assert_eq!(emptied.granted, BURST);
    let (admitted, checked_at) = central_check(&mut conn, "emptied").await;
    assert_eq!(
        admitted,
        checked_at - emptied.now_us >= SLOW.interval_us,
        "central on a leased-out key, {} µs after the lease",
        checked_at - emptied.now_us
    );
}
