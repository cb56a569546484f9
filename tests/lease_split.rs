//! The lease and split sites with real gateway processes and a real Redis: the lease total
//! stays within the policy under skewed load, a killed node's lease strands nothing,
//! membership rescales the split, and store outages follow each route's `on_store_error`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::faulty::{Fault, FaultyProxy};
use common::process::{spawn_serve, temp_file};
use common::redis::RedisServer;
use common::*;
use http::StatusCode;

fn fleet_config(up: SocketAddr, store: &str, cluster: &str, policies: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[client_ip]
trusted_proxies = ["127.0.0.1/32"]
[store]
{store}
[cluster]
{cluster}
[upstreams.app]
urls = ["http://{up}"]
{policies}
{extra}
"#
    )
}

fn redis_store(url: &str, timeout: &str) -> String {
    format!(
        "kind = \"redis\"\nurls = [\"{url}\"]\ntimeout = \"{timeout}\"\nbreaker = {{ failures = 1000, cooldown = \"1s\" }}"
    )
}

fn route(name: &str, policy: &str, on_store_error: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"/{name}\" }}\nupstream = \"app\"\npolicies = [\"{policy}\"]\non_store_error = \"{on_store_error}\"\n"
    )
}

/// Poll `cond` until it holds; fail after `within`. For state that another process changes
/// on its own schedule (heartbeats, key expiry): a bounded wait on a condition, not a sleep.
async fn eventually<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !cond().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Three gateway processes with 12, 4 and 1 clients (a skewed balancer) on one leased key:
/// the total admitted never exceeds what one GCRA admits, `burst + elapsed·rate`, and the
/// store sees far fewer calls than requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_total_stays_within_the_policy_under_skew() {
    const LIMIT: f64 = 200.0;
    const BURST: f64 = 20.0;
    let redis = RedisServer::start();
    let policy = format!(
        "[policies.shared]\nkey = [\"route\"]\nalgorithm = \"gcra\"\nlimit = {LIMIT}\nperiod = \"1s\"\nburst = {BURST}\nsite = \"lease\"\n"
    );
    let cfg = temp_file(
        "lease.toml",
        &fleet_config(
            echo_upstream().await,
            &redis_store(&redis.url(), "1s"),
            "",
            &policy,
            &route("api", "shared", "closed"),
        ),
    );
    let nodes: Vec<_> = (0..3).map(|_| spawn_serve(&cfg)).collect();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (node, clients) in nodes.iter().zip([12usize, 4, 1]) {
        for c in 0..clients {
            let addr = node.addr;
            tasks.spawn(async move {
                let mut ok = 0u32;
                for _ in 0..60 {
                    match get_as(addr, "/api", &format!("198.51.100.{c}"), None)
                        .await
                        .status()
                    {
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
    let bound = BURST + (elapsed * LIMIT).floor();
    assert!(
        f64::from(admitted) <= bound,
        "admitted {admitted} > bound {bound} over {elapsed:.3}s"
    );
    assert!(admitted >= BURST as u32, "admitted {admitted}: starved");
    assert!(admitted < 17 * 60, "nothing was limited");
    let mut calls = 0.0;
    for n in &nodes {
        let m = metrics_text(n.admin.unwrap()).await;
        calls += metric_sum(&m, "tollgate_store_calls_total{op=\"lease\"}");
    }
    eprintln!(
        "admitted {admitted} of {} (bound {bound}) with {calls} lease calls",
        17 * 60
    );
    assert!(calls >= 1.0, "no lease calls at all");
    assert!(
        calls < f64::from(17 * 60) / 2.0,
        "{calls} lease calls for {} requests",
        17 * 60
    );
}

/// A node holding a lease is killed: its cells were debited, nothing else. The key is
/// full again (and gone from Redis) once the debited cells would have been spent, and
/// another node then gets the whole burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_lease_strands_nothing() {
    let redis = RedisServer::start();
    let policy = "[policies.shared]\nkey = [\"route\"]\nalgorithm = \"gcra\"\nlimit = 50\nperiod = \"1s\"\nburst = 10\nsite = \"lease\"\nlease_max = 10\n";
    let cfg = temp_file(
        "killed.toml",
        &fleet_config(
            echo_upstream().await,
            &redis_store(&redis.url(), "1s"),
            "",
            policy,
            &route("api", "shared", "closed"),
        ),
    );
    let mut a = spawn_serve(&cfg);
    let b = spawn_serve(&cfg);
    // Node A: a burst of concurrent requests makes it lease.
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..10 {
        let addr = a.addr;
        tasks.spawn(async move {
            get_as(addr, "/api", &format!("192.0.2.{c}"), None)
                .await
                .status()
        });
    }
    while tasks.join_next().await.is_some() {}
    assert_eq!(
        redis.cli(&["KEYS", "tg:shared*"]).lines().count(),
        1,
        "A leased"
    );
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // At 50/s the 10 debited cells are back within 200 ms; the key expires with them.
    eventually(
        "the dead node's cells came back",
        Duration::from_secs(2),
        || async { redis.cli(&["KEYS", "tg:shared*"]).trim().is_empty() },
    )
    .await;
    let mut ok = 0;
    for _ in 0..10 {
        if get_as(b.addr, "/api", "192.0.2.200", None).await.status() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 10, "node B got the whole burst back");
}

/// Split: each node enforces limit/N. A second node joining halves node A's share within
/// a few heartbeats; once it is killed (no goodbye) A's share is whole again after its
/// membership expires (three heartbeats).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_rescales_the_split() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let policy = "[policies.split]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 60\nperiod = \"1m\"\nburst = 60\nsite = \"split\"\n";
    let cfg = |id: &str| {
        temp_file(
            &format!("split-{id}.toml"),
            &fleet_config(
                up,
                &redis_store(&redis.url(), "1s"),
                &format!("node_id = \"{id}\"\nheartbeat = \"100ms\""),
                policy,
                &route("api", "split", "open"),
            ),
        )
    };
    let a = spawn_serve(&cfg("a"));
    // A fresh client's first request shows burst/N − 1 remaining.
    let probe = |n: u32| {
        let addr = a.addr;
        async move {
            let ip = format!("203.0.113.{}", n % 250);
            let r = get_as(addr, "/api", &ip, None).await;
            r.headers()["ratelimit"].to_str().unwrap().to_string()
        }
    };
    let mut n = 0;
    let mut share_is = |want: &'static str| {
        n += 1000;
        let probe = &probe;
        let start = n;
        let mut i = start;
        async move {
            let within = Duration::from_secs(3);
            let started = Instant::now();
            loop {
                i += 1;
                let got = probe(i).await;
                if got.contains(want) {
                    return;
                }
                assert!(started.elapsed() < within, "wanted {want}, got {got}");
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    };
    share_is("r=59;").await;
    let mut b = spawn_serve(&cfg("b"));
    share_is("r=29;").await;
    assert_eq!(redis.cli(&["ZCARD", "tg:members"]).trim(), "2");
    let metrics = metrics_text(a.admin.unwrap()).await;
    assert!(metrics.contains("tollgate_cluster_nodes 2"), "{metrics}");
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    share_is("r=59;").await;
    let m = metrics_text(a.admin.unwrap()).await;
    assert_eq!(
        metric_sum(&m, "tollgate_store_calls_total{op=\"check\"}"),
        0.0,
        "split made store calls"
    );
}

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

/// Leases and membership on a real 3-master Redis Cluster: one key per script call, so any
/// slot works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_and_membership_work_on_a_cluster() {
    let cluster = common::redis::RedisCluster::start(3);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let store = format!(
        "kind = \"redis-cluster\"\nurls = [{}]\ntimeout = \"1s\"",
        urls.join(", ")
    );
    let policy = "[policies.shared]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"1h\"\nburst = 5\nsite = \"lease\"\n";
    let gw = Gateway::start(&fleet_config(
        echo_upstream().await,
        &store,
        "node_id = \"c1\"",
        policy,
        &route("api", "shared", "closed"),
    ))
    .await;
    let mut ok = 0;
    for _ in 0..8 {
        match get_as(gw.addrs.listen, "/api", "192.0.2.77", None)
            .await
            .status()
        {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(ok, 5, "the burst, then 429");
    let members: usize = (0..3)
        .map(|n| {
            cluster
                .cli(n, &["ZCARD", "tg:members"])
                .trim()
                .parse::<usize>()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(members, 1);
}

/// Two leased policies on one route, the second exhausted: every denied request takes the
/// first policy's cell and gives it back exactly once, so a route that only has the first
/// policy still finds exactly its burst (a double give-back would mint cells).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_gives_leased_cells_back_once() {
    let policies = "[policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"1h\"\nburst = 5\nsite = \"lease\"\n\
                    [policies.tiny]\nkey = [\"route\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1h\"\nburst = 1\nsite = \"lease\"\n";
    let routes = "[[routes]]\nname = \"both\"\nmatch = { path_prefix = \"/both\" }\nupstream = \"app\"\npolicies = [\"per_ip\", \"tiny\"]\n\
                  [[routes]]\nname = \"ip\"\nmatch = { path_prefix = \"/ip\" }\nupstream = \"app\"\npolicies = [\"per_ip\"]\n";
    let gw = Gateway::start(&fleet_config(
        echo_upstream().await,
        "kind = \"memory\"",
        "",
        policies,
        routes,
    ))
    .await;
    let addr = gw.addrs.listen;
    let ip = "192.0.2.9";
    assert_eq!(
        get_as(addr, "/both", ip, None).await.status(),
        StatusCode::OK
    );
    for _ in 0..10 {
        let r = get_as(addr, "/both", ip, None).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    let mut ok = 0;
    for _ in 0..10 {
        if get_as(addr, "/ip", ip, None).await.status() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 4, "per_ip: burst 5, one spent on /both");
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
