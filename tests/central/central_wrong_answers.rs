//! Central-site answers that were wrong, through the gateway on a real Redis: the shared-
//! address headroom on a policy not keyed by ip, a central leaky bucket, a central
//! concurrency slot held and released as its own entry (also when its check timed out
//! after Redis ran it), and a wait that never ends sent as 584 years.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::{central_config, policy};
use crate::common::redis::RedisServer;
use crate::common::*;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;

/// A gcra policy of `limit` per hour (burst `limit`) on the central site.
fn gcra(name: &str, key: &str, limit: u32) -> String {
    policy(name, &[key], "gcra", limit, "1h", "site = \"central\"")
}

async fn statuses(gw: &Gateway, n: usize, ip: &str, account: Option<&str>) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            get_as(gw.addrs.listen, "/x", ip, account)
                .await
                .status()
                .as_u16(),
        );
    }
    out
}

/// A client behind carrier-grade NAT gets 4x on ip-keyed central policies only: an
/// account is one account whatever address it comes from, and the advertised `q` is
/// what the store enforces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgnat_headroom_applies_only_to_ip_keyed_central_policies() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let policies = gcra("per_account", "account", 2) + &gcra("per_ip", "ip", 2);
    let route = "match = { path_prefix = \"/x\" }\npolicies = [\"per_account\"]\n\n[[routes]]\nname = \"by_ip\"\nupstream = \"app\"\nmatch = { path_prefix = \"/ip\" }\npolicies = [\"per_ip\"]";
    let gw = Gateway::start(&central_config(up, &redis.url(), &policies, route)).await;
    let account = statuses(&gw, 4, "100.64.1.1", Some("acct")).await;
    assert_eq!(account, [200, 200, 429, 429], "the account's limit, not 4x");
    let denied = get_as(gw.addrs.listen, "/x", "100.64.1.1", Some("acct")).await;
    let advertised = denied.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(advertised.contains("q=2;"), "{advertised}");
    let mut by_ip = Vec::new();
    for _ in 0..10 {
        by_ip.push(
            get_as(gw.addrs.listen, "/ip", "100.64.1.2", None)
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(
        by_ip.iter().filter(|&&s| s == 200).count(),
        8,
        "ip-keyed: 2 x 4 {by_ip:?}"
    );
}

/// A central leaky bucket holds requests until their slot (the store says how long) and
/// refuses those whose slot is past `max_delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_leaky_bucket_paces_and_refuses_past_max_delay() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let policy = "[policies.paced]\nkey = [\"ip\"]\nalgorithm = \"leaky_bucket\"\nlimit = 10\nperiod = \"1s\"\nmax_delay = \"300ms\"\nsite = \"central\"\n";
    let cfg = central_config(up, &redis.url(), policy, "policies = [\"paced\"]");
    let gw = Gateway::start(&cfg).await;
    let started = Instant::now();
    let calls = (0..7)
        .map(|_| {
            let addr = gw.addrs.listen;
            tokio::spawn(async move {
                let status = get_as(addr, "/x", "198.51.100.7", None).await.status();
                (status, started.elapsed())
            })
        })
        .collect::<Vec<_>>();
    let mut done = Vec::new();
    for c in calls {
        done.push(c.await.unwrap());
    }
    let ok: Vec<Duration> = done
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .map(|d| d.1)
        .collect();
    let refused = done
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    // Slots at 0, 100, 200 and 300 ms fit within max_delay (a 5th only on a slow start).
    assert!(
        (4..=5).contains(&ok.len()) && ok.len() + refused == 7,
        "{done:?}"
    );
    let last = ok.iter().max().unwrap();
    assert!(
        *last >= Duration::from_millis(250),
        "held until its slot: {done:?}"
    );
    let key = "tg:paced:ip:198.51.100.7";
    let pttl: i64 = redis.cli(&["PTTL", key]).parse().unwrap();
    assert!(pttl > 0, "the queue's end has an expiry: {pttl}");
    // The queue drains at the rate: a second later the bucket admits without delay.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let t = Instant::now();
    let resp = get_as(gw.addrs.listen, "/x", "198.51.100.7", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(t.elapsed() < Duration::from_millis(100));
}

/// An upstream whose response bodies stay open until the test drops their senders.
async fn holding_upstream() -> (
    SocketAddr,
    tokio::sync::mpsc::Receiver<http_body_util::channel::Sender<Bytes, BoxError>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let up = upstream(move |_req| {
        let tx = tx.clone();
        async move {
            let (sender, body) = http_body_util::channel::Channel::<Bytes, BoxError>::new(1);
            let _ = tx.send(sender).await;
            Response::new(body.boxed())
        }
    })
    .await;
    (up, rx)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A central concurrency slot is one member of the key's sorted set, with its own expiry,
/// and the end of its response removes exactly that member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_concurrency_slot_is_its_own_entry() {
    let redis = RedisServer::start();
    let (up, mut bodies) = holding_upstream().await;
    let policy = "[policies.inflight]\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 2\nsite = \"central\"\n";
    let cfg = central_config(up, &redis.url(), policy, "policies = [\"inflight\"]");
    let gw = Gateway::start(&cfg).await;
    let key = "tg:inflight:ip:198.51.100.9:slots";
    let first = get_as(gw.addrs.listen, "/x", "198.51.100.9", None).await;
    let first_body = bodies.recv().await.unwrap();
    let second = get_as(gw.addrs.listen, "/x", "198.51.100.9", None).await;
    let second_body = bodies.recv().await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(redis.cli(&["ZCARD", key]), "2");
    let third = get_as(gw.addrs.listen, "/x", "198.51.100.9", None).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    // Each member expires on its own, 5 minutes after its acquisition (Redis time, µs).
    let now_us = redis_now_us(&redis);
    let scores = redis.cli(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    for score in scores.lines().skip(1).step_by(2) {
        let left = score.parse::<f64>().unwrap() - now_us as f64;
        assert!((290e6..=300e6).contains(&left), "{scores}");
    }
    drop(first_body);
    let _ = first.into_body().collect().await;
    wait_until(
        || redis.cli(&["ZCARD", key]) == "1",
        "the first slot released",
    )
    .await;
    drop(second_body);
    let _ = second.into_body().collect().await;
    wait_until(
        || redis.cli(&["EXISTS", key]) == "0",
        "the second slot released",
    )
    .await;
}

fn redis_now_us(redis: &RedisServer) -> u64 {
    let time = redis.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
    parts.next().unwrap() * 1_000_000 + parts.next().unwrap()
}

async fn wait_until(mut done: impl FnMut() -> bool, what: &str) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what} within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// On the L/N fallback (store down) a request whose cost is more than a node's share of
/// the burst can never pass: the 429 says so and carries no `Retry-After`, instead of
/// `Retry-After: 18446744074`. `check` rejects a cost above the share at `expected_nodes`
/// (1 here: burst 4 pays for cost 2), so the share shrinks the way it does in a fleet:
/// three more gateways in the members set make N = 4 (4 / 4 = 1 < 2), then the store dies
/// and the last N known is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_never_ends_is_not_sent_as_a_number() {
    let mut redis = RedisServer::start();
    let up = echo_upstream().await;
    // Three other gateways, alive for an hour (score: expiry in ms of Redis time).
    let until = (redis_now_us(&redis) / 1_000 + 3_600_000).to_string();
    for node in ["b", "c", "d"] {
        assert_eq!(redis.cli(&["ZADD", "tg:members", &until, node]), "1");
    }
    let policy = "[policies.heavy]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\nburst = 4\ncost = 2\nsite = \"central\"\n";
    let route = "policies = [\"heavy\"]\non_store_error = \"local\"";
    let gw = Gateway::start(&central_config(up, &redis.url(), policy, route)).await;
    let limiter = gw.limiter.clone();
    wait_until(|| limiter.nodes().get() == 4, "membership counts 4 nodes").await;
    // The store admits it: the burst pays for the cost.
    let resp = get_as(gw.addrs.listen, "/x", "198.51.100.11", None).await;
    assert_eq!(resp.status(), StatusCode::OK, "decided by the store");
    redis.stop();
    let resp = get_as(gw.addrs.listen, "/x", "198.51.100.11", None).await;
    assert_eq!(gw.limiter.nodes().get(), 4, "the last N known");
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        resp.headers().get("retry-after").is_none(),
        "{:?}",
        resp.headers().get("retry-after")
    );
    let state = resp.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(!state.contains("18446744074"), "{state}");
    let body = json(resp).await;
    assert!(body["retry_after"].is_null(), "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("retrying will not help"),
        "{body}"
    );
}

/// A check that timed out while Redis was stalled still runs when Redis wakes, and takes
/// a concurrency slot no request holds: the gateway releases it behind the check instead
/// of leaving it for 5 minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_taken_by_a_timed_out_check_is_released() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let policy = "[policies.inflight]\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 2\nsite = \"central\"\n";
    let route = "policies = [\"inflight\"]\non_store_error = \"open\"";
    let gw = Gateway::start(&central_config(up, &redis.url(), policy, route)).await;
    // Warm the connection and the script, then stall Redis past the 500 ms timeout.
    let key = "tg:inflight:ip:198.51.100.12:slots";
    assert_eq!(
        get_as(gw.addrs.listen, "/x", "198.51.100.12", None)
            .await
            .status(),
        200
    );
    wait_until(
        || redis.cli(&["EXISTS", key]) == "0",
        "the warm-up slot released",
    )
    .await;
    let port = redis.port;
    let stall = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "1.2"])
            .output()
            .expect("redis-cli runs")
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resp = get_as(gw.addrs.listen, "/x", "198.51.100.12", None).await;
    assert_eq!(resp.status(), StatusCode::OK, "on_store_error = open");
    stall.join().unwrap();
    wait_until(
        || redis.cli(&["EXISTS", key]) == "0",
        "the timed-out check's slot released",
    )
    .await;
}
