//! `tollgate::layer` in a real axum app: each test serves a router behind a
//! `RateLimitLayer` on a free loopback port (with `ConnectInfo`, as an app would) and asks
//! it over real HTTP/1.1; Redis is a real `redis-server` on a free port
//! (`tests/common/redis.rs`). Refill is driven by a `ManualClock`, never by sleeping.
//!
//! - `local`: the local site's 429, `Retry-After`, `RateLimit` headers and problem body;
//!   refill on the clock; 400, 401 and the headers of admitted responses.
//! - `store`: central Redis shared by two apps (one budget), the lease site, shadow mode,
//!   a store that is down (`on_store_error`) answered within its timeout.
//! - `tonic`: a tonic server with the layer, called by tonic's client (RESOURCE_EXHAUSTED).
//! - `example`: `examples/axum-layer` passes `tollgate check` and serves as its README says;
//!   `check` refuses bad `[layers.*]` tables with the key named.

#[path = "../common/mod.rs"]
mod common;

mod example;
mod local;
mod request_id;
mod store;
mod tonic;

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Empty;
use hyper::body::Incoming;
use tollgate::layer::Limits;

/// Serve `router` on a free loopback port, with the peer address in `ConnectInfo`.
pub async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// An app answering `GET /` with `ok` behind `[layers.NAME]` of `limits`.
pub async fn app(limits: &Limits, layer: &str) -> SocketAddr {
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/{*rest}", get(|| async { "ok" }))
        .layer(limits.layer(layer).unwrap());
    serve(router).await
}

/// `GET path` with `headers`.
pub async fn get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Incoming> {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    common::send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await
}

/// The statuses of `n` `GET /` in a row.
pub async fn statuses(addr: SocketAddr, n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(get_with(addr, "/", &[]).await.status().as_u16());
    }
    out
}

/// The value of a Prometheus sample line starting with `series` in `text` (0 when absent).
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
