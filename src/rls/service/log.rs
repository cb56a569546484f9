//! A rate limit service call's access-log line, the proxy's own (`proxy/access.rs`): the
//! domain as the route, the gRPC method (or `/json`) as the path, the status the caller
//! sees as HTTP has it (200; the JSON listener's 429 and 400), and what the limiter
//! decided — so an RLS decision reads in the log as a route's does.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use http::Method;

use crate::limit::Decision;
use crate::proxy::access::{Access, access_log};

/// The gRPC method's path.
pub(super) const GRPC_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// One call's line.
pub(super) struct Call<'a> {
    pub domain: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub started: Instant,
    pub client: Option<SocketAddr>,
    pub request_id: &'a str,
    pub decision: Option<&'a Decision>,
}

pub(super) fn log(c: &Call<'_>) {
    access_log(&Access {
        route: c.domain,
        method: &Method::POST,
        path: c.path,
        status: c.status,
        took: c.started.elapsed(),
        client: c
            .client
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip()),
        request_id: c.request_id,
        decision: c.decision,
    });
}
