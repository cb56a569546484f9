//! Connection bounds against real sockets: `header_timeout` from accept to the first head
//! (silent sockets, half an HTTP/2 preface, silence after TLS), `idle_timeout` on HTTP/1.1
//! and HTTP/2 (and never under a slow request), `max_connections` without spinning,
//! heads hyper refuses counted, `TOLLGATE_WORKERS` checked (SIGHUP reloads: `config/reload.rs`).

use std::time::{Duration, Instant};

use crate::common::wire::{self, END_STREAM, GOAWAY};
use crate::common::*;
use http::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Generous upper bound for "closed by the gateway", far below "never".
const BOUND: Duration = Duration::from_secs(5);

async fn gateway(server: &str) -> Gateway {
    Gateway::start(&config(echo_upstream().await, server, "")).await
}

/// Wait (at most BOUND) until the gateway closes `s`; returns when it did.
async fn closed_at(s: &mut TcpStream) -> Instant {
    timeout(BOUND, wire::closed(s))
        .await
        .expect("the gateway never closed the connection");
    Instant::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_sockets_are_closed_at_header_timeout_while_others_are_served() {
    let gw = gateway("header_timeout = \"1s\"").await;
    let addr = gw.addrs.listen;
    let opened = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let resp = timeout(BOUND, send_h1(addr, get(&gw.url("/during"))))
        .await
        .expect("a normal client is served while 300 sockets sit silent");
    assert_eq!(resp.status(), StatusCode::OK);
    for s in &silent {
        let still_open = s.try_read(&mut [0u8; 16]).map_err(|e| e.kind());
        let msg = "served only after the silent sockets were gone: setup too slow to test";
        assert_eq!(still_open, Err(std::io::ErrorKind::WouldBlock), "{msg}");
    }
    let mut waits = tokio::task::JoinSet::new();
    for mut s in silent {
        waits.spawn(async move { closed_at(&mut s).await });
    }
    while let Some(at) = waits.join_next().await {
        let after = at.unwrap() - opened;
        assert!(
            after >= Duration::from_millis(900),
            "closed early: {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_an_http2_preface_is_closed_at_header_timeout() {
    let gw = gateway("header_timeout = \"300ms\"").await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let start = Instant::now();
    s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let after = closed_at(&mut s).await - start;
    assert!(
        after >= Duration::from_millis(250),
        "closed early: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listener_closes_silent_sockets_too() {
    let gw = gateway("header_timeout = \"300ms\"").await;
    let mut s = TcpStream::connect(gw.addrs.admin_listen.unwrap())
        .await
        .unwrap();
    let start = Instant::now();
    let after = closed_at(&mut s).await - start;
    assert!(
        after >= Duration::from_millis(250),
        "closed early: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_before_or_after_the_tls_handshake_is_closed_at_header_timeout() {
    let tls = "tls_listen = \"127.0.0.1:0\"\ntls_cert = \"certs/localhost.pem\"\n\
               tls_key = \"certs/localhost-key.pem\"\nheader_timeout = \"500ms\"";
    let gw = gateway(tls).await;
    let addr = gw.addrs.tls_listen.unwrap();
    // No ClientHello at all.
    let mut raw = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    assert!(closed_at(&mut raw).await - start >= Duration::from_millis(400));
    // A finished handshake, then no request.
    let start = Instant::now();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = wire::tls_connector().connect(name, tcp).await.unwrap();
    let mut b = [0u8; 64];
    let read = timeout(BOUND, tokio::io::AsyncReadExt::read(&mut tls, &mut b)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "still open: {read:?}"
    );
    assert!(start.elapsed() >= Duration::from_millis(400));
    // Both counted as cut at header_timeout (the handshake, then the head).
    let admin = gw.addrs.admin_listen.unwrap();
    let header = "tollgate_timeouts_total{kind=\"header\"}";
    eventually("both cuts are counted", BOUND, || async move {
        metric_sum(&metrics_text(admin).await, header) == 2.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http1_keep_alive_is_closed_at_idle_timeout_not_header_timeout() {
    let gw = gateway("header_timeout = \"10s\"\nidle_timeout = \"300ms\"").await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let req = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
    s.write_all(req).await.unwrap();
    assert!(
        wire::read_response(&mut s)
            .await
            .starts_with("http/1.1 200")
    );
    // Reused within idle_timeout: a second request is served on the same connection.
    s.write_all(req).await.unwrap();
    assert!(
        wire::read_response(&mut s)
            .await
            .starts_with("http/1.1 200")
    );
    let idle_from = Instant::now();
    let after = closed_at(&mut s).await - idle_from;
    assert!(
        after >= Duration::from_millis(250),
        "closed early: {after:?}"
    );
    assert!(after < Duration::from_secs(3), "closed late: {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_head_must_finish_within_header_timeout_of_its_first_byte() {
    let gw = gateway("header_timeout = \"300ms\"\nidle_timeout = \"30s\"").await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(
        wire::read_response(&mut s)
            .await
            .starts_with("http/1.1 200")
    );
    let start = Instant::now();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let after = closed_at(&mut s).await - start;
    assert!(
        after >= Duration::from_millis(250),
        "closed early: {after:?}"
    );
    assert!(
        after < Duration::from_secs(3),
        "idle_timeout closed it: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connection_gets_goaway_then_closes() {
    let gw = gateway("header_timeout = \"10s\"\nidle_timeout = \"300ms\"").await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    s.write_all(&wire::h2_get()).await.unwrap();
    let (mut answered, mut goaway) = (None, None);
    let read_all = async {
        while let Some((ty, flags, stream)) = wire::next_frame(&mut s).await {
            if stream == 1 && flags & END_STREAM != 0 && ty <= 1 {
                answered = Some(Instant::now());
            }
            if ty == GOAWAY && goaway.is_none() {
                goaway = Some(Instant::now());
            }
        }
    };
    timeout(BOUND, read_all).await.expect("never closed");
    let answered = answered.expect("the request was answered");
    let idle = goaway.expect("a GOAWAY before closing") - answered;
    assert!(idle >= Duration::from_millis(250), "GOAWAY early: {idle:?}");
    assert!(idle < Duration::from_secs(3), "GOAWAY late: {idle:?}");
}

/// A slow request, then a quick one on the same connection: the second fails if the
/// connection was drained as idle while the first was in flight.
async fn slow_then_quick<S>(send: S, url: &str)
where
    S: AsyncFnMut(
        http::Request<http_body_util::Empty<bytes::Bytes>>,
    ) -> Response<hyper::body::Incoming>,
{
    let mut send = send;
    for path in ["/slow", "/slow-body", "/quick"] {
        let resp = timeout(BOUND, send(get(&format!("{url}{path}"))))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert_eq!(text(resp).await, "fine");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_in_flight_is_not_idle() {
    let up = wire::slow_upstream().await;
    let gw = Gateway::start(&config(up, "idle_timeout = \"300ms\"", "")).await;
    let (addr, url) = (gw.addrs.listen, gw.url(""));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut h1, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let tcp = TcpStream::connect(addr).await.unwrap();
    let exec = hyper_util::rt::TokioExecutor::new();
    let (mut h2, conn) = hyper::client::conn::http2::handshake(exec, TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    tokio::join!(
        slow_then_quick(
            async |req| {
                h1.ready().await.unwrap();
                h1.send_request(req).await.unwrap()
            },
            &url
        ),
        slow_then_quick(
            async |req| {
                h2.ready().await.unwrap();
                h2.send_request(req).await.unwrap()
            },
            &url
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_clients_wait_without_a_spinning_gateway() {
    let up = echo_upstream().await;
    let server = "max_connections = 4\nheader_timeout = \"30s\"\nidle_timeout = \"30s\"";
    let cfg = crate::common::process::temp_file("max.toml", &config(up, server, ""));
    let gw = wire::serve(&cfg, None, 2);
    let mut held = Vec::new();
    for _ in 0..4 {
        let tcp = TcpStream::connect(gw.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        let resp = sender
            .send_request(get(&format!("http://{}/", gw.addr)))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let _ = text(resp).await;
        held.push((sender, conn));
    }
    let (lines, cpu) = (gw.lines(), gw.cpu_ticks());
    let fifth = tokio::spawn(send_h1(gw.addr, get(&format!("http://{}/fifth", gw.addr))));
    // The window in which nothing may happen: no answer, no log lines, no CPU burnt.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!fifth.is_finished(), "a fifth connection was served");
    assert!(gw.lines() <= lines + 2, "logged while waiting");
    let busy = gw.cpu_ticks() - cpu;
    assert!(busy <= 20, "used {busy} ticks of CPU in 1 s of waiting");
    let (sender, conn) = held.pop().unwrap();
    drop(sender);
    let _ = conn.await;
    let resp = timeout(BOUND, fifth)
        .await
        .expect("served once a place freed");
    assert_eq!(resp.unwrap().status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_gateway_backs_off_and_logs_once_a_second() {
    let up = echo_upstream().await;
    let cfg = crate::common::process::temp_file(
        "emfile.toml",
        &config(up, "header_timeout = \"1s\"", ""),
    );
    let gw = wire::serve(&cfg, Some(64), 2);
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(TcpStream::connect(gw.addr).await.unwrap());
    }
    let cpu = gw.cpu_ticks();
    // Past 64 descriptors accept() fails at once, every time: watch a 1.5 s window.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let warned = gw.count("accept failed");
    assert!(
        (1..=3).contains(&warned),
        "{warned} accept warnings in 1.5 s"
    );
    let busy = gw.cpu_ticks() - cpu;
    assert!(
        busy <= 30,
        "used {busy} ticks of CPU in 1.5 s of backing off"
    );
    drop(silent);
    let resp = timeout(
        BOUND,
        send_h1(gw.addr, get(&format!("http://{}/after", gw.addr))),
    )
    .await
    .expect("served once descriptors are free");
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_hyper_refuses_is_counted_as_431() {
    let gw = gateway("").await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let big = "a".repeat(20 * 1024);
    let head = format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = timeout(
        BOUND,
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut buf),
    )
    .await;
    assert!(
        buf.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&buf)
    );
    // The count lands as the connection ends, just after the client saw the close.
    let admin = gw.addrs.admin_listen.unwrap();
    let needle = "tollgate_requests_total{route=\"-\",status=\"431\"}";
    let deadline = Instant::now() + BOUND;
    loop {
        let counted = metric_sum(&metrics_text(admin).await, needle);
        if counted == 1.0 {
            break;
        }
        assert!(
            counted == 0.0 && Instant::now() < deadline,
            "counted {counted}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tollgate_workers_must_be_at_least_one() {
    let cfg = crate::common::process::temp_file("workers.toml", &config(dead_port().await, "", ""));
    for bad in ["0", "many"] {
        let out = crate::common::process::tollgate()
            .args(["serve", "-c"])
            .arg(&cfg)
            .env("TOLLGATE_WORKERS", bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "TOLLGATE_WORKERS={bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("TOLLGATE_WORKERS must be a whole number of at least 1"),
            "{stderr}"
        );
    }
    // A valid value sizes the worker threads (each names itself as it starts).
    let gw = wire::serve(&cfg, None, 5);
    let deadline = Instant::now() + BOUND;
    loop {
        let workers = gw.threads("tollgate-worker");
        assert!(workers <= 5, "{workers} worker threads");
        if workers == 5 {
            break;
        }
        assert!(Instant::now() < deadline, "{workers} worker threads");
        tokio::task::yield_now().await;
    }
}
