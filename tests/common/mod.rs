//! Test harness: real upstream servers, a real gateway on port 0, and real clients.
#![allow(dead_code)]

pub mod backend;
pub mod browser;
pub mod config;
pub mod config_fixtures;
pub mod drop_reply;
pub mod faulty;
pub mod grpc;
pub mod limits;
pub mod otlp;
pub mod peers;
pub mod process;
pub mod readers;
pub mod redis;
pub mod reload;
pub mod returns;
pub mod rls;
pub mod sentinel;
pub mod shown;
pub mod simulate;
pub mod temp;
pub mod tls_backend;
pub mod wire;
pub mod words;
pub mod xds;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub type TestBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<TestBody>> + Send>>
        + Send
        + Sync,
>;

pub fn body(b: impl Into<Bytes>) -> TestBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

pub fn repo_path(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// A quota figure the caller knows is not zero.
pub fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("non-zero")
}

/// `config` with its failures persisted beside the test's source file
/// (`tests/<area>/foo.proptest-regressions`). Proptest's default looks for a `main.rs` or
/// `lib.rs` above the source file, finds the area's `main.rs` and would write
/// `tests/proptest-regressions/foo.txt` instead, away from the cases already recorded.
pub fn beside_source(config: proptest::test_runner::Config) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..config
    }
}

/// A real HTTP server (HTTP/1.1 with upgrades, and h2c) running `handler` for every request.
pub async fn upstream<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<TestBody>> + Send + 'static,
{
    let handler: Handler = Arc::new(move |req| Box::pin(handler(req)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let http = auto::Builder::new(TokioExecutor::new());
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            let http = http.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = http
                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// An upstream answering every request with 200 and a JSON echo of what it received.
pub async fn echo_upstream() -> SocketAddr {
    upstream(|req: Request<Incoming>| async move {
        let headers: serde_json::Map<String, serde_json::Value> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .fold(serde_json::Map::new(), |mut m, (k, v): (String, String)| {
                // Repeated headers are joined so tests can see duplicates.
                match m.get_mut(&k) {
                    Some(serde_json::Value::String(s)) => {
                        s.push_str(" | ");
                        s.push_str(&v);
                    }
                    _ => {
                        m.insert(k, v.into());
                    }
                }
                m
            });
        let echo = serde_json::json!({
            "method": req.method().as_str(),
            "uri": req.uri().to_string(),
            "version": format!("{:?}", req.version()),
            "headers": headers,
        });
        Response::new(body(echo.to_string()))
    })
    .await
}

/// A gateway running in-process on ephemeral ports.
pub struct Gateway {
    pub addrs: tollgate::server::Addrs,
    pub limiter: Arc<tollgate::limit::Limiter>,
    /// `/activity`'s sampler when the test ticks it ([`Gateway::start_sampled_by_hand`]).
    pub sampler: Option<tollgate::server::Sampler>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Start from TOML text; relative paths resolve against the repository root.
    pub async fn start(toml: &str) -> Gateway {
        Self::start_with_clock(toml, Arc::new(tollgate::limit::clock::SystemClock::new())).await
    }

    /// Start with the limiter on `clock` (a `ManualClock` makes limits deterministic).
    pub async fn start_with_clock(
        toml: &str,
        clock: Arc<dyn tollgate::limit::clock::Clock>,
    ) -> Gateway {
        Self::start_with(toml, clock, None, false).await
    }

    /// Start with `/activity`'s sampler ticked by the test only (`gw.sampler`), never by
    /// the 10-second timer: the test says which requests fall in which bucket.
    pub async fn start_sampled_by_hand(toml: &str) -> Gateway {
        let clock = Arc::new(tollgate::limit::clock::SystemClock::new());
        Self::start_with(toml, clock, None, true).await
    }

    /// Start with `workers` worker threads (default: one per core), so that every
    /// connection is served by the same worker (and its one store connection) with 1.
    pub async fn start_with_workers(toml: &str, workers: usize) -> Gateway {
        let clock = Arc::new(tollgate::limit::clock::SystemClock::new());
        Self::start_with(toml, clock, Some(workers), false).await
    }

    async fn start_with(
        toml: &str,
        clock: Arc<dyn tollgate::limit::clock::Clock>,
        workers: Option<usize>,
        by_hand: bool,
    ) -> Gateway {
        let origin = repo_path("inline-test.toml");
        let raw = tollgate::config::parse_str(toml, &origin).expect("test config parses");
        let cfg = tollgate::config::validate(raw, &origin).expect("test config is valid");
        let mut server = tollgate::server::Server::bind_with_clock(cfg, clock)
            .await
            .expect("gateway binds");
        if let Some(n) = workers {
            server = server.workers(n);
        }
        let mut sampler = None;
        if by_hand {
            let (s, by_hand) = server.sample_by_hand();
            (server, sampler) = (s, Some(by_hand));
        }
        let addrs = server.addrs();
        let limiter = server.limiter().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Gateway {
            addrs,
            limiter,
            sampler,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addrs.listen, path)
    }

    /// Begin graceful shutdown; returns the task to await for completion.
    pub fn shutdown(&mut self) -> JoinHandle<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.take().expect("shutdown once")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A minimal config: one upstream `app`, one catch-all route `api`, plus `extra` TOML.
pub fn config(upstream: SocketAddr, extra_server: &str, extra: &str) -> String {
    config::ConfigBuilder::new(extra_server)
        .upstream(upstream)
        .text(&format!(
            "[[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n{extra}\n"
        ))
        .build()
}

/// Poll `cond` until it holds; fail after `within`. For state that another process changes
/// on its own schedule (heartbeats, key expiry): a bounded wait on a condition, not a sleep.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !cond().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One HTTP/1.1 request on a fresh connection.
pub async fn send_h1<B>(addr: SocketAddr, req: Request<B>) -> Response<Incoming>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    sender.send_request(req).await.unwrap()
}

/// One HTTP/2 (prior knowledge) request on a fresh connection.
pub async fn send_h2<B>(addr: SocketAddr, req: Request<B>) -> Response<Incoming>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender.send_request(req).await.unwrap()
}

pub fn get(url: &str) -> Request<Empty<Bytes>> {
    Request::get(url).body(Empty::new()).unwrap()
}

pub async fn text(resp: Response<Incoming>) -> String {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

pub async fn json(resp: Response<Incoming>) -> serde_json::Value {
    serde_json::from_str(&text(resp).await).unwrap()
}

/// A loopback port with nothing listening: bound by a socket that never listens, so a
/// connection is refused, and kept bound until the test process ends, so no other test
/// running beside this one can be handed the port (a port bound and released was, and a
/// "dead" upstream answered 404 from another test's server).
pub async fn dead_port() -> SocketAddr {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    std::mem::forget(socket);
    addr
}

/// GET `path` as client `ip` (sent as `X-Forwarded-For`, which gateways that trust loopback
/// believe), with an `x-api-key` account when given.
pub async fn get_as(
    addr: SocketAddr,
    path: &str,
    ip: &str,
    account: Option<&str>,
) -> Response<Incoming> {
    let mut req = Request::get(format!("http://{addr}{path}")).header("x-forwarded-for", ip);
    if let Some(a) = account {
        req = req.header("x-api-key", a);
    }
    send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap()).await
}

/// `n` requests of client `ip` on `path` ([`get_as`]), one after another: how many passed
/// (200). Any answer but 200 or 429 fails the test, and no request may hang past 5 s (a
/// store or peer outage must not hold one).
pub async fn admitted(addr: SocketAddr, path: &str, ip: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let status = tokio::time::timeout(Duration::from_secs(5), get_as(addr, path, ip, None))
            .await
            .expect("a request hung")
            .status();
        match status {
            http::StatusCode::OK => ok += 1,
            http::StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    ok
}

/// Send `head` (and nothing else) on a fresh connection; the whole answer as text (the head
/// asks to close, or the gateway closes).
pub async fn raw(addr: SocketAddr, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the gateway answers and closes")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a [`raw`] answer.
pub fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

/// The admin endpoint's `/metrics` text.
pub async fn metrics_text(admin: SocketAddr) -> String {
    text(send_h1(admin, get(&format!("http://{admin}/metrics"))).await).await
}

/// Sum of the values of every metric line containing `needle`.
pub fn metric_sum(metrics: &str, needle: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
