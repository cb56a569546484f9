//! What the running tests share: the README's promises run over real sockets, so these are
//! an example's stand-in backend, a header's value, a request that may not hang, and
//! concurrent clients on one key counting what the gateways admit.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;

use crate::common::send_h1;

pub use crate::common::backend::ExampleBackend as Backend;

pub fn header(resp: &Response<Incoming>, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

pub async fn timed<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("a request hung")
}

/// GET `path` with the `x-api-key` account `key`.
pub async fn keyed(addr: SocketAddr, path: &str, key: &str) -> StatusCode {
    let req = Request::get(format!("http://{addr}{path}"))
        .header("x-api-key", key)
        .body(Empty::<Bytes>::new())
        .unwrap();
    timed(send_h1(addr, req)).await.status()
}

/// 8 concurrent clients per gateway, 40 requests each, on one key: how many passed, and
/// how long it took. Only 200 and 429 are answers.
pub async fn offer(addrs: &[SocketAddr], path: &'static str, key: &'static str) -> (u64, f64) {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for &addr in addrs {
        for _ in 0..8 {
            tasks.spawn(async move {
                let mut ok = 0u64;
                for _ in 0..40 {
                    match keyed(addr, path, key).await {
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
    eprintln!(
        "{path} {key}: {admitted} of {} admitted in {elapsed:.2}s",
        addrs.len() * 320
    );
    (admitted, elapsed)
}
