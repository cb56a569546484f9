//! Several gateway processes against one Redis, and one gateway against a real 3-master
//! Redis Cluster with a request's keys in different slots.

use std::net::SocketAddr;
use std::time::Instant;

use crate::common::config::{limited, policy};
use crate::common::process::{spawn_serve, temp_file};
use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::*;
use http::StatusCode;

fn fleet_config(
    up: SocketAddr,
    kind: &str,
    urls: &[String],
    policies: &str,
    route_policies: &str,
) -> String {
    limited(up, "")
        .store(kind, urls, "1s", "")
        .text(policies)
        .app_route("api", &format!("policies = [{route_policies}]"))
        .build()
}

async fn call(
    addr: SocketAddr,
    ip: &str,
    account: Option<&str>,
) -> http::Response<hyper::body::Incoming> {
    get_as(addr, "/x", ip, account).await
}

/// Three gateway processes, 8 concurrent clients each, one key: the total admitted stays
/// within what one GCRA admits over the elapsed time, `burst + elapsed·rate`. The period is
/// an hour, so refill adds one request only after 3 min: however slow the machine, the bound
/// is the burst, and 960 requests test it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateway_processes_enforce_one_limit() {
    const BURST: u32 = 20;
    const PERIOD_SECS: f64 = 3600.0;
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let central = format!("burst = {BURST}\nsite = \"central\"");
    let policy = policy("shared", &["route"], "gcra", BURST, "1h", &central);
    let cfg = temp_file(
        "fleet.toml",
        &fleet_config(up, "redis", &[redis.url()], &policy, "\"shared\""),
    );
    let nodes: Vec<_> = (0..3).map(|_| spawn_serve(&cfg)).collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();

    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (n, &addr) in addrs.iter().enumerate() {
        for c in 0..8 {
            tasks.spawn(async move {
                let mut ok = 0u32;
                for _ in 0..40 {
                    let ip = format!("198.51.100.{}", n * 8 + c);
                    match call(addr, &ip, None).await.status() {
                        StatusCode::OK => ok += 1,
                        StatusCode::TOO_MANY_REQUESTS => {}
                        other => panic!("unexpected {other}"),
                    }
                }
                ok
            });
        }
    }
    let mut admitted = 0;
    while let Some(r) = tasks.join_next().await {
        admitted += r.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let bound = BURST + (elapsed * f64::from(BURST) / PERIOD_SECS).floor() as u32;
    assert!(
        admitted <= bound,
        "admitted {admitted} > bound {bound} over {elapsed:.3}s"
    );
    assert!(
        admitted >= BURST,
        "admitted {admitted}: the limit was not shared but starved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keys_in_different_slots_are_all_or_nothing() {
    let cluster = RedisCluster::start(3);
    let (per_ip, per_account) = (
        "burst = 100\nsite = \"central\"",
        "burst = 2\nsite = \"central\"",
    );
    let policies = policy("per_ip", &["ip"], "token_bucket", 100, "1h", per_ip)
        + &policy("per_account", &["account"], "gcra", 2, "1h", per_account);
    let cfg = fleet_config(
        echo_upstream().await,
        "redis-cluster",
        &cluster.urls(),
        &policies,
        "\"per_ip\", \"per_account\"",
    );
    let gw = Gateway::start(&cfg).await;
    let ip = "203.0.113.77";
    let ip_slot = tollgate::limit::store::slot(format!("tg:per_ip:ip:{ip}").as_bytes());
    for _ in 0..2 {
        assert_eq!(
            call(gw.addrs.listen, ip, Some("acct-9")).await.status(),
            StatusCode::OK
        );
    }
    // Find the account key the gateway wrote and check it really is in another slot.
    let keys = (0..3)
        .flat_map(|n| {
            cluster
                .cli(n, &["KEYS", "tg:per_account:*"])
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_ne!(
        tollgate::limit::store::slot(keys[0].as_bytes()),
        ip_slot,
        "test needs two slots"
    );

    for _ in 0..4 {
        let r = call(gw.addrs.listen, ip, Some("acct-9")).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    // The ip bucket was reserved and refunded (before each 429 was sent) four times:
    // 100 - 2 - this one = 97; the first of the three spent cells (36 s each) is back in 36 s.
    let r = call(gw.addrs.listen, ip, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["ratelimit"], "\"per_ip\";r=97;t=36");
}
