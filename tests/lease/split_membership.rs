//! The L/N split when membership stumbles: a store that loses the members set (a Redis
//! restarted without persistence) or stalls past every member's expiry (`CLIENT PAUSE`)
//! must not give a fleet nobody left a fresh limit. Each began as a hostile review's
//! finding: a node saw N = 1 and took the whole limit, and its split states were reset on
//! each change of N (2 → 1 → 2).
//!
//! Real processes, real sockets, a real `redis-server`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::fleet;
use crate::common::process::{GatewayProcess, spawn_serve, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;

/// Two gateways with their own `heartbeat`s split a limit of 10 per hour (5 each) on
/// `redis`; once both count N = 2, `client` spends the whole limit, 5 on each.
async fn spent_pair(
    redis: &RedisServer,
    up: SocketAddr,
    client: &str,
    beats: [(&str, &str); 2],
) -> Vec<GatewayProcess> {
    let nodes: Vec<GatewayProcess> = beats
        .iter()
        .map(|(id, beat)| {
            spawn_serve(&temp_file(
                &format!("split-{}-{id}.toml", redis.port),
                &fleet(up, &format!("node_id = \"{id}\"\nheartbeat = \"{beat}\""))
                    .patient_redis(&redis.url(), "300ms")
                    .policy(
                        "shared",
                        &["ip"],
                        "gcra",
                        10,
                        "1h",
                        "burst = 10\nsite = \"split\"",
                    )
                    .route("api", &["shared"], "closed")
                    .build(),
            ))
        })
        .collect();
    for n in &nodes {
        let admin = n.admin.unwrap();
        eventually("two members", Duration::from_secs(10), || async move {
            metrics_text(admin)
                .await
                .contains("tollgate_cluster_nodes 2")
        })
        .await;
    }
    let mut spent = 0;
    for n in &nodes {
        spent += admitted(n.addr, "/api", client, 6).await;
    }
    assert_eq!(spent, 10, "each node's share is 5");
    nodes
}

/// Two gateways split a limit of 10 (5 each) and spend it all. Redis restarts without
/// persistence (the members set lost, no gateway gone). A node beating every 100 ms beside
/// one beating every 2 s sees itself alone on its intact beats and lowers N to 1 before the
/// other beats again: its share grows to 10, but it had spent all of its 5, so it has spent
/// all of its 10 (the split state is rescaled, not reset), and so again when N returns to 2.
/// Was: 25 admitted (a fresh share at N = 1, another at N = 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_lost_the_members_set_leaves_every_split_key_spent() {
    let mut redis = RedisServer::start();
    let up = echo_upstream().await;
    let client = "198.51.100.81";
    // Node a beats every 100 ms, node b every 2 s (the script allows nodes beating at
    // different rates): after the restart a finds itself alone until b's next beat.
    let nodes = spent_pair(&redis, up, client, [("a", "100ms"), ("b", "2s")]).await;
    let mut total = 10;

    redis.restart();
    // Someone finds itself alone.
    let alone = {
        let started = Instant::now();
        loop {
            let mut found = None;
            for (i, n) in nodes.iter().enumerate() {
                if metrics_text(n.admin.unwrap())
                    .await
                    .contains("tollgate_cluster_nodes 1")
                {
                    found = Some(i);
                }
            }
            if let Some(i) = found {
                break Some(i);
            }
            if started.elapsed() > Duration::from_secs(5) {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    if let Some(i) = alone {
        total += admitted(nodes[i].addr, "/api", client, 12).await;
    }
    for n in &nodes {
        let admin = n.admin.unwrap();
        eventually(
            "two members again",
            Duration::from_secs(10),
            || async move {
                metrics_text(admin)
                    .await
                    .contains("tollgate_cluster_nodes 2")
            },
        )
        .await;
    }
    for n in &nodes {
        total += admitted(n.addr, "/api", client, 6).await;
    }
    assert_eq!(
        total, 10,
        "admitted {total} of a 10-per-hour key split over 2 gateways (node {alone:?} saw N = 1 \
         after Redis lost its keys); no gateway joined or left"
    );
}

/// No key lost at all: Redis only pauses (`CLIENT PAUSE`, as a slow fork or a stalled host
/// does) for longer than three heartbeats, so every member has expired when it resumes. The
/// first beats after the pause find their own member gone and do not lower N; by the next,
/// every node is back. Was: a node saw N = 1 and its split states were reset twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_store_leaves_every_split_key_spent() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let client = "198.51.100.82";
    let nodes = spent_pair(&redis, up, client, [("a", "100ms"), ("b", "100ms")]).await;

    let beats = |admin: SocketAddr| async move {
        metric_sum(
            &metrics_text(admin).await,
            "tollgate_store_calls_total{op=\"membership\"}",
        )
    };
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "1000", "ALL"]).trim(), "OK");
    // Returns once the pause is over (PING waits too).
    assert_eq!(redis.cli(&["PING"]).trim(), "PONG");
    // Five more beats on each node, answered by the unpaused store.
    for n in &nodes {
        let admin = n.admin.unwrap();
        let from = beats(admin).await;
        eventually(
            "five beats after the pause",
            Duration::from_secs(10),
            || async move {
                beats(admin).await >= from + 5.0
                    && metrics_text(admin)
                        .await
                        .contains("tollgate_cluster_nodes 2")
            },
        )
        .await;
    }
    let mut after = 0;
    for n in &nodes {
        after += admitted(n.addr, "/api", client, 6).await;
    }
    assert_eq!(
        after, 0,
        "no gateway joined or left, the store only paused, yet the fleet admitted {after} more \
         of a key it had spent (a split share was reset by a membership count of 1)"
    );
}
