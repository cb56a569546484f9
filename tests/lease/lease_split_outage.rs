//! Store outages with real gateway processes and a real Redis: each route's
//! `on_store_error` for lease and split policies, and the local fallback's share follows
//! membership's N.

use std::time::{Duration, Instant};

use crate::common::config::{fleet, policy, route};
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::process::{spawn_serve, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;
use http::StatusCode;

/// With the store refusing or blackholed: a leased key that holds no cells follows the
/// route's `on_store_error` within the store timeout; a split key never asks the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outage_follows_on_store_error_for_lease_and_split() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let mut policies = String::new();
    let mut routes = String::new();
    let lease = "burst = 2\nsite = \"lease\"";
    for mode in ["open", "closed", "local"] {
        policies.push_str(&policy(
            &format!("lease_{mode}"),
            &["ip"],
            "gcra",
            2,
            "1h",
            lease,
        ));
        routes.push_str(&route(mode, &[&format!("lease_{mode}")], mode));
    }
    let split = "burst = 2\nsite = \"split\"";
    policies.push_str(&policy("split", &["ip"], "gcra", 2, "1h", split));
    routes.push_str(&route("split", &["split"], "closed"));
    let cfg = fleet(echo_upstream().await, "")
        .patient_redis(&proxy.url(), "100ms")
        .text(&policies)
        .text(&routes)
        .build();
    let gw = Gateway::start(&cfg).await;
    let addr = gw.addrs.listen;
    let call = |path: &'static str, ip: String| async move {
        let started = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(5), get_as(addr, path, &ip, None))
            .await
            .expect("request hung on the store");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{path} took {:?}",
            started.elapsed()
        );
        r.status()
    };
    for (n, fault) in [Fault::Refuse, Fault::Blackhole].into_iter().enumerate() {
        proxy.set(fault);
        let ip = |k: usize| format!("198.51.100.{}", n * 10 + k);
        assert_eq!(call("/open", ip(0)).await, StatusCode::OK);
        assert_eq!(
            call("/closed", ip(0)).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        // local: L/N with N = 1: burst 2, then 429.
        assert_eq!(call("/local", ip(0)).await, StatusCode::OK);
        assert_eq!(call("/local", ip(0)).await, StatusCode::OK);
        assert_eq!(call("/local", ip(0)).await, StatusCode::TOO_MANY_REQUESTS);
        // split never needed the store.
        assert_eq!(call("/split", ip(0)).await, StatusCode::OK);
        assert_eq!(call("/split", ip(0)).await, StatusCode::OK);
        assert_eq!(call("/split", ip(0)).await, StatusCode::TOO_MANY_REQUESTS);
    }
    // The store is back: leases are granted again.
    proxy.set(Fault::Pass);
    eventually("leases resume", Duration::from_secs(3), || async {
        call("/closed", "198.51.100.99".into()).await == StatusCode::OK
    })
    .await;
}

/// `on_store_error = "local"` divides by membership's N too: with two gateways joined, a
/// gateway whose store then fails enforces half the burst, and the last N is kept while the
/// store is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_outage_fallback_uses_membership_n() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let up = echo_upstream().await;
    let central = "burst = 4\nsite = \"central\"";
    let cfg = |id: &str, url: &str| {
        temp_file(
            &format!("fallback-{id}.toml"),
            &fleet(up, &format!("node_id = \"{id}\"\nheartbeat = \"100ms\""))
                .patient_redis(url, "100ms")
                .policy("shared", &["ip"], "gcra", 4, "1h", central)
                .route("api", &["shared"], "local")
                .build(),
        )
    };
    let a = spawn_serve(&cfg("a", &proxy.url()));
    let _b = spawn_serve(&cfg("b", &redis.url()));
    let admin = a.admin.unwrap();
    eventually("A counts two members", Duration::from_secs(3), || async {
        metrics_text(admin)
            .await
            .contains("tollgate_cluster_nodes 2")
    })
    .await;
    proxy.set(Fault::Refuse);
    let mut ok = 0;
    for _ in 0..6 {
        if get_as(a.addr, "/api", "198.51.100.42", None).await.status() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 2, "burst 4 over N = 2");
    assert!(
        metrics_text(admin)
            .await
            .contains("tollgate_cluster_nodes 2")
    );
}
