//! A request whose central keys live on different Redis Cluster masters is reserved slot
//! group by slot group; a group whose call timed out but ran later is given back by its
//! receipt, so no budget is lost. Real 3-master cluster, an in-process gateway.

use std::time::Duration;

use crate::common::config::{ConfigBuilder, PATIENT_BREAKER};
use crate::common::redis::{RedisCluster, scripts_run_in};
use crate::common::*;
use http::StatusCode;

fn config(up: std::net::SocketAddr, urls: &[String]) -> String {
    const CENTRAL: &str = "burst = 10\nsite = \"central\"";
    ConfigBuilder::new("")
        .trust_loopback("")
        .store("redis-cluster", urls, "100ms", PATIENT_BREAKER)
        .upstream(up)
        .policy("pa", &["ip"], "gcra", 10, "1h", CENTRAL)
        .policy("pb", &["ip"], "gcra", 10, "1h", CENTRAL)
        .route("r", &["pa", "pb"], "open")
        .build()
}

/// How far ahead of the node's clock `key`'s GCRA arrival time is, in µs (`None`: no key).
fn ahead_us(cluster: &RedisCluster, node: usize, key: &str) -> Option<f64> {
    let tat: f64 = cluster.cli(node, &["GET", key]).parse().ok()?;
    let time = cluster.cli(node, &["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<f64>().unwrap());
    let now = parts.next().unwrap() * 1e6 + parts.next().unwrap();
    Some(tat - now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_reservation_is_refunded_by_its_receipt() {
    let cluster = std::sync::Arc::new(RedisCluster::start(3));
    let key = |p: &str, ip: &str| format!("tg:{p}:ip:{ip}");
    let ip = (1..250)
        .map(|n| format!("198.51.100.{n}"))
        .find(|ip| cluster.owner(&key("pa", ip)) != cluster.owner(&key("pb", ip)))
        .expect("an address whose two keys live on different masters");
    let (a, b) = (key("pa", &ip), key("pb", &ip));
    let (owner_a, owner_b) = (cluster.owner(&a), cluster.owner(&b));
    let gw = Gateway::start(&config(echo_upstream().await, &cluster.urls())).await;
    let addr = gw.addrs.listen;

    // Both groups answered: one cell spent on each key (6 minutes of a 10-per-hour GCRA).
    let ok = get_as(addr, "/r", "198.51.100.250", None).await;
    assert!(ok.headers().contains_key("ratelimit"), "decided centrally");
    assert_eq!(get_as(addr, "/r", &ip, None).await.status(), StatusCode::OK);
    let before = ahead_us(&cluster, owner_b, &b).expect("pb spent");
    assert!(before > 300e6, "one cell ahead: {before}");

    // pb's master stops answering for a second: its reservation times out (the request
    // fails open) and runs, and spends, when the pause ends.
    let scripts_before = scripts_run_in(&cluster.cli(owner_b, &["INFO", "commandstats"]));
    assert_eq!(
        cluster.cli(owner_b, &["CLIENT", "PAUSE", "1000", "ALL"]),
        "OK"
    );
    let resp = get_as(addr, "/r", &ip, None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(!resp.headers().contains_key("ratelimit"), "failed open");

    // Every spend of that request is given back: pa's by the refund, pb's by its receipt
    // (without which pb would stay two cells ahead, 12 minutes, until it refilled). Only
    // once the paused reservation has run does pb's state say anything.
    let c = cluster.clone();
    let state = move || {
        (
            scripts_run_in(&c.cli(owner_b, &["INFO", "commandstats"])) - scripts_before,
            ahead_us(&c, owner_b, &b).unwrap(),
            ahead_us(&c, owner_a, &a).unwrap(),
        )
    };
    let started = std::time::Instant::now();
    loop {
        let (ran, ahead_b, ahead_a) = tokio::task::spawn_blocking(state.clone()).await.unwrap();
        if ran > 0 && ahead_b < before + 60e6 && ahead_a < before + 60e6 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "after 10 s: {ran} scripts ran on pb's master, pb {ahead_b} µs ahead, pa {ahead_a} µs ahead (one cell: {before})"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The receipts of reservations that answered in time expire by themselves.
    for node in 0..3 {
        for receipt in cluster.cli(node, &["KEYS", "tg:receipt:*"]).lines() {
            let pttl: i64 = cluster.cli(node, &["PTTL", receipt]).parse().unwrap();
            assert!((0..=5000).contains(&pttl), "{receipt}: PTTL {pttl}");
        }
    }
}
