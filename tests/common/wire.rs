//! Raw-socket helpers for the connection tests: HTTP/1.1 responses read by hand, HTTP/2
//! frames written and read by hand (to see GOAWAY and PING, which clients hide), a TLS
//! client, a slow upstream, and `tollgate serve` as a process whose log lines and CPU time
//! the test can count.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read one HTTP/1.1 response (head and a content-length or chunked body); returns the head.
pub async fn read_response(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let body = &buf[end + 4..];
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse::<usize>().unwrap());
            let complete = match length {
                Some(n) => body.len() >= n,
                None => body.ends_with(b"0\r\n\r\n"),
            };
            if complete {
                return head;
            }
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the peer closed: the read returns 0 or fails.
pub async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1024];
    loop {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;

/// One HTTP/2 frame: type, flags, stream id, payload.
pub fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The preface, empty SETTINGS and `GET /` on stream 1 (HPACK: static :method GET,
/// :path /, :scheme http, then :authority literal).
pub fn h2_get() -> Vec<u8> {
    let mut block = vec![0x82, 0x84, 0x86, 0x41, 9];
    block.extend_from_slice(b"localhost");
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(0x1, 0x4 | END_STREAM, 1, &block));
    out
}

/// Read the next frame, answering SETTINGS and PING as a well-behaved client does;
/// `None` once the server closed.
pub async fn next_frame(s: &mut TcpStream) -> Option<(u8, u8, u32)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let (ty, flags) = (head[3], head[4]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.ok()?;
    let reply = match (ty, flags & ACK) {
        (SETTINGS, 0) => Some(frame(SETTINGS, ACK, 0, &[])),
        (PING, 0) => Some(frame(PING, ACK, 0, &payload)),
        _ => None,
    };
    if let Some(r) = reply {
        let _ = s.write_all(&r).await;
    }
    Some((ty, flags, stream))
}

/// A TLS client trusting the shipped development certificate (as in tests/proxy/tls.rs).
pub fn tls_connector() -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let pem = crate::common::repo_path("certs/localhost.pem");
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(pem).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// An upstream slower than the idle timeout under test: `/slow` answers after a second,
/// `/slow-body` sends its head at once and its body a second later.
pub async fn slow_upstream() -> std::net::SocketAddr {
    crate::common::upstream(|req| async move {
        let later = || async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(hyper::body::Frame::data(bytes::Bytes::from("fine")))
        };
        match req.uri().path() {
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                http::Response::new(crate::common::body("fine"))
            }
            "/slow-body" => {
                let stream = futures_util::stream::once(later());
                http::Response::new(http_body_util::BodyExt::boxed(
                    http_body_util::StreamBody::new(stream),
                ))
            }
            _ => http::Response::new(crate::common::body("fine")),
        }
    })
    .await
}

/// `tollgate serve` with every stderr line kept; killed by pid on drop.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Log lines so far whose message contains `needle`.
    pub fn count(&self, needle: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(needle)).count()
    }

    /// Threads whose name starts with `prefix` (Linux truncates names to 15 bytes).
    pub fn threads(&self, prefix: &str) -> usize {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap();
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with(prefix))
            .count()
    }

    pub fn lines(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// CPU time the process has used (user + system), in clock ticks (Linux).
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
}

/// Start `tollgate serve -c config` on `workers` worker threads (through `sh` when
/// `nofile` caps its descriptors).
pub fn serve(config: &Path, nofile: Option<u32>, workers: usize) -> Served {
    let bin = env!("CARGO_BIN_EXE_tollgate");
    let mut cmd = match nofile {
        None => Command::new(bin),
        Some(n) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(bin);
            c
        }
    };
    let mut child = cmd
        .args(["serve", "-c"])
        .arg(config)
        .env("RUST_LOG", "info,tollgate::access=warn")
        .env("TOLLGATE_LOG_FORMAT", "json")
        .env("TOLLGATE_WORKERS", workers.to_string())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("tollgate exited before listening")
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "tollgate listening" {
            break v["listen"].as_str().unwrap().parse().unwrap();
        }
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            keep.lock().unwrap().push(line);
        }
    });
    Served { child, addr, log }
}
