//! Shared by the rate-limit test files: a gateway trusting loopback (so tests pick client
//! IPs with `X-Forwarded-For`) on a manual clock, and small request/metrics helpers.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Response;
use tollgate::limit::clock::ManualClock;

use super::config::limited;
use super::*;

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
    let text = limited(up, client_ip)
        .text(policies)
        .app_route("api", route)
        .build();
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
