//! Shared by the rate-limit test files: a gateway trusting loopback (so tests pick client
//! IPs with `X-Forwarded-For`) on a manual clock, and small request/metrics helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use http::Response;
use tollgate::limit::clock::ManualClock;

use crate::common::*;

/// Gateway trusting loopback as a proxy (so tests pick client IPs with XFF), with `policies`
/// TOML and the route's extra keys.
pub async fn gateway(up: SocketAddr, policies: &str, route: &str, clock: &ManualClock) -> Gateway {
    gateway_with(up, "", policies, route, clock).await
}

/// As [`gateway`], with more `[client_ip]` keys (`shared_ranges`, ...).
pub async fn gateway_with(
    up: SocketAddr,
    client_ip: &str,
    policies: &str,
    route: &str,
    clock: &ManualClock,
) -> Gateway {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[client_ip]
trusted_proxies = ["127.0.0.1/32"]
{client_ip}

[account]
header = "x-api-key"

[upstreams.app]
urls = ["http://{up}"]

{policies}

[[routes]]
name = "api"
upstream = "app"
{route}
"#
    );
    Gateway::start_with_clock(&text, Arc::new(clock.clone())).await
}

pub async fn call(
    gw: &Gateway,
    ip: &str,
    account: Option<&str>,
) -> Response<hyper::body::Incoming> {
    get_as(gw.addrs.listen, "/x", ip, account).await
}

pub fn header(resp: &Response<hyper::body::Incoming>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

pub async fn metrics(gw: &Gateway) -> String {
    metrics_text(gw.addrs.admin_listen.unwrap()).await
}

pub const PER_IP: &str = r#"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 2
period = "1s"
burst = 2
"#;
