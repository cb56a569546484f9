//! On a Redis Cluster a refund gives back, with its marker (`central/refund.rs`) in each
//! refunded group's slot: a marker elsewhere would fail the call (`CROSSSLOT`) and leave
//! the spend in place. Real 3-master cluster, an in-process gateway.

use std::time::Duration;

use crate::common::config::{ConfigBuilder, PATIENT_BREAKER};
use crate::common::redis::RedisCluster;
use crate::common::*;
use http::StatusCode;

/// How far ahead of its node's clock `key`'s GCRA arrival time is, in µs (`None`: no key).
fn ahead_us(cluster: &RedisCluster, key: &str) -> Option<f64> {
    let node = cluster.owner(key);
    let tat: f64 = cluster.cli(node, &["GET", key]).parse().ok()?;
    let time = cluster.cli(node, &["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<f64>().unwrap());
    let now = parts.next().unwrap() * 1e6 + parts.next().unwrap();
    Some(tat - now)
}

/// The refund markers in `key`'s slot, on its master, with their PTTLs (ms).
fn markers_beside(cluster: &RedisCluster, key: &str) -> Vec<(String, i64)> {
    let node = cluster.owner(key);
    let slot = cluster.cli(node, &["CLUSTER", "KEYSLOT", key]);
    cluster
        .cli(node, &["KEYS", "tg:~refund:*"])
        .lines()
        .filter(|m| cluster.cli(node, &["CLUSTER", "KEYSLOT", m]) == slot)
        .map(|m| {
            (
                m.to_string(),
                cluster.cli(node, &["PTTL", m]).parse().unwrap(),
            )
        })
        .collect()
}

/// A request whose two 10-per-hour keys live in two slots on two masters, denied by a third
/// key in a third slot: both reservations spend, and both are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_is_refunded_in_every_slot() {
    let cluster = std::sync::Arc::new(RedisCluster::start(3));
    let key = |p: &str, ip: &str| format!("tg:{p}:ip:{ip}");
    let slot = |k: &str| tollgate::limit::store::slot(k.as_bytes());
    let ip = (1..250)
        .map(|n| format!("198.51.100.{n}"))
        .find(|ip| {
            let (a, b, c) = (key("pa", ip), key("pb", ip), key("pc", ip));
            cluster.owner(&a) != cluster.owner(&b) && slot(&c) != slot(&a) && slot(&c) != slot(&b)
        })
        .expect("an address whose keys live in three slots, two on different masters");
    let (a, b, c) = (key("pa", &ip), key("pb", &ip), key("pc", &ip));
    // pc is spent two hours ahead (its tolerance is one): the store denies it. Set here, not
    // by a request, so no node remembers the denial and the request goes to the store.
    let owner_c = cluster.owner(&c);
    let time = cluster.cli(owner_c, &["TIME"]);
    let secs: u64 = time.lines().next().unwrap().trim().parse().unwrap();
    let tat = format!("{}.000", (secs + 7200) * 1_000_000);
    assert_eq!(
        cluster.cli(owner_c, &["SET", &c, &tat, "PX", "10800000"]),
        "OK"
    );

    const CENTRAL: &str = "burst = 10\nsite = \"central\"";
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .store("redis-cluster", &cluster.urls(), "500ms", PATIENT_BREAKER)
        .upstream(echo_upstream().await)
        .policy("pa", &["ip"], "gcra", 10, "1h", CENTRAL)
        .policy("pb", &["ip"], "gcra", 10, "1h", CENTRAL)
        .policy("pc", &["ip"], "gcra", 1, "1h", "site = \"central\"")
        .route("r", &["pa", "pb", "pc"], "closed")
        .build();
    let gw = Gateway::start(&cfg).await;
    let resp = get_as(gw.addrs.listen, "/r", &ip, None).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);

    // The reservations wrote pa's and pb's keys (a cell ahead, 6 minutes); the refunds, in
    // the background, move them back. Each needs its marker in its own slot.
    let c2 = cluster.clone();
    let state = move || (ahead_us(&c2, &a), ahead_us(&c2, &b));
    let started = std::time::Instant::now();
    loop {
        let (ahead_a, ahead_b) = tokio::task::spawn_blocking(state.clone()).await.unwrap();
        let back = |ahead: Option<f64>| ahead.is_some_and(|us| us < 60e6);
        if back(ahead_a) && back(ahead_b) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "after 10 s: pa {ahead_a:?} µs ahead, pb {ahead_b:?} (spent: 360 s; absent: never spent)"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for k in [key("pa", &ip), key("pb", &ip)] {
        let markers = markers_beside(&cluster, &k);
        assert_eq!(markers.len(), 1, "one marker in {k}'s slot: {markers:?}");
        // The store's repeat window at a 500 ms timeout: 3 × 2 s + 10 s.
        assert!((1..=16_000).contains(&markers[0].1), "{markers:?}");
    }
    let metrics = metrics_text(gw.addrs.admin_listen.expect("an admin listener")).await;
    let errors: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("tollgate_store_errors_total"))
        .collect();
    assert!(errors.is_empty(), "store errors: {errors:?}");
}
