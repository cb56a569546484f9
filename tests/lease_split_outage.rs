//! Store outages with real gateway processes and a real Redis: each route's
//! `on_store_error` for lease and split policies, and the local fallback's share follows
//! membership's N.

mod common;
mod fleet_support;

use std::time::{Duration, Instant};

use common::faulty::{Fault, FaultyProxy};
use common::process::{spawn_serve, temp_file};
use common::redis::RedisServer;
use common::*;
use fleet_support::*;
use http::StatusCode;

/// With the store refusing or blackholed: a leased key that holds no cells follows the
/// route's `on_store_error` within the store timeout; a split key never asks the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outage_follows_on_store_error_for_lease_and_split() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let mut policies = String::new();
    let mut routes = String::new();
    for mode in ["open", "closed", "local"] {
        policies.push_str(&format!(
            "[policies.lease_{mode}]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\nburst = 2\nsite = \"lease\"\n"
        ));
        routes.push_str(&route(mode, &format!("lease_{mode}"), mode));
    }
    policies.push_str("[policies.split]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\nburst = 2\nsite = \"split\"\n");
    routes.push_str(&route("split", "split", "closed"));
    let gw = Gateway::start(&fleet_config(
        echo_upstream().await,
        &redis_store(&proxy.url(), "100ms"),
        "",
        &policies,
        &routes,
    ))
    .await;
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
    let policy = "[policies.shared]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 4\nperiod = \"1h\"\nburst = 4\nsite = \"central\"\n";
    let cfg = |id: &str, url: &str| {
        temp_file(
            &format!("fallback-{id}.toml"),
            &fleet_config(
                up,
                &redis_store(url, "100ms"),
                &format!("node_id = \"{id}\"\nheartbeat = \"100ms\""),
                policy,
                &route("api", "shared", "local"),
            ),
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
