//! What the `on_store_error = "local"` fallback owes a dead Redis Cluster master holds up
//! only that master's keys: keys on healthy masters are decided centrally all along.
//! Real 3-master cluster, an in-process gateway.

use std::time::Duration;

use crate::common::config::{ConfigBuilder, PATIENT_BREAKER};
use crate::common::redis::RedisCluster;
use crate::common::*;
use http::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_on_a_dead_master_does_not_stop_the_healthy_ones() {
    let mut cluster = RedisCluster::start(3);
    for i in 0..3 {
        // Healthy masters keep answering for their slots while one is down.
        cluster.cli(i, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let ip_on = |node: usize| {
        (1..250)
            .map(|n| format!("198.51.100.{n}"))
            .find(|ip| cluster.owner(&format!("tg:p:ip:{ip}")) == node)
            .expect("an address whose key lives on that master")
    };
    let (doomed, healthy) = (ip_on(0), ip_on(1));
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .store("redis-cluster", &cluster.urls(), "200ms", PATIENT_BREAKER)
        .upstream(echo_upstream().await)
        .policy(
            "p",
            &["ip"],
            "gcra",
            10,
            "1h",
            "burst = 10\nsite = \"central\"",
        )
        .route("local", &["p"], "local")
        .route("closed", &["p"], "closed")
        .build();
    let gw = Gateway::start(&cfg).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    let decided = |path: &'static str, ip: String| async move {
        let r = tokio::time::timeout(Duration::from_secs(5), get_as(addr, path, &ip, None))
            .await
            .expect("a request hung on the store");
        (r.status(), r.headers().contains_key("ratelimit"))
    };
    assert_eq!(
        decided("/closed", doomed.clone()).await,
        (StatusCode::OK, true)
    );
    assert_eq!(
        decided("/closed", healthy.clone()).await,
        (StatusCode::OK, true)
    );

    cluster.nodes[0].stop(); // SIGKILL
    // The doomed key falls back to the local share and owes the store what it admits.
    let mut owed = 0;
    for _ in 0..3 {
        if decided("/local", doomed.clone()).await.0 == StatusCode::OK {
            owed += 1;
        }
    }
    assert!(owed > 0, "the fallback admitted nothing");
    assert!(
        metrics_text(admin)
            .await
            .contains("tollgate_store_debt_keys 1"),
        "one key owes the dead master"
    );
    // Keys on healthy masters owe nothing: decided centrally, every time.
    for _ in 0..5 {
        assert_eq!(
            decided("/closed", healthy.clone()).await,
            (StatusCode::OK, true),
            "a healthy master's key was held up by another master's debt"
        );
    }
    // The doomed key is still owed: a fail-closed route refuses it meanwhile.
    assert_eq!(
        decided("/closed", doomed).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}
