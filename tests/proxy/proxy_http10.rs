//! The gateway answers in its own HTTP version, not its upstream's (RFC 9110 §2.5): an
//! HTTP/1.0 upstream (`python3 -m http.server`, the docs' backend) does not turn the
//! client's HTTP/1.1 keep-alive connection into HTTP/1.0 answers and a closed connection.
//! Over real sockets: the client writes its requests by hand and reads the status lines.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use http::{StatusCode, Version};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// An HTTP/1.0 upstream: reads one request head per connection, answers it in HTTP/1.0
/// (no keep-alive) and closes.
async fn http10_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let answer = "HTTP/1.0 200 OK\r\nServer: old/1.0\r\nContent-Length: 2\r\n\r\nok";
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// One answer read off `conn`: its status line, head lines, and body (by Content-Length).
async fn read_answer(conn: &mut BufReader<TcpStream>) -> (String, Vec<String>, String) {
    let read = async {
        let mut status = String::new();
        assert!(
            conn.read_line(&mut status).await.unwrap() > 0,
            "connection closed"
        );
        let mut headers = Vec::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            conn.read_line(&mut line).await.unwrap();
            let line = line.trim_end().to_string();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
            headers.push(line);
        }
        let mut body = vec![0u8; length];
        conn.read_exact(&mut body).await.unwrap();
        let body = String::from_utf8(body).unwrap();
        (status.trim_end().to_string(), headers, body)
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer within 10 s")
}

/// Two requests on one client connection in `version`: both status lines.
async fn two_on_one_connection(gw: SocketAddr, version: &str) -> Vec<(String, Vec<String>)> {
    let stream = TcpStream::connect(gw).await.unwrap();
    let mut conn = BufReader::new(stream);
    let mut answers = Vec::new();
    for i in 0..2 {
        // HTTP/1.0 keeps a connection open only when asked to.
        let keep = if version == "HTTP/1.0" {
            "Connection: keep-alive\r\n"
        } else {
            ""
        };
        let head = format!("GET /{i} {version}\r\nHost: gw\r\n{keep}\r\n");
        conn.get_mut().write_all(head.as_bytes()).await.unwrap();
        let (status, headers, body) = read_answer(&mut conn).await;
        assert_eq!(body, "ok", "request {i}: {status} {headers:?}");
        answers.push((status, headers));
    }
    answers
}

fn has_close(headers: &[String]) -> bool {
    headers.iter().any(|h| {
        h.split_once(':').is_some_and(|(n, v)| {
            n.eq_ignore_ascii_case("connection") && v.trim().eq_ignore_ascii_case("close")
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_upstream_gets_http11_answers_on_one_keep_alive_connection() {
    let up = http10_upstream().await;
    let gw = Gateway::start(&config(up, "", "")).await;
    for (status, headers) in two_on_one_connection(gw.addrs.listen, "HTTP/1.1").await {
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(!has_close(&headers), "the gateway closes: {headers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_client_still_gets_http10() {
    // hyper answers an HTTP/1.0 client in HTTP/1.0 (it may not know 1.1); keep-alive, when
    // asked for, holds.
    let up = http10_upstream().await;
    let gw = Gateway::start(&config(up, "", "")).await;
    for (status, headers) in two_on_one_connection(gw.addrs.listen, "HTTP/1.0").await {
        assert_eq!(status, "HTTP/1.0 200 OK");
        assert!(!has_close(&headers), "the gateway closes: {headers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_of_an_http10_upstream_is_unaffected() {
    let up = http10_upstream().await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let url = gw.url("/");
    let resp = send_h2(gw.addrs.listen, get(&url)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.version(), Version::HTTP_2);
    assert_eq!(text(resp).await, "ok");
}

/// `python3 -m http.server` on a free port, serving an empty directory: the docs' backend.
struct PythonServer {
    child: Child,
    addr: SocketAddr,
    dir: std::path::PathBuf,
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn python_server() -> Option<PythonServer> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("tollgate-http10-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    Some(PythonServer { child, addr, dir })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_http_server_behind_the_gateway_keeps_the_connection() {
    let Some(py) = python_server() else {
        eprintln!("skipped: no python3");
        return;
    };
    eventually(
        "python http.server listens",
        Duration::from_secs(10),
        || async { TcpStream::connect(py.addr).await.is_ok() },
    )
    .await;
    let gw = Gateway::start(&config(py.addr, "", "")).await;
    let stream = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let mut conn = BufReader::new(stream);
    for _ in 0..2 {
        conn.get_mut()
            .write_all(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .unwrap();
        let (status, headers, _) = read_answer(&mut conn).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(!has_close(&headers), "the gateway closes: {headers:?}");
    }
}
