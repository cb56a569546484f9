//! The central Redis site with a real `redis-server`: one limit shared by several gateways,
//! all-or-nothing across central keys, Redis time, expiry, NOSCRIPT, the deny cache and the
//! local-first state.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::config::central_config;
use crate::common::redis::RedisServer;
use crate::common::*;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use tollgate::limit::clock::ManualClock;

async fn call(
    addr: SocketAddr,
    ip: &str,
    account: Option<&str>,
) -> Response<hyper::body::Incoming> {
    get_as(addr, "/x", ip, account).await
}

async fn metric(admin: SocketAddr, line_prefix: &str) -> f64 {
    metric_sum(&metrics_text(admin).await, line_prefix)
}

const STORE_CALLS: &str = "tollgate_store_calls_total{op=\"check\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_with_skewed_clocks_share_one_limit() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let policy = "[policies.global]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"1h\"\nburst = 5\nsite = \"central\"\n";
    let cfg = central_config(up, &redis.url(), policy, "policies = [\"global\"]");
    // Two nodes whose own clocks are an hour apart: the script uses Redis TIME.
    let (a, b) = (ManualClock::new(), ManualClock::new());
    b.advance(Duration::from_secs(3600));
    let gw_a = Gateway::start_with_clock(&cfg, Arc::new(a)).await;
    let gw_b = Gateway::start_with_clock(&cfg, Arc::new(b)).await;
    let mut admitted = 0;
    for i in 0..8 {
        let gw = if i % 2 == 0 { &gw_a } else { &gw_b };
        if call(gw.addrs.listen, "198.51.100.20", None).await.status() == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5, "one limit across both gateways");
    let denied = call(gw_b.addrs.listen, "198.51.100.20", None).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // The wait comes from the store: 1h / 5 = 720 s minus a few ms.
    let retry: u64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((719..=720).contains(&retry), "{retry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_denial_spends_no_other_central_key() {
    let redis = RedisServer::start();
    let policies = r#"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 100
period = "1h"
burst = 100
site = "central"

[policies.per_account]
key = ["account"]
algorithm = "sliding_window"
limit = 2
period = "1h"
site = "central"
"#;
    let cfg = central_config(
        echo_upstream().await,
        &redis.url(),
        policies,
        "policies = [\"per_ip\", \"per_account\"]",
    );
    let gw = Gateway::start(&cfg).await;
    for _ in 0..2 {
        assert_eq!(
            call(gw.addrs.listen, "203.0.113.7", Some("acct-1"))
                .await
                .status(),
            StatusCode::OK
        );
    }
    for _ in 0..4 {
        let r = call(gw.addrs.listen, "203.0.113.7", Some("acct-1")).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            json(r).await["policies"],
            serde_json::json!(["per_account"])
        );
    }
    // 100 - 2 spent - this one = 97: the four denials charged the IP nothing.
    let r = call(gw.addrs.listen, "203.0.113.7", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    // t: three cells of 36 s each are spent; the first comes back in 36 s, less the few ms
    // the test took (until full would be 108).
    assert_eq!(r.headers()["ratelimit"], "\"per_ip\";r=97;t=36");
}

/// A key lives exactly until its bucket would be full again, never "forever" and never a
/// whole period. The TTL is read on a slow bucket (one token per 6 min) so a process spawn
/// between the request and `PTTL` cannot race it; a fast bucket shows the key really goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_expire_by_themselves() {
    let redis = RedisServer::start();
    let policies = "[policies.slow]\nkey = [\"ip\"]\nalgorithm = \"token_bucket\"\nlimit = 10\nperiod = \"1h\"\nburst = 3\nsite = \"central\"\n\
                    [policies.fast]\nkey = [\"ip\"]\nalgorithm = \"token_bucket\"\nlimit = 10\nperiod = \"1s\"\nburst = 3\nsite = \"central\"\n";
    let cfg = central_config(
        echo_upstream().await,
        &redis.url(),
        policies,
        "policies = [\"slow\", \"fast\"]",
    );
    let gw = Gateway::start(&cfg).await;
    assert_eq!(
        call(gw.addrs.listen, "198.51.100.30", None).await.status(),
        StatusCode::OK
    );
    let pttl: i64 = redis
        .cli(&["PTTL", "tg:slow:ip:198.51.100.30"])
        .parse()
        .unwrap();
    // One token of three spent refills in 360 s: the key lives that long, less the time
    // since the request (generously 20 s on a loaded machine).
    assert!((340_000..=360_000).contains(&pttl), "PTTL {pttl}");
    let key = "tg:fast:ip:198.51.100.30";
    let started = Instant::now();
    while redis.cli(&["EXISTS", key]) != "0" {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "key never expired"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_and_restart_are_survived() {
    let mut redis = RedisServer::start();
    let policy = "[policies.g]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1000\nperiod = \"1s\"\nsite = \"central\"\n";
    let cfg = central_config(
        echo_upstream().await,
        &redis.url(),
        policy,
        "policies = [\"g\"]",
    );
    let gw = Gateway::start(&cfg).await;
    let admin = gw.addrs.admin_listen.unwrap();
    assert_eq!(
        call(gw.addrs.listen, "198.51.100.40", None).await.status(),
        StatusCode::OK
    );
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    let r = call(gw.addrs.listen, "198.51.100.40", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers().contains_key("ratelimit"),
        "decided by the store after NOSCRIPT"
    );
    assert_eq!(metric(admin, "tollgate_store_errors_total").await, 0.0);

    // A restart loses keys and scripts; decisions resume by themselves within 2 s.
    redis.restart();
    let back = Instant::now();
    loop {
        let r = call(gw.addrs.listen, "198.51.100.40", None).await;
        if r.headers().contains_key("ratelimit") {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "no store decision 2 s after restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abusive_client_costs_no_store_calls_once_denied() {
    let redis = RedisServer::start();
    let policy = "[policies.g]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\nburst = 2\nsite = \"central\"\n";
    let cfg = central_config(
        echo_upstream().await,
        &redis.url(),
        policy,
        "policies = [\"g\"]",
    );
    let gw = Gateway::start(&cfg).await;
    let admin = gw.addrs.admin_listen.unwrap();
    for _ in 0..3 {
        call(gw.addrs.listen, "203.0.113.66", None).await;
    }
    assert_eq!(metric(admin, STORE_CALLS).await, 2.0);
    for _ in 0..50 {
        let r = call(gw.addrs.listen, "203.0.113.66", None).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(r.headers().contains_key("retry-after"));
    }
    assert_eq!(
        metric(admin, STORE_CALLS).await,
        2.0,
        "denied-until cache answered"
    );
    assert!(gw.limiter.denied_keys() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_denies_without_a_store_call() {
    let redis = RedisServer::start();
    // A concurrency limit is never cached as "denied until": only the local state saves the call.
    let (bodies_tx, mut bodies_rx) = tokio::sync::mpsc::channel(4);
    let up = upstream(move |_req| {
        let bodies_tx = bodies_tx.clone();
        async move {
            let (tx, body) = http_body_util::channel::Channel::<
                Bytes,
                Box<dyn std::error::Error + Send + Sync>,
            >::new(1);
            let _ = bodies_tx.send(tx).await;
            Response::new(body.boxed())
        }
    })
    .await;
    let policy = "[policies.inflight]\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 1\nsite = \"central\"\nlocal_first = true\n";
    let gw = Gateway::start(&central_config(
        up,
        &redis.url(),
        policy,
        "policies = [\"inflight\"]",
    ))
    .await;
    let admin = gw.addrs.admin_listen.unwrap();
    let first = call(gw.addrs.listen, "198.51.100.50", None).await;
    assert_eq!(first.status(), StatusCode::OK);
    let body_tx = bodies_rx.recv().await.unwrap();
    // The slot is held in the store (under the key or a key derived from it).
    let slot_keys = || redis.cli(&["KEYS", "tg:inflight:ip:198.51.100.50*"]);
    assert!(!slot_keys().trim().is_empty(), "no slot in the store");
    let calls = metric(admin, STORE_CALLS).await;
    for _ in 0..5 {
        assert_eq!(
            call(gw.addrs.listen, "198.51.100.50", None).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    assert_eq!(
        metric(admin, STORE_CALLS).await,
        calls,
        "local state denied without the store"
    );
    // The slot is released in the store (and locally) when the body ends.
    drop(body_tx);
    let _ = first.into_body().collect().await;
    let started = Instant::now();
    while !slot_keys().trim().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "central slot never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while gw
        .limiter
        .local()
        .key_count(gw.limiter.policy_index("inflight").unwrap())
        != 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "local slot never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        call(gw.addrs.listen, "198.51.100.50", None).await.status(),
        StatusCode::OK
    );
}
