//! `membership.lua` against a real Redis: it counts joins and leaves, drops members whose
//! TTL has passed, tells a member about others that share its node id, and says whether the
//! member was still in the set (what lets a node refuse a count the store lost).

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate_limit::membership::MEMBERSHIP_LUA;

/// `membership.lua` as membership.rs calls it: the op label, then join/leave, member,
/// ttl_ms; returns (members, other live members with the same node id, intact).
async fn membership_reply(
    conn: &mut MultiplexedConnection,
    op: &str,
    id: &str,
    ttl_ms: u64,
) -> (i64, i64, i64) {
    let reply: Vec<i64> = redis::Script::new(MEMBERSHIP_LUA)
        .key("members")
        .arg("membership")
        .arg(op)
        .arg(id)
        .arg(ttl_ms)
        .invoke_async(conn)
        .await
        .expect("membership.lua runs");
    match reply[..] {
        [n, twins, intact] => (n, twins, intact),
        _ => panic!("membership.lua replied {reply:?}, not {{members, twins, intact}}"),
    }
}

async fn membership_twins(
    conn: &mut MultiplexedConnection,
    op: &str,
    id: &str,
    ttl_ms: u64,
) -> (i64, i64) {
    let (n, twins, _) = membership_reply(conn, op, id, ttl_ms).await;
    (n, twins)
}

/// A beat says whether its member was in the set, unexpired, before it: not on a first
/// beat, nor after the set was lost (a Redis restarted without persistence) or the member
/// expired (a store stalled past its TTL); a node does not lower N on such a beat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beat_says_whether_its_member_was_still_there() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let intact = |r: (i64, i64, i64)| r.2;
    assert_eq!(
        membership_reply(&mut conn, "join", "a#1", 30_000).await,
        (1, 0, 0)
    );
    assert_eq!(
        membership_reply(&mut conn, "join", "b#1", 30_000).await,
        (2, 0, 0)
    );
    assert_eq!(
        intact(membership_reply(&mut conn, "join", "a#1", 30_000).await),
        1
    );
    // The set lost: both members gone, and each one's next beat says so.
    redis.cli(&["DEL", "members"]);
    assert_eq!(
        membership_reply(&mut conn, "join", "a#1", 30_000).await,
        (1, 0, 0)
    );
    assert_eq!(
        membership_reply(&mut conn, "join", "a#1", 30_000).await,
        (1, 0, 1)
    );
    // b's member expired (its score is an expiry in ms of Redis TIME: 1 is long past).
    redis.cli(&["ZADD", "members", "1", "b#1"]);
    assert_eq!(
        membership_reply(&mut conn, "join", "b#1", 30_000).await,
        (2, 0, 0)
    );
    assert_eq!(
        intact(membership_reply(&mut conn, "join", "b#1", 30_000).await),
        1
    );
}

async fn membership(conn: &mut MultiplexedConnection, op: &str, id: &str, ttl_ms: u64) -> i64 {
    membership_twins(conn, op, id, ttl_ms).await.0
}

/// Two processes started from one config share a node id: they are two members (N stays
/// right, where one member would give each of them the whole limit), and each learns that
/// the other exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_one_node_id_are_two_members() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    assert_eq!(
        membership_twins(&mut conn, "join", "gw#1", 30_000).await,
        (1, 0)
    );
    assert_eq!(
        membership_twins(&mut conn, "join", "gw#2", 30_000).await,
        (2, 1)
    );
    assert_eq!(
        membership_twins(&mut conn, "join", "gw#1", 30_000).await,
        (2, 1)
    );
    // A node id that merely starts with the same letters is someone else.
    assert_eq!(
        membership_twins(&mut conn, "join", "gw2#1", 30_000).await,
        (3, 0)
    );
    assert_eq!(
        membership_twins(&mut conn, "leave", "gw#2", 30_000).await.0,
        2
    );
    assert_eq!(
        membership_twins(&mut conn, "join", "gw#1", 30_000).await,
        (2, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_counts_joins_leaves_and_expiry() {
    const LONG_MS: u64 = 30_000;
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;

    assert_eq!(membership(&mut conn, "join", "a", LONG_MS).await, 1);
    assert_eq!(membership(&mut conn, "join", "b", LONG_MS).await, 2);
    // Renewing is not joining twice.
    assert_eq!(membership(&mut conn, "join", "a", LONG_MS).await, 2);
    assert_eq!(membership(&mut conn, "leave", "a", LONG_MS).await, 1);
    // Leaving twice, or a node never seen, changes nothing.
    assert_eq!(membership(&mut conn, "leave", "a", LONG_MS).await, 1);
    assert_eq!(redis.cli(&["ZRANGE", "members", "0", "-1"]), "b");

    // `c` stops beating after one join with a 100 ms TTL: `b`'s next beat after that drops
    // it. Poll with b's beats until then (bounded), rather than sleeping a guessed time.
    let joined = Instant::now();
    assert_eq!(membership(&mut conn, "join", "c", 100).await, 2);
    let deadline = joined + Duration::from_secs(2);
    let dropped_after = loop {
        let n = membership(&mut conn, "join", "b", LONG_MS).await;
        if n == 1 {
            break joined.elapsed();
        }
        assert_eq!(n, 2, "members while c is alive");
        assert!(
            Instant::now() < deadline,
            "c was not dropped within 2 s of its 100 ms TTL"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Not before its TTL (Redis TIME has ms resolution; allow for that).
    assert!(
        dropped_after >= Duration::from_millis(95),
        "c dropped after {dropped_after:?}, before its 100 ms TTL"
    );
    assert_eq!(redis.cli(&["ZRANGE", "members", "0", "-1"]), "b");
    assert_eq!(redis.cli(&["ZSCORE", "members", "c"]), "");
}
