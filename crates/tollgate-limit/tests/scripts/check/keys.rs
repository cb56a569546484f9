//! What `check.lua` does with keys it did not write or that outlive a request: foreign
//! values, stranded and refunded concurrency slots, costs of thousands of cells.

use super::*;

/// A value another algorithm wrote (the policy changed algorithm during a rolling deploy)
/// is a full key for the new one, in every direction, and is replaced on the first spend;
/// junk never fails a call. (gcra and leaky_bucket share one format, a time, and read it as
/// such: that pair only has to answer.)
#[tokio::test]
async fn a_foreign_value_counts_as_a_full_key() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let algs = [
        GCRA,
        TOKEN_BUCKET,
        SLIDING_WINDOW,
        LEAKY_BUCKET,
        CONCURRENCY,
    ];
    let params = |alg| Params {
        alg,
        limit: 5,
        period_us: 3_600_000_000,
        burst: 5,
        max_delay_us: 3_600_000_000,
    };
    for (i, &writer) in algs.iter().enumerate() {
        for &reader in algs.iter().filter(|&&a| a != writer) {
            let key = format!("k{i}:{reader}");
            check(&mut conn, &key, params(writer), 1, "w").await;
            let r = script(&mut conn, "check", &key, params(reader), 1, "r")
                .await
                .unwrap_or_else(|e| panic!("{reader} reading {writer}'s value fails: {e}"));
            if [writer, reader] == [GCRA, LEAKY_BUCKET] || [writer, reader] == [LEAKY_BUCKET, GCRA]
            {
                // One format, a time in µs (the next free moment; lease.lua shares it):
                // read as the other's next free moment, which the rate bounds.
                continue;
            }
            let fresh_key = format!("fresh{i}:{reader}");
            let fresh = check(&mut conn, &fresh_key, params(reader), 1, "f").await;
            assert_eq!(r[0], 1, "{reader} reading {writer}'s value admits: {r:?}");
            assert_eq!(
                r[2] as u64, fresh.remaining,
                "{reader} reading {writer}'s value is fresh: {r:?}"
            );
            // The spend replaced the value: the next call reads its own state.
            let again = check(&mut conn, &key, params(reader), 1, "r2").await;
            assert!(
                again.admitted && again.remaining < fresh.remaining,
                "{reader}: {again:?}"
            );
        }
    }
    for junk in ["nan", "inf", "1:2:3:4", "", "::", "abc"] {
        redis.cli(&["SET", "junk", junk]);
        for &alg in &algs {
            let r = script(&mut conn, "check", "junk", params(alg), 1, "j").await;
            assert!(r.is_ok(), "{alg} on `{junk}`: {r:?}");
            redis.cli(&["SET", "junk", junk]);
            let r = script(&mut conn, "refund", "junk", params(alg), 1, "j").await;
            assert!(r.is_ok(), "refund {alg} on `{junk}`: {r:?}");
        }
    }
}

/// A gateway that crashed holding a slot never releases it; other requests keep the key
/// busy the whole time. The stranded slot still expires on its own after its hold, while
/// slots that are acquired and released keep working.
#[tokio::test]
async fn a_stranded_concurrency_slot_expires_on_a_busy_key() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = Params {
        alg: CONCURRENCY,
        limit: 2,
        period_us: 1_000_000, // hold a slot 1 s (the gateway holds 5 minutes)
        burst: 1,
        max_delay_us: 0,
    };
    assert!(check(&mut conn, "busy", p, 1, "crashed").await.admitted);
    for i in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let slot = format!("busy{i}");
        let r = check(&mut conn, "busy", p, 1, &slot).await;
        assert!(r.admitted, "one slot of two is free: {r:?}");
        release(&mut conn, "busy", p, 1, &slot).await;
    }
    // 1.5 s later the crashed gateway's slot is gone: both slots are free again.
    let a = check(&mut conn, "busy", p, 1, "a").await;
    let b = check(&mut conn, "busy", p, 1, "b").await;
    assert!(
        a.admitted && b.admitted,
        "stranded slot expired: {a:?} {b:?}"
    );
    assert_eq!(b.remaining, 0);
    assert!(!check(&mut conn, "busy", p, 1, "c").await.admitted);
    // A release removes exactly its own slot.
    release(&mut conn, "busy", p, 1, "a").await;
    assert_eq!(redis.cli(&["ZCARD", "busy"]), "1");
    let pttl: u64 = redis.cli(&["PTTL", "busy"]).parse().unwrap();
    assert!(
        (1..=1_002).contains(&pttl),
        "the key lives as long as its newest slot: {pttl}"
    );
}

/// check.lua on a gcra key `g` (limit 1 per hour) and a concurrency key `s` (limit 2).
async fn gcra_and_slot(conn: &mut MultiplexedConnection, op: &str, slot: &str) -> Vec<i64> {
    let mut inv = SCRIPT.key("g");
    inv.key("s").arg(op);
    if op == "refund" {
        inv.key(fresh_marker()).arg(MARKER_MS);
    }
    inv.arg(&[GCRA, 1.0, 3.6e9, 1.0, 1.0, 0.0, 1.0][..])
        .arg("-")
        .arg(&[CONCURRENCY, 2.0, 0.0, 1.0, 1.0, 0.0, 1.0][..])
        .arg(slot)
        .invoke_async::<crate::common::words::Words>(conn)
        .await
        .expect("check.lua runs")
        .0
}

/// All or nothing holds for slots too: a request another key denies takes no slot, and a
/// refund (cluster reserve-and-refund) removes exactly the refunded acquisition's slot.
#[tokio::test]
async fn a_denied_request_takes_no_slot_and_a_refund_removes_its_own() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let first = gcra_and_slot(&mut conn, "check", "one").await;
    // 6 integers per key: key 2's admitted and committed are at 6 and 7.
    assert_eq!((first[1], first[7]), (1, 1), "both spent: {first:?}");
    let denied = gcra_and_slot(&mut conn, "check", "two").await;
    assert_eq!(
        (denied[0], denied[6], denied[7]),
        (0, 1, 0),
        "gcra denies, no slot: {denied:?}"
    );
    assert_eq!(redis.cli(&["ZRANGE", "s", "0", "-1"]), "one#1");
    gcra_and_slot(&mut conn, "refund", "one").await;
    assert_eq!(
        redis.cli(&["EXISTS", "s"]),
        "0",
        "the refunded slot is gone"
    );
}

/// A concurrency cost of thousands of cells (one sorted-set member each) is held and
/// released whole: Lua cannot `unpack` that many arguments at once, so the script adds and
/// removes the members in batches.
#[tokio::test]
async fn a_concurrency_cost_of_thousands_of_cells_is_held_and_released() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = Params {
        alg: CONCURRENCY,
        limit: 10_000,
        period_us: 0,
        burst: 10_000,
        max_delay_us: 0,
    };
    let r = check(&mut conn, "big:slots", p, 5_000, "s1").await;
    assert!(r.admitted, "{r:?}");
    assert_eq!(redis.cli(&["ZCARD", "big:slots"]), "5000");
    assert!(!check(&mut conn, "big:slots", p, 5_001, "s2").await.admitted);
    release(&mut conn, "big:slots", p, 5_000, "s1").await;
    assert_eq!(redis.cli(&["ZCARD", "big:slots"]), "0");
}
