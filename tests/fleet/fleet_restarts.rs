//! What a fleet admits across a restart of one of its gateways: the owner and gossip sites
//! keep their counts in the process, and so do the fallback's debts to the store. README
//! states each as an honest limit (one burst, or one fallback share, per restart); these
//! tests hold the fleet to it. They began as a hostile review's findings.
//!
//! Real processes (SIGTERM, then the same config again), real sockets, a real
//! `redis-server`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::{fleet, policy, route};
use crate::common::peers;
use crate::common::process::{GatewayProcess, spawn_serve, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;

/// [`admitted`], one request started every `every` (the offered load of the gossip bound's
/// `U` is counted per window of `S`: pacing it is part of the trace, not a wait for a race).
async fn admitted_paced(addr: SocketAddr, ip: &str, n: usize, every: Duration) -> usize {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ok = 0;
    for _ in 0..n {
        tick.tick().await;
        ok += admitted(addr, "/api", ip, 1).await;
    }
    ok
}

async fn gauge(admin: SocketAddr, name: &str) -> f64 {
    metric_sum(&metrics_text(admin).await, name)
}

/// Stop a gateway as a deploy does (SIGTERM, graceful), and wait for it to exit.
fn stop_gracefully(mut node: GatewayProcess) {
    let pid = node.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    node.child.wait().unwrap();
}

/// README, owner site: a restarted owner starts its keys from full, even when it came back
/// before its peers counted it out (2 failed pings in a row; here one ping every 2 s) and
/// no key moved: one burst per owned key per restart, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_owner_admits_at_most_one_more_burst_of_its_keys() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy("per_ip", &["ip"], "gcra", 10, "1h", "site = \"owner\""),
        route("api", &["per_ip"], "closed")
    );
    let mut fleet = peers::start(2, up, "heartbeat = \"2s\"", &limits, "restart-owner");
    fleet.settled().await;
    let ip = "192.0.2.91";
    let owner = fleet.owner_of(&format!("per_ip:ip:{ip}"));
    let other = 1 - owner;
    let other_admin = fleet.nodes[other].admin.unwrap();
    // The whole limit, at its owner.
    let before = admitted(fleet.nodes[owner].addr, "/api", ip, 12).await;
    assert_eq!(before, 10);
    let failures_before = gauge(other_admin, "tollgate_peer_errors_total").await;

    // Restart the owner (a deploy: SIGTERM, then the same config again).
    let old = fleet.nodes.remove(owner);
    stop_gracefully(old);
    let restarted = fleet.start_again(owner).addr;
    // The other node never saw two failures in a row: the owner never left its live set,
    // so no key moved.
    let failures = gauge(other_admin, "tollgate_peer_errors_total").await - failures_before;
    assert!(
        failures < 2.0,
        "{failures} peer failures: a move may have happened"
    );
    assert!(
        metrics_text(other_admin)
            .await
            .contains("tollgate_peers_live 2"),
        "the owner never left the other node's live set"
    );

    let after = admitted(restarted, "/api", ip, 12).await;
    assert_eq!(
        after, 10,
        "the restarted owner decides the key from full: one burst more (README), not more"
    );
}

/// README, gossip site: the bound holds for a fleet that keeps its processes; a restarted
/// node forgets what it counted and may admit one more burst per key per restart. The
/// client offers one request every 150 ms, far more than S (gossip_interval 10 ms +
/// delivery on loopback), so U = 1: without the restart the bound is burst + 1 = 11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gossip_node_admits_at_most_one_more_burst() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy(
            "shared",
            &["ip"],
            "gcra",
            10,
            "1h",
            "burst = 10\nsite = \"gossip\""
        ),
        route("api", &["shared"], "closed")
    );
    let cluster = "heartbeat = \"100ms\"\ngossip_interval = \"10ms\"";
    let mut fleet = peers::start(2, up, cluster, &limits, "restart-gossip");
    fleet.settled().await;
    let ip = "198.51.100.61";
    let every = Duration::from_millis(150);
    let started = Instant::now();
    let a = fleet.nodes[0].addr;
    let b = fleet.nodes[1].addr;
    let first = admitted_paced(a, ip, 12, every).await;
    assert_eq!(first, 10);
    // A has pushed its 10 cells to B, and B denies the key.
    let a_admin = fleet.nodes[0].admin.unwrap();
    eventually(
        "A pushes its spends",
        Duration::from_secs(5),
        || async move { gauge(a_admin, "tollgate_gossip_sent_cells_total").await >= 10.0 },
    )
    .await;
    assert_eq!(
        admitted_paced(b, ip, 2, every).await,
        0,
        "B knows the key is spent"
    );

    // A restarts (SIGTERM, same config).
    let old = fleet.nodes.remove(0);
    stop_gracefully(old);
    let a = fleet.start_again(0).addr;
    let second = admitted_paced(a, ip, 12, every).await;
    let elapsed = started.elapsed().as_secs_f64();
    // burst + elapsed·rate + U, and one burst for the restart.
    let bound = 10.0 + elapsed * 10.0 / 3600.0 + 1.0 + 10.0;
    let total = first + second;
    assert!(
        total as f64 <= bound,
        "admitted {first} + {second} = {total} in {elapsed:.1}s with one request per 150 ms: \
         README's gossip bound with one restart is {bound:.2}"
    );
}

/// README, `on_store_error = "local"`: the debts live in the process, so a node restarted
/// while the store is down forgets what its fallback admitted before the restart. One
/// gateway, a limit of 30 per hour: 6 spent in the store, Redis dies, the fallback admits
/// 10, a redeploy (SIGTERM, same config) while Redis is still down, 10 more, and the
/// second 10 are paid when Redis returns: the store gives its remaining 14, 40 in all: the
/// bound (30) and the forgotten 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_an_outage_forgets_only_the_debts_before_it() {
    let mut redis = RedisServer::start_persistent();
    let up = echo_upstream().await;
    let client = "198.51.100.71";
    let config = temp_file(
        "restart-debt.toml",
        &fleet(up, "node_id = \"a\"\nheartbeat = \"100ms\"")
            .patient_redis(&redis.url(), "100ms")
            .policy(
                "shared",
                &["ip"],
                "gcra",
                30,
                "1h",
                "burst = 30\nsite = \"central\"",
            )
            .route("api", &["shared"], "local")
            .build(),
    );
    let node = spawn_serve(&config);
    let admin = node.admin.unwrap();
    eventually("one member", Duration::from_secs(5), || async move {
        metrics_text(admin)
            .await
            .contains("tollgate_cluster_nodes 1")
    })
    .await;
    let stored = admitted(node.addr, "/api", client, 6).await;
    assert_eq!(stored, 6);

    redis.stop();
    let fallback_1 = admitted(node.addr, "/api", client, 10).await;
    assert_eq!(fallback_1, 10, "the fallback admits");
    assert!(
        metrics_text(admin)
            .await
            .contains("tollgate_store_debt_keys 1"),
        "the node owes the store one key"
    );
    stop_gracefully(node);
    let node = spawn_serve(&config);
    let admin = node.admin.unwrap();
    let fallback_2 = admitted(node.addr, "/api", client, 10).await;
    assert_eq!(fallback_2, 10, "the restarted node's fallback admits");

    redis.start_again();
    eventually("the debt is paid", Duration::from_secs(5), || async move {
        let m = metrics_text(admin).await;
        m.contains("tollgate_store_debt_keys 0")
            && metric_sum(&m, "tollgate_store_calls_total{op=\"debit\"}") >= 1.0
    })
    .await;
    let after = admitted(node.addr, "/api", client, 40).await;
    let total = stored + fallback_1 + fallback_2 + after;
    assert_eq!(
        (after, total),
        (14, 40),
        "admitted {stored} (store) + {fallback_1} + {fallback_2} (fallback, across a restart) + \
         {after} (store, after): the restarted node's 10 are paid, the 10 before it forgotten"
    );
}
