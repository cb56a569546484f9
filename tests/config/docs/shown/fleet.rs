//! Outputs of more than one gateway: the several-gateways chapter's two gateways on one
//! Redis (`docs/src/several-gateways.md`), and the examples' READMEs: the owner fleet of
//! three (`examples/owner-fleet/`) and the JWT plans (`examples/api-tiers-jwt/`), each
//! served from the page's or the example's own config, over real sockets, with a real
//! `redis-server` where the page has one.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use super::page_toml;
use crate::common::process::{
    GatewayProcess, spawn_serve_with_env, temp_file, try_spawn_serve_with_env,
};
use crate::common::redis::RedisServer;
use crate::common::shown::{Mask, PORT, assert_text};
use crate::common::*;

/// The examples' secrets (any values check accepts: the READMEs make random ones).
const SECRETS: &[(&str, &str)] = &[
    (
        "TOLLGATE_ACCOUNT_HASH_KEY",
        "the docs' test account hash key",
    ),
    (
        "TOLLGATE_JWT_SECRET",
        "the docs' test HS256 secret, 32+ bytes",
    ),
    (
        "TOLLGATE_PEER_SECRET",
        "the docs' test peer secret, 32+ bytes long",
    ),
];

/// A status line of the READMEs' loops, where a refill can land mid-loop: `n` (or `n + 1`)
/// 200s, then 429s, whatever the count, is one shape.
fn burst_then_refused(n: usize) -> String {
    format!(r"(?m)^(200 ){{{n}}}(200 )?(429 ?)+$")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let gw1 = page_toml("docs/src/several-gateways.md", 0)
        .replace("127.0.0.1:8081", "127.0.0.1:0")
        .replace("redis://127.0.0.1:6379", &redis.url())
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    // "a copy with listen = "127.0.0.1:8082" as gw2.toml": the same, on another free port.
    let gateways = [Gateway::start(&gw1).await, Gateway::start(&gw1).await];
    let mut printed = String::new();
    for _ in 1..=4 {
        for (n, gw) in gateways.iter().enumerate() {
            let answer = raw(
                gw.addrs.listen,
                "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await;
            printed.push_str(&format!("808{} {}\n", n + 1, status(&answer)));
        }
    }
    assert_text("several-gateways-statuses", &printed, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jwt_examples_free_and_pro_plans() {
    let dir = repo_path("examples/api-tiers-jwt");
    let up = upstream(|_req| async {
        let mut r = http::Response::new(body("{}"));
        r.headers_mut().insert("x-api-units", "1".parse().unwrap());
        r
    })
    .await;
    let toml = std::fs::read_to_string(dir.join("tollgate.toml"))
        .unwrap()
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9901", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    let gw = spawn_serve_with_env(&temp_file("tollgate.toml", &toml), SECRETS);
    let mint = |args: &[&str]| {
        let out = Command::new("python3")
            .arg(dir.join("mint.py"))
            .args(args)
            .envs(SECRETS.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (free, pro) = (mint(&["alice"]), mint(&["bob", "pro"]));
    let get = |token: &str| {
        format!(
            "GET /v1/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Connection: close\r\n\r\n"
        )
    };
    let mut printed = String::new();
    for _ in 0..12 {
        printed.push_str(&format!("{} ", status(&raw(gw.addr, &get(&free)).await)));
    }
    printed.push('\n');
    let answer = raw(gw.addr, &get(&pro)).await;
    for line in answer.split("\r\n\r\n").next().unwrap().lines() {
        if line.to_ascii_lowercase().contains("ratelimit") {
            printed.push_str(&format!("{line}\n"));
        }
    }
    let masks: &[Mask] = &[
        (&burst_then_refused(10), "<10 OR 11 × 200, THEN 429s>"),
        // The key's id is derived from the account hash key, the reader's own.
        ("pk=:[A-Za-z0-9+/=]+:", "pk=:<PK>:"),
    ];
    assert_text("jwt-example-plans", &printed, masks);
}

/// The owner fleet's three nodes, their listeners on free ports (peer ports probed free,
/// then bound: another socket may take one in between, and then the fleet starts again).
/// With `store`, the nodes share that Redis too (`[store] kind = "redis"`).
async fn owner_fleet(up: SocketAddr, store: Option<&str>) -> Vec<GatewayProcess> {
    let dir = repo_path("examples/owner-fleet");
    for _ in 0..5 {
        let peers = peers::free_ports(3);
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let mut toml = std::fs::read_to_string(dir.join(format!("node{i}.toml"))).unwrap();
            for j in 1..=3 {
                toml = toml.replace(&format!("127.0.0.1:700{j}"), &peers[j - 1].to_string());
            }
            let toml = toml
                .replace(&format!("\"127.0.0.1:808{i}\""), "\"127.0.0.1:0\"")
                .replace(&format!("\"127.0.0.1:991{i}\""), "\"127.0.0.1:0\"")
                .replace("http://127.0.0.1:3000", &format!("http://{up}"))
                // An owner slower than the timeout hands its keys to the L/N fallback: on a
                // busy machine, wait longer (the page's output does not show it).
                .replace("timeout = \"100ms\"", "timeout = \"1s\"");
            let toml = match store {
                Some(url) => toml.replace(
                    "[store]\n",
                    &format!("[store]\nkind = \"redis\"\nurls = [\"{url}\"]\n"),
                ),
                None => toml,
            };
            match try_spawn_serve_with_env(&temp_file(&format!("node{i}.toml"), &toml), SECRETS) {
                Ok(node) => nodes.push(node),
                Err(log) if log.contains("Address already in use") => break,
                Err(log) => panic!("node {i} did not start:\n{log}"),
            }
        }
        if nodes.len() == 3 {
            return nodes;
        }
    }
    panic!("five fleets in a row found a probed peer port taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_fleets_shared_burst_and_status() {
    let nodes = owner_fleet(echo_upstream().await, None).await;
    for node in &nodes {
        let admin = node.admin.unwrap();
        eventually("every peer live", Duration::from_secs(10), || async move {
            metrics_text(admin).await.contains("tollgate_peers_live 3")
        })
        .await;
    }
    let mut printed = String::new();
    // `$((8081 + i % 3))` for i in 1..=30: node 2, 3, 1, 2, …
    for i in 1..=30 {
        let node = &nodes[i % 3];
        let answer = raw(
            node.addr,
            "GET / HTTP/1.1\r\nHost: x\r\nx-api-key: k1\r\nConnection: close\r\n\r\n",
        )
        .await;
        printed.push_str(&format!("{} ", status(&answer)));
    }
    printed.push('\n');
    let admin = nodes[0].admin.unwrap();
    printed.push_str(&text(send_h1(admin, get(&format!("http://{admin}/status"))).await).await);
    let masks: &[Mask] = &[
        (&burst_then_refused(20), "<20 OR 21 × 200, THEN 429s>"),
        PORT,
    ];
    assert_text("owner-fleet-statuses", &printed, masks);
}

/// The operating chapter's `/status`: three gateways on one Redis that are also a peer
/// fleet (the owner fleet's nodes with `[store] kind = "redis"`), asked of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_fleet_on_redis() {
    let redis = RedisServer::start();
    let nodes = owner_fleet(echo_upstream().await, Some(&redis.url())).await;
    let admin = nodes[0].admin.unwrap();
    let status = || async move {
        let resp = send_h1(admin, get(&format!("http://{admin}/status"))).await;
        serde_json::from_str::<serde_json::Value>(&text(resp).await).unwrap()
    };
    // Every node beats into the store and answers its peers' pings: wait until the first
    // counts the three and sees both others live.
    eventually(
        "three nodes, two live peers",
        Duration::from_secs(10),
        || async move {
            let s = status().await;
            s["nodes"] == 3 && s["fleet"]["live"].as_array().is_some_and(|l| l.len() == 2)
        },
    )
    .await;
    // The addresses are the test's free ports.
    let masked = ["/fleet/me", "/fleet/live/0", "/fleet/live/1"];
    crate::common::shown::assert_json("status", &status().await, &masked);
}
