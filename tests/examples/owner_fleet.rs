//! The owner fleet, with no store, shares one exact limit: the fleet admits at most
//! `burst + elapsed × rate`, and the non-owners ask the owner; a stopped node is listed
//! under `down` in `/status` and the two others decide its keys.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common;
use crate::common::process::temp_file;
use crate::common::*;
use crate::running::offer;
use crate::{SECRETS, examples, read, rewrite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_fleet_shares_one_exact_limit_without_a_store() {
    let dir = examples().join("owner-fleet");
    let up = echo_upstream().await;
    // The peer ports are probed free, then bound by the nodes: another socket may take one
    // in between, and then the whole fleet starts again on new ports.
    let mut attempt = 0;
    let (mut nodes, peers) = 'start: loop {
        attempt += 1;
        assert!(
            attempt <= 5,
            "five fleets in a row found a probed peer port taken"
        );
        let peers = peers::free_ports(3);
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let mut pairs: Vec<(String, String)> = (1..=3)
                .map(|j| (format!("127.0.0.1:700{j}"), peers[j - 1].to_string()))
                .collect();
            pairs.extend([
                ("http://127.0.0.1:3000".into(), format!("http://{up}")),
                (format!("\"127.0.0.1:808{i}\""), "\"127.0.0.1:0\"".into()),
                (format!("\"127.0.0.1:991{i}\""), "\"127.0.0.1:0\"".into()),
                // An owner slower than the timeout hands its keys to the L/N fallback,
                // whose bound is another one: on a busy machine, wait longer.
                ("timeout = \"100ms\"".into(), "timeout = \"1s\"".into()),
            ]);
            let pairs: Vec<(&str, &str)> = pairs
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let cfg = rewrite(&read(&dir.join(format!("node{i}.toml"))), &pairs);
            let path = temp_file(&format!("node{i}.toml"), &cfg);
            match common::process::try_spawn_serve_with_env(&path, SECRETS) {
                Ok(node) => nodes.push(node),
                Err(log) if log.contains("Address already in use") => continue 'start,
                Err(log) => panic!("node {i} did not start:\n{log}"),
            }
        }
        break (nodes, peers);
    };
    for node in &nodes {
        let admin = node.admin.unwrap();
        eventually("every peer live", Duration::from_secs(10), || async move {
            metrics_text(admin).await.contains("tollgate_peers_live 3")
        })
        .await;
    }
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();

    // per_account (owner): 60 a minute, burst 20, for the fleet.
    let (admitted, elapsed) = offer(&addrs, "/", "k1").await;
    let bound = 20 + elapsed.floor() as u64;
    assert!(
        admitted <= bound,
        "{admitted} admitted > {bound} in {elapsed:.2}s"
    );
    assert!(
        admitted >= 20,
        "{admitted}: the burst was not shared but starved"
    );
    let mut asks = 0.0;
    for n in &nodes {
        asks += metric_sum(
            &metrics_text(n.admin.unwrap()).await,
            "tollgate_peer_calls_total{op=\"ask\"}",
        );
    }
    assert!(asks > 0.0, "the non-owners asked the owner");

    // Stop one node: the others' /status list it under `down` (the README asks the first),
    // and the two decide its keys (a key of every owner passes through both).
    drop(nodes.pop());
    let gone = peers[2].to_string();
    for node in &nodes {
        let admin = node.admin.unwrap();
        eventually(
            "the stopped node listed down",
            Duration::from_secs(10),
            || {
                let gone = gone.clone();
                async move {
                    let status =
                        json(send_h1(admin, get(&format!("http://{admin}/status"))).await).await;
                    status["fleet"]["down"] == serde_json::json!([gone])
                }
            },
        )
        .await;
    }
    for n in 0..12 {
        let key = format!("after-{n}");
        for node in &nodes {
            let status = crate::running::keyed(node.addr, "/", &key).await;
            assert_eq!(status, http::StatusCode::OK, "{key} through {}", node.addr);
        }
    }
}
