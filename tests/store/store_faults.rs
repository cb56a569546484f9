//! A store that fails: down, blackholed, slow, resetting — with each `on_store_error`, through
//! a fault-injecting proxy in front of a real Redis. No request may wait past the store
//! timeout (plus scheduling slack), nothing panics, and decisions resume when Redis is back.
//! Recovery after a kill and restart, cancelled probes and script errors: `store_recovery.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::config::ConfigBuilder;
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::redis::RedisServer;
use crate::common::*;
use http::{Response, StatusCode};
use tollgate::limit::clock::ManualClock;

/// Routes `/open`, `/closed`, `/local`, each with its own central policy (burst 2).
fn config(up: SocketAddr, store_url: &str, breaker: &str) -> String {
    const CENTRAL: &str = "burst = 2\nsite = \"central\"";
    let mut cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .store("redis", &[store_url.to_string()], "100ms", breaker)
        .upstream(up);
    for mode in ["open", "closed", "local"] {
        cfg = cfg
            .policy(mode, &["ip"], "gcra", 2, "1h", CENTRAL)
            .route(mode, &[mode], mode);
    }
    cfg.build()
}

/// One request, which must be answered well within a second (store timeout is 100 ms).
async fn call(addr: SocketAddr, path: &str, ip: &str) -> Response<hyper::body::Incoming> {
    let started = Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(5), get_as(addr, path, ip, None))
        .await
        .expect("request hung on the store");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{path} took {:?}",
        started.elapsed()
    );
    resp
}

fn decided_by_store(r: &Response<hyper::body::Incoming>) -> bool {
    r.headers().contains_key("ratelimit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_mode_with_every_fallback() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let gw = Gateway::start(&config(
        echo_upstream().await,
        &proxy.url(),
        "{ failures = 1000, cooldown = \"1s\" }",
    ))
    .await;
    let addr = gw.addrs.listen;
    assert!(decided_by_store(&call(addr, "/open", "198.51.100.1").await));

    let faults = [
        ("down", Fault::Refuse),
        ("blackholed", Fault::Blackhole),
        ("slow", Fault::Delay(Duration::from_millis(300))),
        ("resetting", Fault::Reset),
    ];
    for (n, (name, fault)) in faults.into_iter().enumerate() {
        proxy.set(fault);
        let ip = format!("203.0.113.{}", 10 + n);
        let open = call(addr, "/open", &ip).await;
        assert_eq!(open.status(), StatusCode::OK, "{name}: fail open forwards");
        assert!(!decided_by_store(&open), "{name}");
        let closed = call(addr, "/closed", &ip).await;
        assert_eq!(
            closed.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{name}: fail closed is 503"
        );
        assert!(closed.headers().contains_key("retry-after"), "{name}");
        // Local fallback: L/N with N = 1 here, so burst 2 then 429.
        for i in 0..2 {
            assert_eq!(
                call(addr, "/local", &ip).await.status(),
                StatusCode::OK,
                "{name}: local #{i}"
            );
        }
        assert_eq!(
            call(addr, "/local", &ip).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{name}"
        );

        // The store comes back: decisions resume within 1 s (the README's promise).
        proxy.set(Fault::Pass);
        let back = Instant::now();
        while !decided_by_store(&call(addr, "/closed", "198.51.100.99").await) {
            assert!(
                back.elapsed() < Duration::from_secs(1),
                "{name}: no store decision 1 s after recovery"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let admin = gw.addrs.admin_listen.unwrap();
    let metrics = metrics_text(admin).await;
    let count = |needle: &str| metric_sum(&metrics, needle);
    // Exactly one fail-open request per fault; fail-closed ones may add recovery polls.
    assert_eq!(count("outcome=\"error_open\""), 4.0, "{metrics}");
    assert!(count("outcome=\"error_closed\"") >= 4.0, "{metrics}");
    for kind in ["timeout", "redis"] {
        assert!(
            metrics.contains(&format!("tollgate_store_errors_total{{kind=\"{kind}\"}}")),
            "{kind}: {metrics}"
        );
    }
    // Every key decided without the store is counted once, by what its route did and why:
    // three local requests per fault, as many open and closed ones as their outcomes say.
    let fallbacks = |how: &str, reason: &str| {
        metrics
            .lines()
            .filter(|l| l.starts_with("tollgate_fallback_decisions_total{"))
            .filter(|l| l.contains(&format!("on_store_error=\"{how}\"")) && l.contains(reason))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert_eq!(fallbacks("local", ""), 12.0, "{metrics}");
    assert_eq!(
        fallbacks("open", ""),
        count("outcome=\"error_open\""),
        "{metrics}"
    );
    assert_eq!(
        fallbacks("closed", ""),
        count("outcome=\"error_closed\""),
        "{metrics}"
    );
    for reason in ["reason=\"timeout\"", "reason=\"redis\""] {
        assert!(fallbacks("local", reason) >= 3.0, "{reason}: {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_skips_the_store_and_closes_after_a_probe() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let clock = ManualClock::new();
    let cfg = config(
        echo_upstream().await,
        &proxy.url(),
        "{ failures = 3, cooldown = \"2s\" }",
    );
    let gw = Gateway::start_with_clock(&cfg, Arc::new(clock.clone())).await;
    let (addr, admin) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    let metrics = || metrics_text(admin);
    let calls = |m: &str| metric_sum(m, "tollgate_store_calls_total{op=\"check\"}");

    proxy.set(Fault::Refuse);
    for _ in 0..3 {
        assert_eq!(
            call(addr, "/open", "198.51.100.7").await.status(),
            StatusCode::OK
        );
    }
    // By value: the HELP line reads "tollgate_store_breaker_open 1 while ...".
    let open = |m: &str| metric_sum(m, "tollgate_store_breaker_open") == 1.0;
    let m = metrics().await;
    assert!(open(&m), "{m}");
    let calls_when_open = calls(&m);
    for _ in 0..10 {
        assert_eq!(
            call(addr, "/open", "198.51.100.7").await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        calls(&metrics().await),
        calls_when_open,
        "an open breaker makes no store calls"
    );

    // Redis is back. The cooldown never passes on the breaker's clock: the background ping
    // alone closes it, within a few ping periods.
    proxy.set(Fault::Pass);
    let back = Instant::now();
    while !decided_by_store(&call(addr, "/open", "198.51.100.7").await) {
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "breaker not closed 1 s after the store came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!open(&metrics().await));

    // Down again: a probe after the cooldown still works as before.
    proxy.set(Fault::Refuse);
    while !open(&metrics().await) {
        assert_eq!(
            call(addr, "/open", "198.51.100.7").await.status(),
            StatusCode::OK
        );
        assert!(back.elapsed() < Duration::from_secs(5), "never reopened");
    }
    clock.advance(Duration::from_secs(2));
    let probes = calls(&metrics().await);
    assert!(!decided_by_store(
        &call(addr, "/open", "198.51.100.7").await
    ));
    assert_eq!(
        calls(&metrics().await),
        probes + 1.0,
        "one probe after the cooldown"
    );
}

/// A check queued behind a stuck call waits its own store timeout, not the stuck call's
/// remainder and then its own call's: the batch driver answers each request at its
/// deadline (it keeps one timer per call, none per request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_queued_behind_a_stuck_call_waits_only_its_own_timeout() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let cfg = ConfigBuilder::new("")
        .trust_loopback("")
        .store("redis", &[proxy.url()], "1s", "{ failures = 1000 }")
        .upstream(echo_upstream().await)
        .policy(
            "open",
            &["ip"],
            "gcra",
            2,
            "1h",
            "burst = 2\nsite = \"central\"",
        )
        .route("open", &["open"], "open")
        .build();
    // One worker: both requests go through its one store connection.
    let gw = Gateway::start_with_workers(&cfg, 1).await;
    let addr = gw.addrs.listen;
    assert!(decided_by_store(
        &get_as(addr, "/open", "198.51.100.1", None).await
    ));
    proxy.set(Fault::Blackhole);
    let timed = |ip: &'static str| async move {
        let started = Instant::now();
        let resp = get_as(addr, "/open", ip, None).await;
        (resp.status(), started.elapsed())
    };
    // The second check queues behind the first one's call, which the blackhole holds for
    // the whole second.
    let first = tokio::spawn(timed("203.0.113.1"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, waited) = timed("203.0.113.2").await;
    assert_eq!(status, StatusCode::OK, "fail open");
    assert!(
        waited < Duration::from_millis(1400),
        "queued check waited {waited:?}: its own timeout is 1 s"
    );
    let (status, waited) = first.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(waited < Duration::from_millis(1400), "{waited:?}");
}
