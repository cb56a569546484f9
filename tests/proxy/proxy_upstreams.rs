//! Which upstream URL a request goes to, and the forwarding headers it carries: a dead URL
//! is skipped, a request that never left goes to the next URL with its body,
//! `X-Forwarded-Proto` is kept only from a trusted proxy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_upstream_is_502() {
    let gw = Gateway::start(&config(dead_port().await, "", "")).await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/"))).await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body = json(resp).await;
    assert_eq!(body["status"], 502);
    assert!(body["detail"].as_str().unwrap().contains("app"), "{body}");
}

/// `[dead, up]`: the config a dead-URL test runs on.
fn two_urls(dead: SocketAddr, up: SocketAddr) -> String {
    config(up, "", "").replace(
        &format!("urls = [\"http://{up}\"]"),
        &format!("urls = [\"http://{dead}\", \"http://{up}\"]"),
    )
}

/// An upstream answering 200 that counts the requests it saw.
async fn counting_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let addr = upstream(move |_req| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Response::new(body("up")) }
    })
    .await;
    (addr, seen)
}

/// One HTTP/2 connection: every request on it is served by the same worker, whose pool
/// remembers which URL is dead.
async fn h2_client(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

fn post(addr: SocketAddr, body: &'static str) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}/upload"))
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

/// A POST whose connection failed never left, so its body goes to the next URL; the dead
/// URL is then ejected (`base_ejection`, 2 s) and later requests skip it: of six POSTs on
/// `[dead, up]`, all six are answered by the live URL and only one ever tried the dead one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_url_is_skipped_and_a_body_that_never_left_goes_on() {
    let (up, seen) = counting_upstream().await;
    let dead = dead_port().await;
    let gw = Gateway::start(&two_urls(dead, up)).await;
    let mut client = h2_client(gw.addrs.listen).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let resp = client
            .send_request(post(gw.addrs.listen, "payload"))
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200; 6]);
    assert_eq!(seen.load(Ordering::SeqCst), 6);
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let dead_url = format!("url=\"http://{dead}\"");
    let line = |name: &str| format!("{name}{{upstream=\"app\",{dead_url}");
    assert_eq!(
        metric_sum(&m, &line("tollgate_upstream_requests_total")),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, &line("tollgate_upstream_ejected")),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(
            &m,
            "tollgate_upstream_retries_total{upstream=\"app\",reason=\"connect\"}"
        ),
        1.0
    );
}

/// The body itself arrives whole on the URL that answered, after the first refused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_on_after_a_refused_connection_arrives_whole() {
    let up = upstream(|req: Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        Response::new(body(req.into_body().collect().await.unwrap().to_bytes()))
    })
    .await;
    let gw = Gateway::start(&two_urls(dead_port().await, up)).await;
    let resp = send_h1(gw.addrs.listen, post(gw.addrs.listen, "every byte")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "every byte");
}

/// The `X-Forwarded-Proto` the upstream receives for a client that claims `https`.
async fn forwarded_proto(trusted: bool) -> serde_json::Value {
    let up = echo_upstream().await;
    let client_ip = if trusted {
        "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n"
    } else {
        ""
    };
    let gw = Gateway::start(&config(up, "", client_ip)).await;
    let req = Request::get(gw.url("/proto"))
        .header("x-forwarded-proto", "https")
        .body(Empty::<Bytes>::new())
        .unwrap();
    json(send_h1(gw.addrs.listen, req).await).await["headers"]["x-forwarded-proto"].clone()
}

/// A trusted proxy's `X-Forwarded-Proto` is kept (it terminated TLS); anyone else's claim is
/// replaced by this hop's own scheme.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_proto_is_kept_only_from_a_trusted_proxy() {
    assert_eq!(forwarded_proto(true).await, "https");
    assert_eq!(forwarded_proto(false).await, "http");
}
