//! Issue 47, "nobody waits past the timeout": a gateway's first requests after start, on a
//! healthy Redis, got 503 when the dial of a worker's connection (and the scripts' first
//! `NOSCRIPT` round) did not fit in a short store timeout. Every connection a worker or the
//! main thread will use is now made, and the scripts loaded, before `/readyz` says ready.

use crate::common::config::{central_config, policy};
use crate::common::redis::RedisServer;
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_scripts_are_ready_before_readyz() {
    let redis = RedisServer::start();
    let text = central_config(
        echo_upstream().await,
        &redis.url(),
        &policy("p", &["ip"], "gcra", 10, "1s", "site = \"central\""),
        "policies = [\"p\"]",
    );
    const WORKERS: usize = 2;
    let gw = Gateway::start_with_workers(&text, WORKERS).await;
    let admin = gw.addrs.admin_listen.expect("admin listener");
    eventually(
        "/readyz answers 200",
        std::time::Duration::from_secs(10),
        || async {
            send_h1(admin, get(&format!("http://{admin}/readyz")))
                .await
                .status()
                == 200
        },
    )
    .await;
    // Before any request: one connection per worker and one for the main thread, besides
    // redis-cli's own.
    let clients = redis.cli(&["CLIENT", "LIST"]);
    let gateway_clients = clients.lines().filter(|l| l.contains("addr=")).count() - 1;
    assert!(
        gateway_clients > WORKERS,
        "{gateway_clients} gateway connections before the first request:\n{clients}"
    );
    let shas = [
        tollgate::limit::central::CHECK_LUA,
        tollgate::limit::lease::LEASE_LUA,
    ]
    .map(|lua| ::redis::Script::new(lua).get_hash().to_owned());
    let known = redis.cli(&["SCRIPT", "EXISTS", &shas[0], &shas[1]]);
    assert_eq!(
        known.split_whitespace().collect::<Vec<_>>(),
        ["1", "1"],
        "{known}"
    );
}
