//! What `lease.lua` grants and how long its key lives, against the Rust grant rule.

use super::*;

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
