//! The store path settles and recovers on its own: a probe whose request was cancelled
//! mid-call does not wedge the breaker, a Redis killed and restarted is used again within
//! 1 s of its return (on every node), and a script error on one key trips nothing.
//! Real `redis-server` processes, the fault proxy, in-process gateways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::config::ConfigBuilder;
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::*;
use ::redis::Script;
use tollgate::limit::central::CentralSite;
use tollgate::limit::clock::ManualClock;
use tollgate::limit::store::StoreError;

/// One route `/c` with a generous central policy; store timeout and breaker as given.
fn config(up: SocketAddr, store_url: &str, timeout: &str, breaker: &str) -> String {
    ConfigBuilder::new("")
        .trust_loopback("")
        .store("redis", &[store_url.to_string()], timeout, breaker)
        .upstream(up)
        .policy(
            "c",
            &["ip"],
            "gcra",
            1000,
            "1s",
            "burst = 1000\nsite = \"central\"",
        )
        .route("c", &["c"], "closed")
        .build()
}

/// A request on `/c` that the store decided (it carries `RateLimit`), answered in time.
async fn decided_centrally(addr: SocketAddr, ip: &str) -> bool {
    let resp = tokio::time::timeout(Duration::from_secs(3), get_as(addr, "/c", ip, None))
        .await
        .expect("request hung on the store");
    resp.status() == http::StatusCode::OK && resp.headers().contains_key("ratelimit")
}

fn central(gw: &Gateway) -> Arc<CentralSite> {
    gw.limiter.central().expect("redis store").clone()
}

/// A trivial script through the store's connection, timeout and breaker.
async fn touch(site: &CentralSite, script: &Script) -> Result<Vec<i64>, StoreError> {
    let keys = ["tollgate-test:touch".to_string()];
    site.store().eval_script(script, "test", &keys, &[0]).await
}

async fn breaker_open(admin: SocketAddr) -> bool {
    // By value: the HELP line reads "tollgate_store_breaker_open 1 while ...".
    metric_sum(&metrics_text(admin).await, "tollgate_store_breaker_open") == 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_cancelled_mid_call_does_not_wedge_the_breaker() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let clock = ManualClock::new();
    let breaker = "{ failures = 1, cooldown = \"10s\" }";
    let cfg = config(echo_upstream().await, &proxy.url(), "2s", breaker);
    let gw = Gateway::start_with_clock(&cfg, Arc::new(clock.clone())).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    let site = central(&gw);
    let script = Script::new("return {1}");
    assert!(decided_centrally(addr, "198.51.100.1").await);

    proxy.set(Fault::Refuse);
    assert!(touch(&site, &script).await.is_err());
    assert!(breaker_open(admin).await, "one failure opens it");

    // The cooldown is over and the network swallows everything: the next call is the probe,
    // and its caller goes away while it is in flight.
    proxy.set(Fault::Blackhole);
    clock.advance(Duration::from_secs(10));
    let calls = |m: &str| metric_sum(m, "tollgate_store_calls_total{op=\"test\"}");
    let before = calls(&metrics_text(admin).await);
    let probe = tokio::time::timeout(Duration::from_millis(200), touch(&site, &script)).await;
    assert!(probe.is_err(), "the probe was still in flight: {probe:?}");
    assert_eq!(
        calls(&metrics_text(admin).await),
        before + 1.0,
        "it was a probe"
    );

    // Redis answers again: the breaker closes and the key is decided by the store, without
    // any cooldown passing on the breaker's clock.
    proxy.set(Fault::Pass);
    let back = Instant::now();
    while !decided_centrally(addr, "198.51.100.1").await {
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "breaker still open 1 s after the store answered again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(touch(&site, &script).await.is_ok());
    assert!(!breaker_open(admin).await);
}

/// Polls until `gw` decides `need` requests in a row centrally; returns when the first of
/// them was decided, and when the last was. The promise is the first (within 1 s of the
/// restart); the streak only shows it holds, and is bounded by a hang guard, not timed, so
/// a loaded machine's slow round trips do not count against the promise.
async fn until_deciding(gw: &Gateway, since: Instant, need: usize) -> (Duration, Duration) {
    let (mut streak, mut first) = (0, Duration::ZERO);
    while streak < need {
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "{:?}: not deciding centrally 10 s after Redis came back",
            gw.addrs.listen
        );
        let at = since.elapsed();
        if decided_centrally(gw.addrs.listen, "198.51.100.2").await {
            first = if streak == 0 { at } else { first };
            streak += 1;
        } else {
            streak = 0;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(
        first < Duration::from_secs(1),
        "{:?}: the first of {need} central decisions in a row came {first:?} after Redis came back",
        gw.addrs.listen
    );
    (first, since.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_is_used_again_within_a_second_of_its_restart() {
    let mut redis = RedisServer::start();
    let up = echo_upstream().await;
    // A cooldown longer than the promise: only background recovery can keep it.
    let cfg = config(
        up,
        &redis.url(),
        "100ms",
        "{ failures = 3, cooldown = \"5s\" }",
    );
    let nodes = [Gateway::start(&cfg).await, Gateway::start(&cfg).await];
    for gw in &nodes {
        assert!(decided_centrally(gw.addrs.listen, "198.51.100.2").await);
    }

    redis.stop(); // SIGKILL
    let down = Instant::now();
    for gw in &nodes {
        let admin = gw.addrs.admin_listen.unwrap();
        while !breaker_open(admin).await {
            assert!(!decided_centrally(gw.addrs.listen, "198.51.100.2").await);
            assert!(
                down.elapsed() < Duration::from_secs(2),
                "breaker never opened"
            );
        }
    }
    // Down for 3 s, with traffic falling back meanwhile.
    while down.elapsed() < Duration::from_secs(3) {
        for gw in &nodes {
            assert!(!decided_centrally(gw.addrs.listen, "198.51.100.2").await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let back = Instant::now();
    redis.start_again();
    // Both nodes at once: each one's time is its own, not the other's streak added.
    let (a, b) = tokio::join!(
        until_deciding(&nodes[0], back, 20),
        until_deciding(&nodes[1], back, 20)
    );
    for (gw, (first, all)) in nodes.iter().zip([a, b]) {
        let node = gw.addrs.listen;
        eprintln!("{node}: deciding again {first:?} after the restart (20 in a row: {all:?})");
        assert!(!breaker_open(gw.addrs.admin_listen.unwrap()).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_on_one_key_trips_nothing() {
    let redis = RedisServer::start();
    let cfg = config(
        echo_upstream().await,
        &redis.url(),
        "1s",
        "{ failures = 1, cooldown = \"1h\" }",
    );
    let gw = Gateway::start(&cfg).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    let site = central(&gw);
    // A Lua runtime error, and an error reply, as a bad value would cause.
    for source in [
        "error('bad value')",
        "return redis.error_reply('ERR bad value')",
    ] {
        for _ in 0..3 {
            match touch(&site, &Script::new(source)).await {
                Err(StoreError::Reply(_)) => {}
                other => panic!("{source}: {other:?}"),
            }
        }
    }
    let m = metrics_text(admin).await;
    assert_eq!(
        metric_sum(&m, "tollgate_store_errors_total{kind=\"reply\"}"),
        6.0,
        "{m}"
    );
    assert!(!breaker_open(admin).await, "{m}");
    assert!(decided_centrally(addr, "198.51.100.3").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_cluster_master_does_not_stop_the_others() {
    let cluster = RedisCluster::start(3);
    for i in 0..3 {
        // Healthy masters keep answering for their slots while one is down.
        cluster.cli(i, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let keys: Vec<String> = (0..3)
        .map(|n| {
            (0..)
                .map(|i| format!("tollgate-test:{{k{i}}}"))
                .find(|k| cluster.owner(k) == n)
                .unwrap()
        })
        .collect();
    let urls = cluster
        .urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>();
    let cfg = config(
        echo_upstream().await,
        "",
        "100ms",
        "{ failures = 2, cooldown = \"1h\" }",
    )
    .replace("kind = \"redis\"", "kind = \"redis-cluster\"")
    .replace("urls = [\"\"]", &format!("urls = [{}]", urls.join(", ")));
    let gw = Gateway::start(&cfg).await;
    let admin = gw.addrs.admin_listen.unwrap();
    let site = central(&gw);
    let script = Script::new("return {1}");
    let on = |key: &str| {
        let (site, script, key) = (site.clone(), script.clone(), key.to_string());
        async move {
            site.store()
                .eval_script(&script, "test", &[key], &[0])
                .await
        }
    };
    for key in &keys {
        assert!(on(key).await.is_ok(), "{key}");
    }

    let mut cluster = cluster;
    cluster.nodes[0].stop(); // SIGKILL one master
    let down = Instant::now();
    while !breaker_open(admin).await {
        assert!(on(&keys[0]).await.is_err());
        assert!(
            down.elapsed() < Duration::from_secs(2),
            "breaker never opened"
        );
    }
    // The dead master's keys fail fast; the others' are decided, every time, within a
    // bounded wait for the slot map (read at the first answer, or again now).
    let mut streak = 0;
    while streak < 20 {
        assert!(
            down.elapsed() < Duration::from_secs(2),
            "healthy masters not used 2 s after one died (streak {streak})"
        );
        let healthy = on(&keys[1 + streak % 2]).await;
        streak = if healthy.is_ok() { streak + 1 } else { 0 };
        assert!(matches!(on(&keys[0]).await, Err(StoreError::BreakerOpen)));
    }
    eprintln!(
        "healthy masters: 20 in a row {:?} after one died",
        down.elapsed()
    );
    assert!(
        breaker_open(admin).await,
        "the dead master's breaker stays open"
    );
}
