//! Heap allocations a request on the gateway's request path (issue 37's "allocation count a
//! request"): the whole gateway in this process, behind a counting wrapper of the allocator
//! the binary uses (mimalloc), and nothing else in the process that allocates per request.
//! The client and the upstream are plain `std` threads that write fixed bytes and read into
//! fixed buffers, so every allocation counted over the measured requests is the gateway's
//! (its runtime and background tasks included, which over 20 000 requests is noise), with
//! logging as `tollgate serve` starts it by default (the access log on, into /dev/null).
//!
//! Rows, as `instructions.sh`'s: `plain` (a route without policies), `local` (one local
//! GCRA keyed by client IP, never reached), `abuse` (a local GCRA limited to 100/s: almost
//! every answer is a 429 the gateway makes itself), `central` (one GCRA keyed by client IP
//! decided in a `redis-server` this bench starts on a free port, never reached: what a
//! store call costs the gateway when nothing else is queued on its connection). One
//! keep-alive connection, one request at a time, 2 000 requests of warm-up then
//! `REQUESTS` (20 000) measured.
//!
//! Run: `cargo bench --bench allocations` (seconds). Counts are not timings: they repeat
//! from run to run on any machine, so a change to the request path reads as a difference
//! of counts, which `BENCHMARKS.md` records with the commit.

use std::alloc::{GlobalAlloc, Layout};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use std::time::Duration;

use mimalloc::MiMalloc;
use tollgate::telemetry::{self, AccessBuffer, AccessFile, AccessLog, LogFormat};

/// Counts calls into the allocator, then hands them to mimalloc.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed unchanged to mimalloc, a correct allocator; the counters
// are atomics that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        unsafe { MiMalloc.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new_size.saturating_sub(layout.size()) as u64, Relaxed);
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Requests before counting and counted, under `cargo bench`; `cargo test --benches`
/// (no `--bench` argument, an unoptimised build) runs a tenth of each, to show it works.
const WARM_UP: u64 = 2_000;
const REQUESTS: u64 = 20_000;

/// The upstream's one answer, as `instructions.sh`'s nginx gives it.
const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nhello\n";

/// An upstream that answers every request head with [`ANSWER`], one thread a connection.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || serve_upstream(conn));
        }
    });
    addr
}

fn serve_upstream(mut conn: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    let mut filled = 0;
    loop {
        let Ok(n) = conn.read(&mut buf[filled..]) else {
            return;
        };
        if n == 0 {
            return;
        }
        filled += n;
        // GET requests: no body, so each head ends a request.
        while let Some(end) = find(&buf[..filled], b"\r\n\r\n") {
            if conn.write_all(ANSWER).is_err() {
                return;
            }
            buf.copy_within(end + 4..filled, 0);
            filled -= end + 4;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The value of `Content-Length` in a response head (no allocation).
fn content_length(head: &[u8]) -> usize {
    head.split(|&b| b == b'\n')
        .find_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let (name, value) = line.split_at(colon);
            name.eq_ignore_ascii_case(b"content-length")
                .then(|| std::str::from_utf8(&value[1..]).ok()?.trim().parse().ok())
                .flatten()
        })
        .expect("the gateway's answers carry Content-Length")
}

/// Send `n` requests for `path` on `conn`, one at a time; the statuses' first digit counts.
fn drive(conn: &mut TcpStream, request: &[u8], n: u64) -> [u64; 6] {
    let mut buf = [0u8; 64 * 1024];
    let mut statuses = [0u64; 6];
    for _ in 0..n {
        conn.write_all(request).expect("send a request");
        let mut filled = 0;
        let end = loop {
            let got = conn.read(&mut buf[filled..]).expect("read an answer");
            assert!(got > 0, "the gateway closed the connection");
            filled += got;
            if let Some(end) = find(&buf[..filled], b"\r\n\r\n") {
                break end + 4;
            }
        };
        let total = end + content_length(&buf[..end]);
        while filled < total {
            filled += conn.read(&mut buf[filled..total]).expect("read a body");
        }
        statuses[usize::from(buf[9] - b'0').min(5)] += 1;
    }
    statuses
}

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[store]
kind = "redis"
urls = ["redis://REDIS"]
timeout = "1s"
[upstreams.app]
urls = ["http://UPSTREAM"]
[policies.local]
key = ["ip"]
algorithm = "gcra"
limit = 1000000000
period = "1s"
[policies.abuse]
key = ["ip"]
algorithm = "gcra"
limit = 100
period = "1s"
[policies.central]
key = ["ip"]
algorithm = "gcra"
limit = 1000000000
period = "1s"
site = "central"
[[routes]]
name = "central"
match = { path_prefix = "/central" }
upstream = "app"
policies = ["central"]
[[routes]]
name = "local"
match = { path_prefix = "/local" }
upstream = "app"
policies = ["local"]
[[routes]]
name = "abuse"
match = { path_prefix = "/abuse" }
upstream = "app"
policies = ["abuse"]
[[routes]]
name = "plain"
match = { path_prefix = "/" }
upstream = "app"
"#;

/// A `redis-server` on a free loopback port, killed (by its pid) when dropped.
struct Redis {
    child: Child,
    addr: SocketAddr,
}

impl Redis {
    fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server (scripts/test.sh installs it)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut redis = Redis { child, addr };
        for _ in 0..500 {
            if TcpStream::connect(addr).is_ok() {
                return redis;
            }
            if let Ok(Some(status)) = redis.child.try_wait() {
                panic!("redis-server exited at start: {status}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not listen on {addr} within 5 s");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let scale = match std::env::args().any(|a| a == "--bench") {
        true => 1,
        false => 10,
    };
    let (warm_up, requests) = (WARM_UP / scale, REQUESTS / scale);
    let up = upstream();
    let redis = Redis::start();
    let text = CONFIG
        .replace("UPSTREAM", &up.to_string())
        .replace("REDIS", &redis.addr.to_string());
    let origin = Path::new("benches/allocations.rs");
    let raw = tollgate::config::parse_str(&text, origin).expect("the bench config parses");
    let config = tollgate::config::validate(raw, origin).expect("the bench config is valid");
    // Logging as `tollgate serve` starts it by default (text lines, the access log on, a
    // 64 KiB buffer flushed every second), into /dev/null: its lines are a request's cost.
    let access = AccessLog {
        buffer: AccessBuffer {
            bytes: 65_536,
            flush: Duration::from_secs(1),
        },
        file: Some(AccessFile::open(Path::new("/dev/null")).expect("open /dev/null")),
    };
    let _log = telemetry::init(LogFormat::Text, "info", Some(access));
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let server = rt
        .block_on(tollgate::server::Server::bind(config))
        .expect("the gateway binds")
        .workers(1);
    let listen = server.addrs().listen;
    rt.spawn(server.run(std::future::pending()));

    println!(
        "| row | requests | statuses | allocations / request | reallocations / request | bytes / request |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: |");
    for (row, path) in [
        ("plain", "/bench"),
        ("local", "/local"),
        ("abuse", "/abuse"),
        ("central", "/central"),
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\n\r\n");
        let mut conn = TcpStream::connect(listen).expect("connect to the gateway");
        conn.set_nodelay(true).expect("nodelay");
        drive(&mut conn, request.as_bytes(), warm_up);
        let before = (
            ALLOCS.load(Relaxed),
            REALLOCS.load(Relaxed),
            BYTES.load(Relaxed),
        );
        let statuses = drive(&mut conn, request.as_bytes(), requests);
        let after = (
            ALLOCS.load(Relaxed),
            REALLOCS.load(Relaxed),
            BYTES.load(Relaxed),
        );
        let per = |a: u64, b: u64| (b - a) as f64 / requests as f64;
        match row {
            "abuse" => assert!(statuses[4] * 10 >= requests * 9, "{row}: {statuses:?}"),
            _ => assert_eq!(statuses[2], requests, "{row}: {statuses:?}"),
        }
        println!(
            "| {row} | {requests} | 2xx {} 4xx {} 5xx {} | {:.2} | {:.2} | {:.0} |",
            statuses[2],
            statuses[4],
            statuses[5],
            per(before.0, after.0),
            per(before.1, after.1),
            per(before.2, after.2),
        );
    }
}
