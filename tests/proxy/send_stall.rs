//! A response its client does not take (like nginx's `send_timeout`): an HTTP/1.1 client
//! that stops reading a large body, or an HTTP/2 client whose flow-control window stays
//! shut, has the exchange ended after `body_timeout` without progress — the upstream slot
//! and the permits come back, the HTTP/1.1 connection is closed and the HTTP/2 stream alone
//! is reset. Seen: the body watchdog only runs while hyper pulls the body, which it stops
//! doing for such a client, so one client held every upstream slot for as long as it liked.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::ConfigBuilder;
use crate::common::*;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of the `/big` answer: far more than every socket buffer between upstream and client.
const BIG: u64 = 1 << 30;

/// An upstream that answers `/big` with [`BIG`] bytes, as fast as they are taken, and
/// anything else with `ok`; keep-alive.
async fn big_body_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(answer_all(s));
        }
    });
    addr
}

async fn answer_all(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf).await {
        if !buf[..n].starts_with(b"GET /big") {
            let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            if s.write_all(ok.as_bytes()).await.is_err() {
                return;
            }
            continue;
        }
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n");
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..BIG / chunk.len() as u64 {
            if s.write_all(&chunk).await.is_err() {
                return;
            }
        }
    }
}

/// One upstream slot (`max_connections = 1`), a short `body_timeout`, and a longer
/// `upstream_timeout` for a second client to wait for that slot.
fn one_slot_config(up: SocketAddr) -> String {
    ConfigBuilder::new("body_timeout = \"1s\"\nupstream_timeout = \"8s\"")
        .text(&format!(
            "[upstreams.app]\nurls = [\"http://{up}\"]\nmax_connections = 1\n"
        ))
        .app_route("all", "")
        .build()
}

/// The status of a plain request on a fresh connection (waits for the slot if need be).
async fn status_of(addr: SocketAddr, path: &str) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out.split(' ').nth(1).and_then(|s| s.parse().ok());
    status.unwrap_or_else(|| panic!("no status in {out:?}"))
}

/// Read `total` bytes of the answer on `s` in 256 KiB bursts 50 ms apart: a slow reader,
/// far slower than the socket, never silent for `body_timeout`. (The kernel wakes a
/// blocked writer only once much of its send buffer is free, which on loopback is
/// megabytes: the gateway sees progress every few hundred milliseconds.)
async fn read_slowly(s: &mut TcpStream, total: usize) {
    let mut burst = vec![0u8; 256 * 1024];
    let mut read = 0;
    while read < total {
        let n = s.read(&mut burst).await.unwrap();
        assert!(n > 0, "a slow reader was cut off after {read} bytes");
        read += n;
        if read % burst.len() < n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_stops_reading_is_cut_off_but_a_slow_one_is_not() {
    let up = big_body_upstream().await;
    let gw = Gateway::start(&one_slot_config(up)).await;
    // A slow reader takes more than every buffer holds, for longer than body_timeout.
    let mut slow = TcpStream::connect(gw.addrs.listen).await.unwrap();
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    read_slowly(&mut slow, 12 << 20).await;
    drop(slow);
    let mut stopped = TcpStream::connect(gw.addrs.listen).await.unwrap();
    stopped
        .write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 16];
    stopped.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK\r");
    // It reads nothing more. Another client waits for the one upstream slot, and gets it
    // once the stopped response has made no progress for body_timeout.
    assert_eq!(status_of(gw.addrs.listen, "/small").await, 200);
    // The stopped client's connection was closed: what the buffers held, then the end.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stopped.read_to_end(&mut rest));
    let _ = read.await.expect("the connection is closed");
    assert!((rest.len() as u64) < BIG, "the whole body was sent");
    cut_counted(&gw).await;
}

/// `tollgate_timeouts_total{kind="send"}` counted one cut, and nothing else was cut.
async fn cut_counted(gw: &Gateway) {
    let admin = gw.addrs.admin_listen.expect("an admin listener");
    let send = "tollgate_timeouts_total{kind=\"send\"}";
    eventually(
        "the cut is counted",
        Duration::from_secs(5),
        || async move { metric_sum(&metrics_text(admin).await, send) == 1.0 },
    )
    .await;
    let all = metric_sum(&metrics_text(admin).await, "tollgate_timeouts_total");
    assert_eq!(all, 1.0, "only the stalled response was cut");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_with_a_shut_window_is_reset_alone_and_frees_the_slot() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let up = big_body_upstream().await;
    let gw = Gateway::start(&one_slot_config(up)).await;
    let stream = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(0)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender.send_request(get(&gw.url("/small"))).await.unwrap();
    assert_eq!(resp.status(), 200);
    // Its two bytes can never be sent. Another client gets the upstream slot once the
    // stream has waited body_timeout on its client.
    assert_eq!(status_of(gw.addrs.listen, "/small").await, 200);
    let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
    assert!(
        body.expect("the stalled stream ends").is_err(),
        "the stalled stream is reset, not finished"
    );
    // The connection itself stays open: a new stream on it is answered.
    sender.ready().await.expect("the connection is still open");
    let again = sender.send_request(get(&gw.url("/small"))).await.unwrap();
    assert_eq!(again.status(), 200);
    cut_counted(&gw).await;
}

/// An HTTP/2 client that reads steadily — a 64 KiB window (RFC 9113's default, what many h2
/// libraries keep), 64 KiB taken every 250 ms, never silent for body_timeout — is not cut
/// off. (Was: cut after ~1.2 MB: a stream's clock moves when hyper pulls a body frame,
/// which it does once the client took nearly all of the last one, and upstream frames were
/// up to ~400 KiB; they are handed over in 16 KiB pieces now.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_but_reading_http2_client_is_not_cut_off() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let up = big_body_upstream().await;
    let gw = Gateway::start(&one_slot_config(up)).await;
    let stream = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender.send_request(get(&gw.url("/big"))).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let (mut read, mut since_pause) = (0usize, 0usize);
    // 2 MiB at ~256 KiB/s: about 8 s of steady reading, never a pause over 250 ms.
    while read < 2 << 20 {
        let frame = body
            .frame()
            .await
            .expect("the body goes on")
            .unwrap_or_else(|e| {
                panic!("a steadily reading client was cut off after {read} bytes: {e}")
            });
        if let Ok(data) = frame.into_data() {
            read += data.len();
            since_pause += data.len();
        }
        if since_pause >= 64 * 1024 {
            since_pause = 0;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
