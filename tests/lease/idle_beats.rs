//! Membership beats seldom where N decides nothing: a gateway with no `split` policy and no
//! route that falls back to its L/N share beats every ten heartbeats, with a membership
//! that lives three of those, so a node that does need N still counts it; a reload that
//! makes N decide brings the beats back to every heartbeat. Real Redis, the gateway in
//! this process on its own heartbeat timer.

use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::reload::{admin, file, policy, reload, route, serve};
use crate::common::*;
use tollgate::limit::clock::ManualClock;

/// The config: a Redis store, a 100 ms heartbeat, one policy at `site`, failing `fallback`.
fn config(up: std::net::SocketAddr, redis: &RedisServer, site: &str, fallback: &str) -> String {
    config_beating(up, redis, site, fallback, "100ms")
}

fn config_beating(
    up: std::net::SocketAddr,
    redis: &RedisServer,
    site: &str,
    fallback: &str,
    heartbeat: &str,
) -> String {
    file(
        up,
        &format!(
            "[store]\nkind = \"redis\"\nurls = [\"{}\"]\n\
             [cluster]\nnode_id = \"beats\"\nexpected_nodes = 1\nheartbeat = \"{heartbeat}\"\n{}{}\
             on_store_error = \"{fallback}\"\n",
            redis.url(),
            policy("per_ip", "gcra", 100, &format!("site = \"{site}\"")),
            route("api", "/", &["per_ip"]),
        ),
    )
}

/// This node's membership expiry (ms of Redis TIME) and Redis's now (ms).
fn expiry_and_now(redis: &RedisServer) -> Option<(i64, i64)> {
    let out = redis.cli(&["ZRANGE", "tg:members", "0", "-1", "WITHSCORES"]);
    let score: i64 = out.lines().nth(1)?.trim().parse().ok()?;
    let time: Vec<i64> = redis
        .cli(&["TIME"])
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    Some((score, time[0] * 1_000 + time[1] / 1_000))
}

/// The membership's next expiry after the one it has now: the time between two beats.
async fn next_beat_gap(redis: &RedisServer) -> i64 {
    let (first, _) = expiry_and_now(redis).expect("a member");
    let mut gap = 0;
    eventually("a second beat", Duration::from_secs(10), || {
        let next = expiry_and_now(redis).map(|(e, _)| e);
        gap = next.map_or(0, |e| e - first);
        async move { next.is_some_and(|e| e != first) }
    })
    .await;
    gap
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_fleet_beats_seldom_until_a_reload_makes_n_decide() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let leased = config(up, &redis, "lease", "closed");
    let s = serve(&leased, &ManualClock::new()).await;

    // N decides nothing: the membership lives 3 × 10 heartbeats (3 s, not 300 ms), and
    // the beats come 10 heartbeats apart (about 1 s; the expiry moves by the gap).
    eventually("the first beat", Duration::from_secs(10), || async {
        expiry_and_now(&redis).is_some()
    })
    .await;
    let (expiry, now) = expiry_and_now(&redis).expect("a member");
    assert!(
        expiry - now > 2_000,
        "an idle beat's life: {} ms",
        expiry - now
    );
    let gap = next_beat_gap(&redis).await;
    assert!(gap >= 900, "idle beats {gap} ms apart, wanted about 1 000");

    // A route that falls back to its L/N share: beats every heartbeat again, each
    // membership living 3 of them.
    let (status, answer) = reload(&s, &config(up, &redis, "lease", "local")).await;
    assert_eq!(status, http::StatusCode::OK, "{answer:#}");
    eventually("beats every heartbeat", Duration::from_secs(10), || async {
        expiry_and_now(&redis).is_some_and(|(e, now)| e - now <= 300)
    })
    .await;
    let gap = next_beat_gap(&redis).await;
    assert!(gap < 900, "beats {gap} ms apart once N decides");

    // So does a split policy.
    let (status, answer) = reload(&s, &config(up, &redis, "split", "closed")).await;
    assert_eq!(status, http::StatusCode::OK, "{answer:#}");
    eventually(
        "a split node beats every heartbeat",
        Duration::from_secs(10),
        || async { expiry_and_now(&redis).is_some_and(|(e, now)| e - now <= 300) },
    )
    .await;
}

/// A node idle since it started alone has N = 1 while another node joins; a reload that
/// gives it a split policy must not run that policy on N = 1 until its next beat (ten
/// heartbeats away, or one): it beats at once. With a 10 s heartbeat, N is 2 within a
/// round trip of the reload, not 10 s later. (A hostile review's finding: the node took the
/// L/1 share for a heartbeat.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_makes_n_decide_beats_at_once() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let s = serve(
        &config_beating(up, &redis, "lease", "closed", "10s"),
        &ManualClock::new(),
    )
    .await;
    eventually("the first beat", Duration::from_secs(10), || async {
        expiry_and_now(&redis).is_some()
    })
    .await;
    let nodes = || async {
        let (status, v) = admin(s.admin, http::Method::GET, "/status").await;
        assert_eq!(status, http::StatusCode::OK, "{v:#}");
        v["nodes"].as_u64().expect("nodes")
    };
    assert_eq!(nodes().await, 1, "alone at its first beat");
    // Another gateway joins (its membership, as its beat would write it).
    let (_, now) = expiry_and_now(&redis).expect("a member");
    let until = (now + 60_000).to_string();
    redis.cli(&["ZADD", "tg:members", &until, "other#1"]);
    assert_eq!(
        nodes().await,
        1,
        "an idle node learns of it at its next beat"
    );

    let split = config_beating(up, &redis, "split", "closed", "10s");
    let (status, answer) = reload(&s, &split).await;
    assert_eq!(status, http::StatusCode::OK, "{answer:#}");
    eventually(
        "N = 2 right after the reload",
        Duration::from_secs(3),
        || async { nodes().await == 2 },
    )
    .await;
}

/// An idle node whose first beat fails (the store down at start) tries again at the next
/// heartbeat, not ten heartbeats later: with a 1 s heartbeat it is a member within about a
/// second of the store coming back (was 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_beat_is_tried_again_at_the_next_heartbeat() {
    let mut redis = RedisServer::start();
    let up = echo_upstream().await;
    let text = config_beating(up, &redis, "lease", "closed", "1s");
    redis.stop();
    let _s = serve(&text, &ManualClock::new()).await;
    redis.start_again();
    eventually(
        "a member once the store is back",
        Duration::from_secs(4),
        || async { expiry_and_now(&redis).is_some() },
    )
    .await;
}
