//! `lease.lua` and the central GCRA reading each other's keys.

use super::*;

/// `check.lua`'s gcra decision for one cell of the [`SLOW`] quota: (admitted, now_us).
async fn central_check(conn: &mut MultiplexedConnection, key: &str) -> (bool, i64) {
    let crate::common::words::Words(reply) = redis::Script::new(CHECK_LUA)
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
