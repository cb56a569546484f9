//! The workers' own HTTP/1.1 upstream connections (`proxy/upstream/h1pool.rs`): a connection the
//! upstream closed while idle costs no 502 (the request goes on a new one), and a connection
//! whose response body was still streaming when its head arrived is reused once the body is
//! done.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A raw HTTP/1.1 upstream: every request head it reads on a connection is answered with
/// `parts`, written `gap` apart; the connection is closed after `per_conn` answers (with no
/// `Connection: close`, as an upstream ending an idle keep-alive connection does). Counts
/// the connections it accepted.
async fn raw_upstream(
    parts: &'static [&'static str],
    gap: Duration,
    per_conn: usize,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                for _ in 0..per_conn {
                    head.clear();
                    while !head.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8; 1];
                        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    for (i, part) in parts.iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(gap).await;
                        }
                        if stream.write_all(part.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// One client connection to the gateway: every request on it is served by the same worker,
/// so by the same upstream connections.
async fn client(
    addr: SocketAddr,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_the_upstream_closed_costs_no_502() {
    const OK: &[&str] = &["HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"];
    let (up, accepted) = raw_upstream(OK, Duration::ZERO, 1).await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let mut c = client(gw.addrs.listen).await;
    for _ in 0..3 {
        let resp = c.send_request(get(&gw.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(text(resp).await, "ok");
        // The upstream has closed the connection by now; the gateway's copy of it is
        // closed or about to be found closed, and the next request must not fail on it.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_reused_after_its_streamed_body() {
    const STREAMED: &[&str] = &[
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n",
        "0\r\n\r\n",
    ];
    let (up, accepted) = raw_upstream(STREAMED, Duration::from_millis(50), 100).await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let mut c = client(gw.addrs.listen).await;
    for _ in 0..3 {
        let resp = c.send_request(get(&gw.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(text(resp).await, "ok");
        // Time for the connection to go back once its body is done.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one upstream connection, reused"
    );
}
