//! The lease site around faults, on a real Redis behind a delay proxy: a request dropped
//! mid-refill (client reset, HTTP/2 `RST_STREAM`) does not leave its key denied; one
//! request waits at most one store `timeout` in all on the lease site.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::config::fleet;
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::process::in_own_process;
use crate::common::redis::RedisServer;
use crate::common::*;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// One route `api` on a leased gcra policy keyed by client IP, Redis through `store`.
fn config(up: SocketAddr, store: &str, timeout: &str, policy: &str, on_error: &str) -> String {
    fleet(up, "heartbeat = \"1h\"")
        .patient_redis(store, timeout)
        .text(&format!(
            "[policies.leased]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nsite = \"lease\"\n{policy}\n"
        ))
        .app_route("api", &format!(
            "match = {{ path_prefix = \"/\" }}\npolicies = [\"leased\"]\non_store_error = \"{on_error}\""
        ))
        .build()
}

/// The gateway's own decision for client `ip`, as the limit step makes it.
async fn admits(gw: &Gateway, ip: &str) -> bool {
    let ip: IpAddr = ip.parse().unwrap();
    let a = gw
        .limiter
        .check(0, &Arc::from("api"), ip, &Method::GET, &HeaderMap::new())
        .await;
    a.admitted()
}

/// Load the lease script while the link is fast, so a later call is one round trip.
async fn warm_up(gw: &Gateway) {
    assert!(admits(gw, "192.0.2.250").await, "the store answers");
}

/// An HTTP/2 request as `ip`, dropped after `after`: the client resets the stream.
async fn h2_reset_after(addr: SocketAddr, ip: &str, after: Duration) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::get(format!("http://{addr}/"))
        .header("x-forwarded-for", ip)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let sent = tokio::time::timeout(after, sender.send_request(req)).await;
    assert!(sent.is_err(), "answered before the reset: not mid-refill");
}

/// Poll until `ip` is admitted again; fail after `within`.
async fn admitted_again(gw: &Gateway, ip: &str, within: Duration) {
    let started = Instant::now();
    while !admits(gw, ip).await {
        assert!(
            started.elapsed() < within,
            "{ip} still denied {within:?} after its refill was cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A slow key's first request is dropped while its refill is out (a call takes two or
/// three of the proxy's 300 ms holds; the request goes after 150 ms), once through the limiter and once as an HTTP/2
/// client resetting its stream. Before the fix the book kept its call counted out, so the
/// key asked nothing more and was denied until restart. Now the refill settles on its own
/// and the key admits again.
#[tokio::test]
async fn a_refill_dropped_mid_call_does_not_wedge_the_key() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let policy = "limit = 10\nperiod = \"1s\"\nburst = 5";
    let cfg = config(echo_upstream().await, &proxy.url(), "2s", policy, "closed");
    let gw = Gateway::start(&cfg).await;
    warm_up(&gw).await;
    proxy.set(Fault::Delay(Duration::from_millis(300)));

    let dropped = tokio::time::timeout(Duration::from_millis(150), admits(&gw, "203.0.113.1"));
    assert!(dropped.await.is_err(), "answered before the drop");
    h2_reset_after(gw.addrs.listen, "203.0.113.2", Duration::from_millis(150)).await;

    proxy.set(Fault::Pass);
    for ip in ["203.0.113.2", "203.0.113.1"] {
        admitted_again(&gw, ip, Duration::from_secs(3)).await;
    }
    // And over HTTP, as a client sees it.
    let resp = get_as(gw.addrs.listen, "/", "203.0.113.2", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

/// Eight concurrent requests on a new key whose store calls take 1.24 to 1.86 s (the proxy
/// holds each chunk 620 ms; a call is two or three chunks), with a store timeout of 2 s.
/// The first refill brings one cell; a request that waited for it and then had to make its
/// own call used to wait for both, 2.5 s or more. Now every request is answered within the
/// one timeout (plus scheduling slack).
#[tokio::test]
async fn a_request_waits_at_most_one_store_timeout() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let policy = "limit = 1\nperiod = \"10s\"\nburst = 5";
    let cfg = config(echo_upstream().await, &proxy.url(), "2s", policy, "open");
    let gw = Arc::new(Gateway::start(&cfg).await);
    warm_up(&gw).await;
    proxy.set(Fault::Delay(Duration::from_millis(620)));
    // The first calls over the slow link take longest (a command's chunks straddle the
    // proxy's holds); after these, a call is back to two or three holds.
    for ip in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        admits(&gw, ip).await;
    }

    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let gw = gw.clone();
        tasks.spawn(async move {
            let started = Instant::now();
            admits(&gw, "203.0.113.9").await;
            started.elapsed()
        });
    }
    let mut longest = Duration::ZERO;
    while let Some(took) = tasks.join_next().await {
        longest = longest.max(took.unwrap());
    }
    assert!(
        longest < Duration::from_millis(2_250),
        "a request waited {longest:?} on a 2 s store timeout"
    );
}

/// A `MakeWriter` into a shared buffer: what the gateway logs, for counting lines.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Fail-closed refusals for a dead store: 40 requests on a frozen clock log one line, and
/// the next line (two seconds later) says how many were suppressed. Before, every 503 also
/// logged a WARN of its own (1 207 lines for 1 206 refusals). It sets the global tracing
/// subscriber, so it runs in a process of its own: in the area binary every other test's
/// gateway would log into it.
#[tokio::test]
async fn fail_closed_refusals_log_once_a_second() {
    if !in_own_process("lease_faults::fail_closed_refusals_log_once_a_second") {
        return;
    }
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let dead = format!("redis://{}", dead_port().await);
    let policy = "limit = 10\nperiod = \"1s\"\nburst = 5";
    let cfg = config(echo_upstream().await, &dead, "200ms", policy, "closed");
    let clock = tollgate::limit::clock::ManualClock::new();
    let gw = Gateway::start_with_clock(&cfg, Arc::new(clock.clone())).await;
    let refuse = |n: u32| {
        let addr = gw.addrs.listen;
        async move {
            let resp = get_as(addr, "/", &format!("198.51.100.{n}"), None).await;
            assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
    };
    for n in 0..40 {
        refuse(n).await;
    }
    clock.advance(Duration::from_secs(2));
    refuse(40).await;
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("store unavailable"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[1].contains("suppressed=39"), "{lines:#?}");
}
