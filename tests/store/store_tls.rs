//! The Redis store over TLS and with an ACL user, against a real `redis-server` started
//! with `--tls-port` on the shipped development certificate: `rediss://` with `ca_file`
//! decides central policies in the store; a server demanding client certificates gets
//! `client_cert`/`client_key`; `username_env`/`password_env` log in as an ACL user.

use std::net::SocketAddr;

use crate::common::config::{ConfigBuilder, policy};
use crate::common::redis::RedisServer;
use crate::common::*;

/// A gateway config: `store` keys, one central policy of 2 per hour on route `api`
/// (`closed`: a store that cannot be used answers 503).
fn store_config(up: SocketAddr, store: &str) -> String {
    ConfigBuilder::new("")
        .trust_loopback("")
        .upstream(up)
        .text(store)
        .text(&policy("c", &["ip"], "gcra", 2, "1h", "site = \"central\""))
        .route("api", &["c"], "closed")
        .build()
}

async fn statuses(addr: SocketAddr, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            get_as(addr, "/api", "192.0.2.1", None)
                .await
                .status()
                .as_u16(),
        );
    }
    out
}

fn tls_store(redis: &RedisServer, extra: &str) -> String {
    format!(
        "[store]\nkind = \"redis\"\nurls = [\"{}\"]\ntimeout = \"1s\"\nca_file = \"certs/localhost.pem\"\n{extra}\n",
        redis.tls_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_checks_run_over_tls_trusting_ca_file() {
    let redis = RedisServer::start_tls(false);
    let up = echo_upstream().await;
    let gw = Gateway::start(&store_config(up, &tls_store(&redis, ""))).await;
    assert_eq!(statuses(gw.addrs.listen, 3).await, [200, 200, 429]);
    // Decided in the store: the policy's key is there (read over the plain port).
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(keys.lines().any(|k| k.contains("c:ip:192.0.2.1")), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_demanding_client_certificates_gets_client_cert() {
    let redis = RedisServer::start_tls(true);
    let up = echo_upstream().await;
    let without = Gateway::start(&store_config(up, &tls_store(&redis, ""))).await;
    assert_eq!(
        statuses(without.addrs.listen, 1).await,
        [503],
        "no certificate, no store"
    );
    let cert = "client_cert = \"certs/localhost.pem\"\nclient_key = \"certs/localhost-key.pem\"";
    let with = Gateway::start(&store_config(up, &tls_store(&redis, cert))).await;
    assert_eq!(statuses(with.addrs.listen, 3).await, [200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_logs_in_with_username_env_and_password_env() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let ok = |r: String| assert_eq!(r, "OK");
    ok(redis.cli(&[
        "ACL",
        "SETUSER",
        "gate",
        "on",
        ">a-long-acl-password",
        "~*",
        "&*",
        "+@all",
    ]));
    // Only that user can do anything now (the default user is off).
    ok(redis.cli(&["ACL", "SETUSER", "default", "off"]));
    let store = format!(
        "[store]\nkind = \"redis\"\nurls = [\"{}\"]\ntimeout = \"1s\"\nusername_env = \"TG_REDIS_USER\"\npassword_env = \"TG_REDIS_PASS\"\n",
        redis.url()
    );
    let cfg = process::temp_file("acl.toml", &store_config(up, &store));
    let env = |pass: &'static str| [("TG_REDIS_USER", "gate"), ("TG_REDIS_PASS", pass)];
    let wrong = process::spawn_serve_with_env(&cfg, &env("not-the-password"));
    assert_eq!(
        statuses(wrong.addr, 1).await,
        [503],
        "a wrong password is a store error"
    );
    let right = process::spawn_serve_with_env(&cfg, &env("a-long-acl-password"));
    assert_eq!(statuses(right.addr, 3).await, [200, 200, 429]);
}
