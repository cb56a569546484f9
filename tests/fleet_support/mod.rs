//! Shared by the lease/split fleet test files: a fleet config, its `[store]` and route
//! snippets, and a bounded wait on a condition.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub fn fleet_config(
    up: SocketAddr,
    store: &str,
    cluster: &str,
    policies: &str,
    extra: &str,
) -> String {
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

pub fn redis_store(url: &str, timeout: &str) -> String {
    format!(
        "kind = \"redis\"\nurls = [\"{url}\"]\ntimeout = \"{timeout}\"\nbreaker = {{ failures = 1000, cooldown = \"1s\" }}"
    )
}

pub fn route(name: &str, policy: &str, on_store_error: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"/{name}\" }}\nupstream = \"app\"\npolicies = [\"{policy}\"]\non_store_error = \"{on_store_error}\"\n"
    )
}

/// Poll `cond` until it holds; fail after `within`. For state that another process changes
/// on its own schedule (heartbeats, key expiry): a bounded wait on a condition, not a sleep.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut cond: F)
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
