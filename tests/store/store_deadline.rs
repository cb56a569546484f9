//! README, "When the store fails": "no request waits longer than the timeout on the store",
//! also when a request makes more than one store call in turn: the debit of what its
//! central keys owe the `local` fallback, then their check; a lease refill, then the
//! central check. Each call has its own full `[store] timeout`; the request shares one
//! deadline among them. Real `redis-server` behind the fault proxy, blackholed (every call
//! times out), an in-process gateway; the breaker never opens (`patient_redis`).
//!
//! The bound asserted is the timeout plus half of it: the margin covers the HTTP round trip
//! through the gateway and a debug build on a shared 2-core machine, and a request that
//! waited for a second store call (another whole timeout) can never fit under it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::ConfigBuilder;
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::limits::metrics;
use crate::common::redis::RedisServer;
use crate::common::*;

const TIMEOUT: Duration = Duration::from_millis(400);
const MARGIN: Duration = Duration::from_millis(200);

/// A gateway on a Redis behind a fault proxy (timeout [`TIMEOUT`], membership's background
/// debt payment an hour apart: the requests pay), with `policies` (TOML) on the route
/// `/local` (`names`, `on_store_error = "local"`).
async fn gateway(proxy: &FaultyProxy, policies: &str, names: &[&str]) -> Gateway {
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .cluster("heartbeat = \"1h\"")
        .patient_redis(&proxy.url(), "400ms")
        .upstream(echo_upstream().await)
        .text(policies)
        .route("local", names, "local")
        .build();
    Gateway::start(&cfg).await
}

/// The longest of `per_ip` requests in turn from each of `ips` fresh addresses; each must
/// be admitted (by the `local` fallback).
async fn slowest(addr: SocketAddr, ips: u8, per_ip: usize) -> Duration {
    let mut worst = Duration::ZERO;
    for i in 0..ips {
        let ip = format!("203.0.113.{}", 20 + i);
        for _ in 0..per_ip {
            let started = Instant::now();
            let status = get_as(addr, "/local", &ip, None).await.status();
            worst = worst.max(started.elapsed());
            assert_eq!(status, 200, "the local fallback admits {ip}");
        }
    }
    worst
}

/// A key's first request times out and is admitted by the fallback: owed. The ones after
/// it pay that debt first (a debit, which the blackhole times out), then check: before
/// the fix each call had a fresh timeout, and such a request waited ~808 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_request_that_pays_a_debt_waits_at_most_one_store_timeout() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let central = config::policy("c", &["ip"], "gcra", 100, "1h", "site = \"central\"");
    let gw = gateway(&proxy, &central, &["c"]).await;
    let addr = gw.addrs.listen;
    // The store answers once, so the connection is up and the script loaded.
    assert_eq!(
        get_as(addr, "/local", "198.51.100.1", None).await.status(),
        200
    );
    proxy.set(Fault::Blackhole);
    let worst = slowest(addr, 4, 3).await;
    let m = metrics(&gw).await;
    assert!(
        metric_sum(&m, "tollgate_store_calls_total{op=\"debit\"}") >= 1.0,
        "a request paid a debt"
    );
    assert!(
        worst < TIMEOUT + MARGIN,
        "a request waited {worst:?} on a store whose timeout is {TIMEOUT:?}"
    );
}

/// A route with a leased and a central policy: a fresh key's request waits for its lease
/// refill, then checks its central key. Before the fix, two timeouts (~800 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_leased_and_central_keys_waits_at_most_one_store_timeout() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let policies = [
        config::policy("l", &["ip"], "gcra", 100, "1h", "site = \"lease\""),
        config::policy("c", &["ip"], "gcra", 100, "1h", "site = \"central\""),
    ];
    let gw = gateway(&proxy, &policies.concat(), &["l", "c"]).await;
    let addr = gw.addrs.listen;
    assert_eq!(
        get_as(addr, "/local", "198.51.100.1", None).await.status(),
        200
    );
    proxy.set(Fault::Blackhole);
    let worst = slowest(addr, 4, 1).await;
    assert!(
        worst < TIMEOUT + MARGIN,
        "a request waited {worst:?} on a store whose timeout is {TIMEOUT:?}"
    );
}
