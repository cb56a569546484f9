//! Bodies, protocol switches and upstream connections over real sockets: a silent or
//! oversized body is the client's fault (408, 413, 400, not a 502), a stalled upstream body
//! frees what it held, only allowed upgrades pass, and one client cannot open hundreds of
//! upstream connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that reads the whole request body, then answers with its length.
async fn collecting_upstream() -> SocketAddr {
    upstream(|req: Request<Incoming>| async move {
        let n = req
            .into_body()
            .collect()
            .await
            .map_or(0, |b| b.to_bytes().len());
        Response::new(body(n.to_string()))
    })
    .await
}

/// Connect, write `bytes`, keep the socket open; returns the stream to read the answer.
async fn send_raw(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s
}

/// The status of the first answer on `s`, waiting at most 10 s.
async fn read_status(s: &mut TcpStream) -> u16 {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"))
}

fn body_config(up: SocketAddr, route_extra: &str) -> String {
    config(
        up,
        "body_timeout = \"300ms\"\nmax_body_bytes = 1000",
        route_extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_request_body_is_a_408_not_a_504() {
    let gw = Gateway::start(&body_config(collecting_upstream().await, "")).await;
    let started = Instant::now();
    let head = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789";
    let mut s = send_raw(gw.addrs.listen, head).await;
    assert_eq!(read_status(&mut s).await, 408);
    assert!(started.elapsed() < Duration::from_secs(5));
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    assert_eq!(metric_sum(&m, "status=\"408\""), 1.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413() {
    let gw = Gateway::start(&body_config(
        collecting_upstream().await,
        "max_body_bytes = 10",
    ))
    .await;
    // Declared too large: refused before a byte of it is read.
    let mut s = send_raw(
        gw.addrs.listen,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n",
    )
    .await;
    assert_eq!(read_status(&mut s).await, 413);
    // Chunked, found too large while streaming.
    let chunked = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n8\r\n89abcdef\r\n0\r\n\r\n";
    let mut s = send_raw(gw.addrs.listen, chunked).await;
    assert_eq!(read_status(&mut s).await, 413);
    // Within the route's limit: forwarded whole.
    let ok = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd";
    let mut s = send_raw(gw.addrs.listen, ok).await;
    assert_eq!(read_status(&mut s).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_chunked_body_is_the_clients_400() {
    let gw = Gateway::start(&body_config(collecting_upstream().await, "")).await;
    let broken =
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n";
    let mut s = send_raw(gw.addrs.listen, broken).await;
    assert_eq!(read_status(&mut s).await, 400);
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    assert_eq!(
        metric_sum(&m, "status=\"502\""),
        0.0,
        "not blamed on the upstream: {m}"
    );
}

/// An upstream that sends a head promising 100 bytes, 10 of them, then nothing.
async fn stalling_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                    .await;
                // Hold the socket open, silent, until the gateway gives up on it.
                let _ = s.read(&mut buf).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upstream_body_ends_and_frees_its_slot() {
    let policy = "[policies.one]\nkey = [\"route\"]\nalgorithm = \"concurrency\"\nlimit = 1\n";
    let cfg = body_config(stalling_upstream().await, "policies = [\"one\"]") + policy;
    let gw = Gateway::start(&cfg).await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/"))).await;
    assert_eq!(resp.status(), 200);
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("the gateway ends a stalled body within body_timeout");
    assert!(
        ended.is_err(),
        "the client sees the body cut off, not a complete body"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The concurrency slot went with the body: the next request is admitted.
    let next = send_h1(gw.addrs.listen, get(&gw.url("/"))).await;
    assert_eq!(next.status(), 200);
}

/// An upstream that switches to whatever protocol a request names in `Upgrade` (or to
/// `always` when it is `Some`), then echoes bytes; without `Upgrade` it answers 200 with
/// the head it received. `saw_upgrade` records whether any request named one.
async fn switching_upstream(always: Option<&'static str>, saw: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let saw = saw.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                let asked = head
                    .lines()
                    .find_map(|l| l.strip_prefix("upgrade:").map(|p| p.trim().to_owned()));
                saw.fetch_or(asked.is_some(), Ordering::SeqCst);
                match always.map(str::to_owned).or(asked) {
                    Some(proto) => {
                        let switch = format!(
                            "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: {proto}\r\n\r\n"
                        );
                        let _ = s.write_all(switch.as_bytes()).await;
                        while let Ok(n @ 1..) = s.read(&mut buf).await {
                            let _ = s.write_all(&buf[..n]).await;
                        }
                    }
                    None => {
                        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nplain";
                        let _ = s.write_all(ok.as_bytes()).await;
                    }
                }
            });
        }
    });
    addr
}

const H2C: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
const WS: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_is_never_forwarded_and_websocket_is_on_allowed_routes() {
    // Before the fix the h2c upgrade was tunnelled, and HTTP/2 requests inside the tunnel
    // skipped every policy, log and metric.
    let saw = Arc::new(AtomicBool::new(false));
    let gw = Gateway::start(&config(switching_upstream(None, saw.clone()).await, "", "")).await;
    let mut s = send_raw(gw.addrs.listen, H2C).await;
    assert_eq!(read_status(&mut s).await, 200);
    assert!(
        !saw.load(Ordering::SeqCst),
        "the upstream never saw Upgrade: h2c"
    );
    // WebSocket is allowed by default: switched and tunnelled.
    let mut s = send_raw(gw.addrs.listen, WS).await;
    assert_eq!(read_status(&mut s).await, 101);
    s.write_all(b"ping").await.unwrap();
    let mut four = [0u8; 4];
    s.read_exact(&mut four).await.unwrap();
    assert_eq!(&four, b"ping");
    // A route that allows none strips it.
    let saw = Arc::new(AtomicBool::new(false));
    let up = switching_upstream(None, saw.clone()).await;
    let gw = Gateway::start(&config(up, "", "upgrades = []")).await;
    let mut s = send_raw(gw.addrs.listen, WS).await;
    assert_eq!(read_status(&mut s).await, 200);
    assert!(!saw.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_nobody_asked_for_is_a_502() {
    let saw = Arc::new(AtomicBool::new(false));
    let up = switching_upstream(Some("websocket"), saw).await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let plain = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut s = send_raw(gw.addrs.listen, plain).await;
    assert_eq!(read_status(&mut s).await, 502);
    // Asked for websocket, switched to something else: also refused.
    let saw = Arc::new(AtomicBool::new(false));
    let up = switching_upstream(Some("other-proto"), saw).await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let mut s = send_raw(gw.addrs.listen, WS).await;
    assert_eq!(read_status(&mut s).await, 502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_http2_client_cannot_open_more_upstream_connections_than_allowed() {
    // Before the fix, 4 HTTP/2 clients opened 805 upstream sockets.
    let (open, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (o, p) = (open.clone(), peak.clone());
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let now = o.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            let o = o.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, std::convert::Infallible>(Response::new(body("ok")))
                });
                let io = hyper_util::rt::TokioIo::new(s);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    let cfg = config(up, "", "").replace(
        &format!("urls = [\"http://{up}\"]"),
        &format!("urls = [\"http://{up}\"]\nmax_connections = 2"),
    );
    let gw = Gateway::start(&cfg).await;
    let stream = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let url = gw.url("/");
    let requests = (0..12).map(|_| {
        let mut sender = sender.clone();
        let req = Request::get(url.as_str())
            .body(Empty::<Bytes>::new())
            .unwrap();
        async move { sender.send_request(req).await.unwrap().status() }
    });
    let statuses = futures_util::future::join_all(requests).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&peak),
        "{peak} upstream connections at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problem_bodies_do_not_leak_error_chains() {
    let gw = Gateway::start(&config(dead_port().await, "", "")).await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/"))).await;
    assert_eq!(resp.status(), 502);
    let text = text(resp).await;
    assert!(text.contains("upstream `app` is unavailable"), "{text}");
    for leak in ["os error", "refused", "tcp connect", "127.0.0.1"] {
        assert!(!text.contains(leak), "{leak} leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_and_gives_back_its_upstream_slot() {
    // Seen: two idle WebSockets held both upstream slots forever; other clients got 504.
    let saw = Arc::new(AtomicBool::new(false));
    let up = switching_upstream(None, saw).await;
    let cfg = config(up, "idle_timeout = \"300ms\"", "").replace(
        &format!("urls = [\"http://{up}\"]"),
        &format!("urls = [\"http://{up}\"]\nmax_connections = 1"),
    );
    let gw = Gateway::start(&cfg).await;
    let mut s = send_raw(gw.addrs.listen, WS).await;
    assert_eq!(read_status(&mut s).await, 101);
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("the idle tunnel is closed within 5 s");
    assert!(matches!(n, Ok(0) | Err(_)), "closed, not data: {n:?}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let plain = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let mut s = send_raw(gw.addrs.listen, plain).await;
    assert_eq!(read_status(&mut s).await, 200, "the slot came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_steady_upload_is_not_an_upstream_timeout() {
    // Seen: a 1-byte-per-1.9 s upload under body_timeout got a 504 at upstream_timeout.
    let up = collecting_upstream().await;
    let gw = Gateway::start(&config(
        up,
        "upstream_timeout = \"400ms\"\nbody_timeout = \"2s\"",
        "",
    ))
    .await;
    let mut s = send_raw(
        gw.addrs.listen,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nConnection: close\r\n\r\n",
    )
    .await;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    for _ in 0..6 {
        tick.tick().await;
        s.write_all(b"a").await.unwrap();
    }
    assert!(
        started.elapsed() > Duration::from_millis(900),
        "longer than upstream_timeout"
    );
    assert_eq!(read_status(&mut s).await, 200);
}
