//! The access log of the real binary: every answer the gateway makes itself — a refused
//! path (400), a body over the limit (413), a loop (508), a head too large (431) — is a line
//! with its status, like a forwarded request's, and shows the canonical path it routed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::process::{temp_file, tollgate};

/// Send `head` on a fresh blocking connection and return the status line's code.
fn status(addr: SocketAddr, head: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The access-log lines (JSON) whose `status` is `code`.
fn lines_with(log: &Mutex<Vec<serde_json::Value>>, code: u64) -> Vec<serde_json::Value> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|v| v["target"] == "tollgate::access" && v["status"] == code)
        .cloned()
        .collect()
}

#[test]
fn answers_the_gateway_makes_itself_are_logged() {
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = up.local_addr().unwrap().port();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nvia_pseudonym = \"tg-log\"\nmax_body_bytes = 10\n\
         [upstreams.app]\nurls = [\"http://127.0.0.1:{port}\"]\n[[routes]]\nname = \"all\"\nupstream = \"app\"\n"
    );
    let path = temp_file("access.toml", &config);
    let mut child = tollgate()
        .args(["serve", "-c"])
        .arg(&path)
        .env("RUST_LOG", "info")
        .env("TOLLGATE_LOG_FORMAT", "json")
        .env("TOLLGATE_WORKERS", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v["message"] == "tollgate listening" {
                let _ = tx.send(v["listen"].as_str().unwrap_or("").to_owned());
            }
            sink.lock().unwrap().push(v);
        }
    });
    let addr: SocketAddr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("tollgate listens")
        .parse()
        .unwrap();
    let c = "Connection: close\r\n";
    assert_eq!(
        status(addr, &format!("GET /a%2Fb HTTP/1.1\r\nHost: a\r\n{c}\r\n")),
        400
    );
    let big = format!("POST /x/../up HTTP/1.1\r\nHost: a\r\nContent-Length: 99\r\n{c}\r\n");
    assert_eq!(status(addr, &big), 413);
    let looped = format!("GET / HTTP/1.1\r\nHost: a\r\nVia: 1.1 tg-log\r\n{c}\r\n");
    assert_eq!(status(addr, &looped), 508);
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n{c}\r\n",
        "a".repeat(20_000)
    );
    assert_eq!(status(addr, &huge), 431);
    let deadline = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let found: Vec<usize> = [400, 413, 508, 431]
            .iter()
            .map(|&code| lines_with(&log, code).len())
            .collect();
        if found.iter().all(|&n| n >= 1) || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        found,
        vec![1, 1, 1, 1],
        "one access line per answer: {:?}",
        log.lock().unwrap()
    );
    let too_large = &lines_with(&log, 413)[0];
    assert_eq!(too_large["path"], "/up", "the canonical path is logged");
    assert_eq!(
        lines_with(&log, 400)[0]["path"],
        "/a%2Fb",
        "a refused path is logged raw"
    );
}
