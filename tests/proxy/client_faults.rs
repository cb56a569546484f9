//! Issue 46: a client's fault is never the upstream's. A broken chunked request body, a
//! client that leaves mid-body, a body silent for `body_timeout` and a chunked body past
//! `max_body_bytes` each end the upstream call that streams them, and each is answered as
//! the client's fault (400, nothing, 408, 413). None may count against the upstream URL:
//! after more of them than the outlier's threshold, both URLs still take requests, nothing
//! was ejected, `tollgate_upstream_failures_total` is 0, nothing was retried, and
//! `tollgate_client_body_errors_total` counts each by kind. Seen before: every one of them
//! counted as a `broken` connection, and 37 bad requests in 20 s kept a healthy URL ejected
//! for everyone. The same holds for an HTTP/2 upstream. The controls: a URL that really
//! drops its connections is still ejected, and an upstream silent after the whole body is
//! still a 504; a silent body is the client's 408 even past a shorter `upstream_timeout`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::config::ConfigBuilder;
use crate::common::*;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `consecutive_connect_failures`: broken connections in a row that eject a URL.
const THRESHOLD: usize = 3;

/// Bad requests per test: round robin over two URLs gives each 6, twice the threshold.
const BAD: usize = 12;

/// A real upstream that reads each request's whole body, then answers `ok`; how many
/// bodies it read whole (a body the gateway cut off is not counted).
async fn reading_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let answered = Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    let addr = upstream(move |req: Request<Incoming>| {
        let count = count.clone();
        async move {
            if req.into_body().collect().await.is_ok() {
                count.fetch_add(1, Ordering::SeqCst);
            }
            Response::new(body("ok"))
        }
    })
    .await;
    (addr, answered)
}

/// An upstream that reads what a request sends and closes the connection without an
/// answer: the upstream's own fault, a `broken` connection.
async fn dropping_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
            });
        }
    });
    addr
}

/// Two URLs (of an upstream with `upstream_extra` keys) in round robin, ejected after
/// [`THRESHOLD`] broken connections in a row for an hour (so an ejection cannot end within
/// the test), retries on; a 200 ms `body_timeout` and a route whose bodies may be 10 bytes.
fn two_urls(a: SocketAddr, b: SocketAddr, upstream_extra: &str) -> String {
    ConfigBuilder::new("body_timeout = \"200ms\"\nupstream_timeout = \"5s\"")
        .text(&format!(
            "[upstreams.app]\nurls = [\"http://{a}\", \"http://{b}\"]\nretries = 2\n{upstream_extra}\n\n\
             [upstreams.app.outlier]\nconsecutive_connect_failures = {THRESHOLD}\n\
             base_ejection = \"1h\"\nmax_ejection = \"24h\"\nmax_ejected_percent = 50\n\n\
             [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\n\
             upstream = \"app\"\nmax_body_bytes = 10\n"
        ))
        .build()
}

/// Write `bytes` on a fresh connection; the answer's status and body, read as its
/// `Content-Length` says (the socket stays open meanwhile: a silent body is silent, not
/// ended).
async fn answer_after(addr: SocketAddr, bytes: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let mut read_more = async |got: &mut Vec<u8>| {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(n > 0, "closed before the whole answer: {got:?}");
        got.extend_from_slice(&buf[..n]);
    };
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        read_more(&mut got).await;
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |n| n.trim().parse::<usize>().unwrap());
    while got.len() < end + length {
        read_more(&mut got).await;
    }
    let body = String::from_utf8_lossy(&got[end..end + length]).into_owned();
    (status(&head), body)
}

/// [`answer_after`]'s status alone.
async fn status_after(addr: SocketAddr, bytes: &[u8]) -> u16 {
    answer_after(addr, bytes).await.0
}

/// The client's answer is a problem of `kind` (its `type` ends so) with `status`, about
/// the client's request: no word of an upstream.
async fn problem_after(addr: SocketAddr, bytes: &[u8], status: u16, kind: &str) {
    let (got, body) = answer_after(addr, bytes).await;
    assert_eq!(got, status, "{body}");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ty = format!("https://tollgate.dev/problems/{kind}");
    assert_eq!(problem["type"], ty.as_str(), "{body}");
    assert_eq!(problem["status"], status, "{body}");
    assert!(!body.contains("upstream"), "{body}");
}

/// Wait until the gateway has answered `n` requests (`tollgate_requests_total`, counted
/// once the upstream call is over): a client that left reads no answer to wait for.
async fn answered(gw: &Gateway, n: usize) {
    let admin = gw.addrs.admin_listen.unwrap();
    eventually(
        "every request answered",
        Duration::from_secs(10),
        || async move {
            let m = metrics_text(admin).await;
            metric_sum(&m, "tollgate_requests_total{") >= n as f64
        },
    )
    .await;
}

/// Two GETs: round robin sends one to each URL that is in.
async fn two_gets(gw: &Gateway) {
    for _ in 0..2 {
        let answer = raw(
            gw.addrs.listen,
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&answer), 200, "{answer}");
    }
}

/// [`BAD`] requests that `bad` sends (each an idempotent `PUT` on a fresh connection,
/// whose body the client spoils) against two healthy URLs (an upstream with
/// `upstream_extra` keys): the upstream saw each once, the URLs stay in, and nothing but
/// `tollgate_client_body_errors_total{kind}` counts them.
async fn never_the_upstreams<F, Fut>(kind: &str, upstream_extra: &str, bad: F)
where
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ((a, at_a), (b, at_b)) = (reading_upstream().await, reading_upstream().await);
    let gw = Gateway::start_with_workers(&two_urls(a, b, upstream_extra), 1).await;
    for _ in 0..BAD {
        bad(gw.addrs.listen).await;
    }
    answered(&gw, BAD).await;
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    // Each went to an upstream once (never retried elsewhere), and none was read whole.
    assert_eq!(
        metric_sum(&m, "tollgate_upstream_requests_total{"),
        BAD as f64,
        "{m}"
    );
    assert_eq!(at_a.load(Ordering::SeqCst) + at_b.load(Ordering::SeqCst), 0);
    // Both URLs are still in: a good request reaches each.
    two_gets(&gw).await;
    assert_eq!(
        (at_a.load(Ordering::SeqCst), at_b.load(Ordering::SeqCst)),
        (1, 1),
        "a URL was left out after {BAD} bad {kind} bodies"
    );
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    for none in [
        "tollgate_upstream_failures_total{",
        "tollgate_upstream_ejections_total{",
        "tollgate_upstream_ejected{",
        "tollgate_upstream_retries_total{",
        "tollgate_upstream_retries_refused_total{",
    ] {
        assert_eq!(metric_sum(&m, none), 0.0, "{none} in\n{m}");
    }
    let counted = format!("tollgate_client_body_errors_total{{upstream=\"app\",kind=\"{kind}\"}}");
    assert_eq!(metric_sum(&m, &counted), BAD as f64, "{counted} in\n{m}");
    assert_eq!(
        metric_sum(&m, "tollgate_client_body_errors_total{"),
        BAD as f64,
        "one kind only: {m}"
    );
}

/// A broken chunked body: `zz` is no chunk size. The client's 400.
async fn malformed(gw: SocketAddr) {
    let broken =
        b"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
    problem_after(gw, broken, 400, "bad_request").await;
}

/// A client that closes its connection with 5 bytes of its body still to come: nobody is
/// left to answer.
async fn gone(gw: SocketAddr) {
    let mut s = TcpStream::connect(gw).await.unwrap();
    (s.write_all(b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\n012")
        .await)
        .unwrap();
    drop(s);
}

/// A body that stops, the connection open: the client's 408 after `body_timeout`.
async fn silent(gw: SocketAddr) {
    let silent = b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\n012";
    problem_after(gw, silent, 408, "request_timeout").await;
}

/// A chunked body past the route's `max_body_bytes` (16 bytes of 10): the client's 413.
async fn too_large(gw: SocketAddr) {
    let large = b"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
                  8\r\n01234567\r\n8\r\n89abcdef\r\n0\r\n\r\n";
    problem_after(gw, large, 413, "payload_too_large").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_chunked_body_is_a_400_and_ejects_no_url() {
    never_the_upstreams("malformed", "", malformed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_body_ejects_no_url() {
    never_the_upstreams("gone", "", gone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_body_is_a_408_and_ejects_no_url() {
    never_the_upstreams("timeout", "", silent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_too_large_is_a_413_and_ejects_no_url() {
    never_the_upstreams("too_large", "", too_large).await;
}

/// The same four against an HTTP/2 upstream (h2c), whose calls go through hyper-util's
/// client and its own body task rather than the worker's HTTP/1.1 connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_upstream_is_not_blamed_for_client_bodies_either() {
    let h2 = "protocol = \"h2\"";
    never_the_upstreams("malformed", h2, malformed).await;
    never_the_upstreams("gone", h2, gone).await;
    never_the_upstreams("timeout", h2, silent).await;
    never_the_upstreams("too_large", h2, too_large).await;
}

/// The control: a URL that drops its connections with a whole body in flight is the
/// upstream's fault, and is ejected after [`THRESHOLD`] in a row, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_drops_connections_is_still_ejected() {
    let ((good, at_good), bad) = (reading_upstream().await, dropping_upstream().await);
    let gw = Gateway::start_with_workers(&two_urls(good, bad, ""), 1).await;
    let put = b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    let mut statuses = Vec::new();
    for _ in 0..BAD {
        statuses.push(status_after(gw.addrs.listen, put).await);
    }
    // Round robin until the third 502 ejects the dropping URL, then the good one alone.
    let failed = statuses.iter().filter(|&&s| s == 502).count();
    assert_eq!(failed, THRESHOLD, "{statuses:?}");
    assert_eq!(at_good.load(Ordering::SeqCst), BAD - THRESHOLD);
    two_gets(&gw).await;
    assert_eq!(at_good.load(Ordering::SeqCst), BAD - THRESHOLD + 2);
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let url = format!("upstream=\"app\",url=\"http://{bad}\"");
    let broken = format!("tollgate_upstream_failures_total{{{url},kind=\"broken\"}}");
    assert_eq!(metric_sum(&m, &broken), THRESHOLD as f64, "{m}");
    let ejections = format!("tollgate_upstream_ejections_total{{{url}}}");
    assert_eq!(metric_sum(&m, &ejections), 1.0, "{m}");
    let ejected = format!("tollgate_upstream_ejected{{{url}}}");
    assert_eq!(metric_sum(&m, &ejected), 1.0, "{m}");
    assert_eq!(
        metric_sum(&m, "tollgate_client_body_errors_total{"),
        0.0,
        "{m}"
    );
}

/// A silent body is the client's 408 whichever timeout is shorter: while the gateway waits
/// for the client's next byte the upstream has not had the whole request, so it is not
/// late. Seen before: with `upstream_timeout` shorter than `body_timeout` (or equal, as by
/// default, 30 s each) the silent body got a 504 blamed on the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_body_is_a_408_even_past_upstream_timeout() {
    let (up, _) = reading_upstream().await;
    for (body, upstream) in [("400ms", "200ms"), ("300ms", "300ms")] {
        let timeouts = format!("body_timeout = \"{body}\"\nupstream_timeout = \"{upstream}\"");
        let gw = Gateway::start(&config(up, &timeouts, "")).await;
        let silent = b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\n012";
        assert_eq!(
            status_after(gw.addrs.listen, silent).await,
            408,
            "{timeouts}"
        );
        let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
        let counted = "tollgate_client_body_errors_total{upstream=\"app\",kind=\"timeout\"}";
        assert_eq!(metric_sum(&m, counted), 1.0, "{timeouts}: {m}");
    }
}

/// The control: an upstream that has the whole body and does not answer is late, a 504 at
/// `upstream_timeout` however long `body_timeout` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_silent_after_the_whole_body_is_a_504() {
    let (_hold, held) = tokio::sync::watch::channel(());
    let up = upstream(move |req: Request<Incoming>| {
        let mut held = held.clone();
        async move {
            let _ = req.into_body().collect().await;
            let _ = held.changed().await;
            Response::new(body("late"))
        }
    })
    .await;
    let timeouts = "body_timeout = \"10s\"\nupstream_timeout = \"200ms\"";
    let gw = Gateway::start(&config(up, timeouts, "")).await;
    let whole = b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n012";
    let started = std::time::Instant::now();
    assert_eq!(status_after(gw.addrs.listen, whole).await, 504);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not body_timeout"
    );
}
