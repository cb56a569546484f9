//! A WebSocket tunnel is its request still in flight: it holds the request's concurrency
//! permits (and its upstream slot) until it closes, whichever side closes it or however
//! long it stayed open, so a `concurrency` limit bounds open tunnels as it bounds requests.
//! Seen: the permits rode on the `101`'s empty body and came back the moment the head was
//! sent, so one client held as many tunnels (and upstream slots) as it liked.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::config::ConfigBuilder;
use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WS: &[u8] =
    b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

/// An upstream that switches every request to WebSocket, then echoes bytes until the
/// client closes.
async fn echo_socket_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if s.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                let switch = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
                let _ = s.write_all(switch.as_bytes()).await;
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    let _ = s.write_all(&buf[..n]).await;
                }
            });
        }
    });
    addr
}

/// One tunnel at a time per client IP, and a tunnel idle for `idle_timeout` is closed.
fn one_tunnel_config(up: SocketAddr, idle: &str) -> String {
    ConfigBuilder::new(&format!("idle_timeout = \"{idle}\""))
        .upstream(up)
        .policy("sockets", &["ip"], "concurrency", 1, "1s", "")
        .app_route("ws", "policies = [\"sockets\"]")
        .build()
        // concurrency has no period
        .replace("period = \"1s\"\n", "")
}

/// Ask for an upgrade on a fresh connection: the status, and the connection.
async fn upgrade(addr: SocketAddr) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(WS).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte)).await;
        match read.expect("an answer head within 10 s") {
            Ok(1) => head.push(byte[0]),
            other => panic!("the head was cut off: {other:?} after {head:?}"),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    (status.unwrap_or_else(|| panic!("no status in {head:?}")), s)
}

/// The tunnel on `s` carries bytes both ways.
async fn echoes(s: &mut TcpStream) {
    s.write_all(b"ping").await.unwrap();
    let mut four = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut four))
        .await
        .expect("an echo within 5 s")
        .unwrap();
    assert_eq!(&four, b"ping");
}

/// Wait until `s` is closed by the gateway (EOF or reset), at most `within`.
async fn closed(s: &mut TcpStream, within: Duration) {
    let mut buf = [0u8; 64];
    loop {
        let read = tokio::time::timeout(within, s.read(&mut buf)).await;
        match read.expect("the tunnel is closed in time") {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

/// The permit comes back as the closed tunnel's task ends, a moment after the client saw
/// the close: upgrade again until a `101` (only `429`s meanwhile), for at most 5 s.
async fn upgrade_once_free(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, s) = upgrade(addr).await;
        match status {
            101 => return s,
            429 if Instant::now() < deadline => continue,
            other => panic!("the closed tunnel's permit never came back (last: {other})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_tunnel_holds_its_concurrency_permit_until_it_closes() {
    let up = echo_socket_upstream().await;
    let gw = Gateway::start(&one_tunnel_config(up, "30s")).await;
    let (status, mut first) = upgrade(gw.addrs.listen).await;
    assert_eq!(status, 101);
    echoes(&mut first).await;
    // While the first tunnel is open, more from the same client are refused.
    for _ in 0..3 {
        let (status, _refused) = upgrade(gw.addrs.listen).await;
        assert_eq!(
            status, 429,
            "a concurrency limit of 1 let a second tunnel open"
        );
    }
    echoes(&mut first).await;
    // The client closes the first tunnel (and waits for the upstream's side to close too).
    first.shutdown().await.unwrap();
    closed(&mut first, Duration::from_secs(5)).await;
    let mut second = upgrade_once_free(gw.addrs.listen).await;
    echoes(&mut second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_closed_for_idleness_gives_its_concurrency_permit_back() {
    let up = echo_socket_upstream().await;
    let gw = Gateway::start(&one_tunnel_config(up, "300ms")).await;
    let (status, mut first) = upgrade(gw.addrs.listen).await;
    assert_eq!(status, 101);
    let (status, _refused) = upgrade(gw.addrs.listen).await;
    assert_eq!(
        status, 429,
        "the idle tunnel is still open: its permit is held"
    );
    // Nothing crosses the tunnel: the gateway closes it after idle_timeout.
    closed(&mut first, Duration::from_secs(5)).await;
    let mut second = upgrade_once_free(gw.addrs.listen).await;
    echoes(&mut second).await;
}
