//! "Denied until t" and "empty until t" against a real `redis-server`: a key hammered at 15×
//! its rate costs about one store call per admission, admits what one GCRA admits, and the
//! cache never denies a request that arrives at its conform time. (The exact arithmetic is
//! checked against the Rust algorithms in `deny_cache.rs`'s unit tests; Redis keeps its own
//! time, so here time is real and the bounds allow one cell either way.)

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::redis::RedisServer;
use common::*;
use http::StatusCode;
use tokio::time::{Instant, sleep_until};

const STORE_CALLS: &str = "tollgate_store_calls_total{op=\"check\"}";

fn central_config(up: SocketAddr, store_url: &str, policy: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[client_ip]
trusted_proxies = ["127.0.0.1/32"]

[store]
kind = "redis"
urls = ["{store_url}"]
timeout = "500ms"

[upstreams.app]
urls = ["http://{up}"]

[policies.g]
key = ["ip"]
site = "central"
{policy}

[[routes]]
name = "api"
upstream = "app"
policies = ["g"]
"#
    )
}

async fn store_calls(admin: SocketAddr) -> f64 {
    metric_sum(&metrics_text(admin).await, STORE_CALLS)
}

/// One key at 15× its rate for a fixed number of requests.
async fn hammer(algorithm: &str) {
    const LIMIT: u64 = 20; // per second
    const BURST: u64 = 4;
    const REQUESTS: u32 = 900; // 3 s at 300 requests a second
    let redis = RedisServer::start();
    let policy =
        format!("algorithm = \"{algorithm}\"\nlimit = {LIMIT}\nperiod = \"1s\"\nburst = {BURST}\n");
    let gw = Gateway::start(&central_config(
        echo_upstream().await,
        &redis.url(),
        &policy,
    ))
    .await;
    let admin = gw.addrs.admin_listen.unwrap();
    let gap = Duration::from_secs(1) / (15 * LIMIT as u32);
    let start = Instant::now();
    let mut admitted = 0u64;
    let mut first_answer = None;
    let mut last_sent = start;
    for k in 0..REQUESTS {
        sleep_until(start + gap * k).await;
        last_sent = Instant::now();
        let r = get_as(gw.addrs.listen, "/x", "198.51.100.7", None).await;
        first_answer.get_or_insert_with(Instant::now);
        match r.status() {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {
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
    let at_least = (last_sent - first_answer.unwrap()).as_secs_f64() * LIMIT as f64;
    let at_most = (ended - start).as_secs_f64() * LIMIT as f64;
    let (lo, hi) = (
        BURST + at_least.floor() as u64 - 1,
        BURST + at_most.ceil() as u64 + 1,
    );
    let calls = store_calls(admin).await;
    let per_request = calls / f64::from(REQUESTS);
    eprintln!(
        "{algorithm}: {REQUESTS} requests, {admitted} admitted (one GCRA: {lo}..={hi}), \
         {calls} store calls = {per_request:.3} per request"
    );
    assert!(
        (lo..=hi).contains(&admitted),
        "{admitted} admitted, one GCRA admits {lo}..={hi}"
    );
    assert!(
        per_request <= 0.1,
        "{per_request:.3} store calls per request ({calls} for {REQUESTS})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_at_15x_costs_under_a_tenth_of_a_call_per_request() {
    hammer("gcra").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_at_15x_costs_under_a_tenth_of_a_call_per_request() {
    hammer("token_bucket").await;
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
    // burst 4: 4 / cost requests drain it, all at the start (the store's time r0 is
    // before `t0`; every later conform moment is r0 + k·cost·PERIOD).
    let drain = 4 / cost;
    let mut t0 = None;
    for _ in 0..drain {
        assert_eq!(call().await.status(), StatusCode::OK);
        t0.get_or_insert_with(Instant::now);
    }
    let t0 = t0.unwrap();
    let step = PERIOD * cost;
    for k in 1..=STEPS {
        let due = t0 + step * k;
        sleep_until(due - EARLY).await;
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
        f64::from(drain + STEPS),
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
