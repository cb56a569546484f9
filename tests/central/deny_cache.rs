//! "Denied until t" and "empty until t" against a real `redis-server`: a key hammered at 3×
//! or 15× its rate costs about one store call per admission and at most 0.05 per denial,
//! admits what one GCRA admits, and the cache never denies a request that arrives at its
//! conform time. (The exact arithmetic is checked against the Rust algorithms in
//! `deny_cache.rs`'s unit tests; Redis keeps its own time, so here time is real and the
//! bounds allow one cell either way.)

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::ConfigBuilder;
use crate::common::redis::RedisServer;
use crate::common::*;
use http::StatusCode;
use tokio::time::{Instant, sleep_until};

const STORE_CALLS: &str = "tollgate_store_calls_total{op=\"check\"}";

fn central_config(up: SocketAddr, store_url: &str, policy: &str) -> String {
    ConfigBuilder::new("")
        .trust_loopback("")
        .redis(store_url, "500ms")
        .upstream(up)
        .text(&format!(
            "[policies.g]\nkey = [\"ip\"]\nsite = \"central\"\n{policy}"
        ))
        .app_route("api", "policies = [\"g\"]")
        .build()
}

async fn store_calls(admin: SocketAddr) -> f64 {
    metric_sum(&metrics_text(admin).await, STORE_CALLS)
}

/// One key limited to `limit` per second at `overload` × that rate for `seconds`. Every
/// admission needs its store call, so store calls per request cannot go below about
/// 1 / overload; what the deny cache saves is the calls for denials: (store calls −
/// admissions) / denials ≤ 0.05. A denial costs a call only when it lands in the slice of
/// time between the cache's end (measured from before the admitting call, so it never
/// outlasts the store's answer) and the store's conform time: about one call's round trip
/// per admission. At a low overload a low limit keeps the gaps between requests long
/// against that round trip on a busy machine.
async fn hammer(algorithm: &str, overload: u32, limit: u32, seconds: u32) {
    const BURST: u64 = 4;
    let requests = seconds * overload * limit;
    let rate = f64::from(limit);
    let redis = RedisServer::start();
    let policy =
        format!("algorithm = \"{algorithm}\"\nlimit = {limit}\nperiod = \"1s\"\nburst = {BURST}\n");
    let gw = Gateway::start(&central_config(
        echo_upstream().await,
        &redis.url(),
        &policy,
    ))
    .await;
    let admin = gw.addrs.admin_listen.unwrap();
    let gap = Duration::from_secs(1) / (overload * limit);
    let start = Instant::now();
    let (mut admitted, mut denied) = (0u64, 0u64);
    let mut first_answer = None;
    let mut last_sent = start;
    for k in 0..requests {
        sleep_until(start + gap * k).await;
        last_sent = Instant::now();
        let r = get_as(gw.addrs.listen, "/x", "198.51.100.7", None).await;
        first_answer.get_or_insert_with(Instant::now);
        match r.status() {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                denied += 1;
                assert!(r.headers().contains_key("retry-after"));
                let state = r.headers()["ratelimit"].to_str().unwrap().to_owned();
                assert!(state.starts_with("\"g\";r=0;t="), "{state}");
            }
            s => panic!("unexpected {s}"),
        }
    }
    let ended = Instant::now();
    // The store decided the first request between `start` and the first answer, and the
    // last one between `last_sent` and `ended`.
    let at_least = (last_sent - first_answer.unwrap()).as_secs_f64() * rate;
    let at_most = (ended - start).as_secs_f64() * rate;
    let (lo, hi) = (
        BURST + at_least.floor() as u64 - 1,
        BURST + at_most.ceil() as u64 + 1,
    );
    let calls = store_calls(admin).await;
    let offered = f64::from(requests) / ((ended - start).as_secs_f64() * rate);
    let per_request = calls / f64::from(requests);
    let per_denied = (calls - admitted as f64) / denied as f64;
    eprintln!(
        "{algorithm} {limit}/s at {overload}x (offered {offered:.1}x): {requests} requests, {admitted} \
         admitted (one GCRA: {lo}..={hi}), {denied} denied, {calls} store calls = \
         {per_request:.3} per request, {per_denied:.3} per denied request"
    );
    assert!(
        (lo..=hi).contains(&admitted),
        "{admitted} admitted, one GCRA admits {lo}..={hi}"
    );
    assert!(
        calls >= admitted as f64,
        "every admission is a store call: {calls} calls, {admitted} admitted"
    );
    assert!(
        per_denied <= 0.05,
        "{per_denied:.3} store calls per denied request ({calls} calls, {admitted} admitted, \
         {denied} denied)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_at_15x_asks_the_store_for_few_denials() {
    hammer("gcra", 15, 20, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_at_15x_asks_the_store_for_few_denials() {
    hammer("token_bucket", 15, 20, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_at_3x_asks_the_store_for_few_denials() {
    hammer("gcra", 3, 5, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_at_3x_asks_the_store_for_few_denials() {
    hammer("token_bucket", 3, 5, 6).await;
}

/// Drain the key, then each step sends one request well before its conform time (denied
/// by the cache, no store call) and one at its conform time (admitted by the store: the
/// cache had already ended).
async fn on_time(algorithm: &str, cost: u32) {
    const PERIOD: Duration = Duration::from_millis(200); // one cell (limit 5 per second)
    const EARLY: Duration = Duration::from_millis(100);
    const STEPS: u32 = 12;
    let redis = RedisServer::start();
    let policy = format!(
        "algorithm = \"{algorithm}\"\nlimit = 5\nperiod = \"1s\"\nburst = 4\ncost = {cost}\n"
    );
    let gw = Gateway::start(&central_config(
        echo_upstream().await,
        &redis.url(),
        &policy,
    ))
    .await;
    let admin = gw.addrs.admin_listen.unwrap();
    let call = || get_as(gw.addrs.listen, "/x", "203.0.113.9", None);
    // Another client first: the store connection is made and the script loaded before the
    // drain, whose first answer's time then says when the store decided it.
    let warm = get_as(gw.addrs.listen, "/x", "203.0.113.10", None).await;
    assert_eq!(warm.status(), StatusCode::OK);
    // burst 4: 4 / cost requests drain it, all at the start. The store decided the first
    // at r0, between `s0` (sent) and `t0` (answered): every later conform moment is
    // r0 + k·cost·PERIOD, so a request sent EARLY before s0 + k·step is early whatever
    // r0 was, and one sent at t0 + k·step is not.
    let drain = 4 / cost;
    let s0 = Instant::now();
    let mut t0 = None;
    for _ in 0..drain {
        assert_eq!(call().await.status(), StatusCode::OK);
        t0.get_or_insert_with(Instant::now);
    }
    let t0 = t0.unwrap();
    let step = PERIOD * cost;
    for k in 1..=STEPS {
        let due = t0 + step * k;
        sleep_until(s0 + step * k - EARLY).await;
        let r = call().await;
        assert_eq!(
            r.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "step {k}: before its conform time"
        );
        assert_eq!(r.headers()["retry-after"], "1");
        sleep_until(due).await;
        let r = call().await;
        assert_eq!(
            r.status(),
            StatusCode::OK,
            "step {k}: at its conform time the cache must have ended"
        );
    }
    assert_eq!(
        store_calls(admin).await,
        f64::from(1 + drain + STEPS),
        "only the admissions asked the store: the early requests were denied by the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_cache_never_denies_a_request_at_its_conform_time() {
    on_time("gcra", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_cache_never_denies_a_request_at_its_conform_time() {
    on_time("token_bucket", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_above_one_is_cached_until_that_cost_conforms() {
    on_time("gcra", 2).await;
}

/// The same bound further out (the BENCHMARKS.md rows print with `--nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_of_overloads_for_the_benchmarks() {
    for (overload, limit, seconds) in [(5, 20, 3), (50, 20, 3)] {
        hammer("gcra", overload, limit, seconds).await;
    }
}
