//! Active health checks over real sockets: two URLs of one upstream whose health endpoints
//! a test switches; a URL failing its checks leaves the round robin (and
//! `tollgate_upstream_healthy` says 0) until it passes again; a failing check on every URL
//! does not turn the upstream off.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use http::{Response, StatusCode};

/// An upstream answering `name` on every path but `/healthz`, which says 200 while
/// `healthy` holds and 503 otherwise.
async fn backend(name: &'static str, healthy: Arc<AtomicBool>) -> SocketAddr {
    upstream(move |req| {
        let healthy = healthy.clone();
        async move {
            if req.uri().path() == "/healthz" {
                let ok = healthy.load(Ordering::Relaxed);
                let mut r = Response::new(body(""));
                if !ok {
                    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                }
                return r;
            }
            Response::new(body(name))
        }
    })
    .await
}

async fn answers(gw: &Gateway, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(text(send_h1(gw.addrs.listen, get(&gw.url("/x"))).await).await);
    }
    out
}

fn healthy_gauge(metrics: &str, backend: SocketAddr) -> f64 {
    metric_sum(
        metrics,
        &format!("tollgate_upstream_healthy{{upstream=\"app\",url=\"http://{backend}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_failing_its_checks_leaves_the_rotation_until_it_passes() {
    let (a_ok, b_ok) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let (a, b) = (
        backend("a", a_ok.clone()).await,
        backend("b", b_ok.clone()).await,
    );
    let gw = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [upstreams.app]\nurls = [\"http://{a}\", \"http://{b}\"]\n\
         health = {{ path = \"/healthz\", interval = \"20ms\", timeout = \"20ms\" }}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n"
    ))
    .await;
    let admin = gw.addrs.admin_listen.unwrap();
    let within = Duration::from_secs(5);
    let gauge = |backend| async move { healthy_gauge(&metrics_text(admin).await, backend) };
    let seen = answers(&gw, 4).await;
    assert!(
        seen.contains(&"a".into()) && seen.contains(&"b".into()),
        "{seen:?}"
    );

    b_ok.store(false, Ordering::Relaxed);
    eventually("b marked down", within, || async { gauge(b).await == 0.0 }).await;
    assert_eq!(gauge(a).await, 1.0);
    assert_eq!(
        answers(&gw, 6).await,
        vec!["a"; 6],
        "b is out of the rotation"
    );

    b_ok.store(true, Ordering::Relaxed);
    eventually("b back", within, || async { gauge(b).await == 1.0 }).await;
    let seen = answers(&gw, 4).await;
    assert!(seen.contains(&"b".into()), "b serves again: {seen:?}");

    // Every URL failing: the check may be what is wrong; requests still go out.
    a_ok.store(false, Ordering::Relaxed);
    b_ok.store(false, Ordering::Relaxed);
    eventually("both marked down", within, || async {
        gauge(a).await == 0.0 && gauge(b).await == 0.0
    })
    .await;
    let seen = answers(&gw, 2).await;
    assert!(seen.iter().all(|s| s == "a" || s == "b"), "{seen:?}");
}
