//! What a backend receives for the proxy chapter's odd request (`docs/src/proxy.md`): the
//! page's config in front of a backend that answers with the request head it was sent, byte
//! for byte, and the request written as the page's `curl` writes it.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::page_toml;
use crate::common::Gateway;
use crate::common::shown::{ID, PORT, assert_text};

/// Reads one request head from `s`.
async fn head(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    while !buf.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if s.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    String::from_utf8(buf).unwrap()
}

/// A backend answering every request with its head as received.
async fn head_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let got = head(&mut s).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{got}",
                    got.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_echoing_backend_receives() {
    let up = head_echo().await;
    let toml = page_toml("docs/src/proxy.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    let gw = Gateway::start(&toml).await;
    let addr = gw.addrs.listen;
    // curl 7.88.1's request for the page's command line, headers in its order.
    let request = format!(
        "GET //api/./%6Cogin?x=%41 HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: curl/7.88.1\r\n\
         Accept: */*\r\nX-Forwarded-For: 1.2.3.4\r\nX_Forwarded_Host: evil\r\n\
         X-HTTP-Method-Override: DELETE\r\nProxy: http://evil\r\n\
         Connection: keep-alive, X-Foo\r\nX-Foo: bar\r\n\r\n"
    );
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let answer = head(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let length: usize = answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a content-length");
    let mut received = vec![0u8; length];
    s.read_exact(&mut received).await.unwrap();
    let received = String::from_utf8(received).unwrap().replace("\r\n", "\n");
    // `via` names this gateway by a token of its own.
    let via = (r"via: 1\.1 tollgate-[0-9a-f]+", "via: 1.1 tollgate-<NODE>");
    assert_text("proxy-echo", &received, &[ID, PORT, via]);
}
