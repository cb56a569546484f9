//! Backends as people run them, with real upstream processes (`tests/common/backend.py`:
//! one healthy, one slow, one failing): how weights and `balance` spread the load, that
//! retries get past a failing URL without charging a limit twice, that the retry budget
//! holds when every URL fails, that `Retry-After` is honoured, and how long an ejected URL
//! stays out.

use std::time::{Duration, Instant};

use crate::common::backend::Backend;
use crate::common::config::ConfigBuilder;
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

type Pooled = Client<HttpConnector, Empty<Bytes>>;

/// A keep-alive client, so a test's requests do not each open a connection.
fn client() -> Pooled {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `[upstreams.app]` with `urls` (TOML array items) and `extra` keys, one catch-all route
/// with `route_extra`.
fn gateway_toml(urls: &[String], extra: &str, route_extra: &str) -> String {
    ConfigBuilder::new("upstream_timeout = \"5s\"")
        .text(&format!(
            "[upstreams.app]\nurls = [{}]\n{extra}\n\n[[routes]]\nname = \"api\"\n\
             match = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n{route_extra}\n",
            urls.join(", ")
        ))
        .build()
}

fn quoted(b: &Backend) -> String {
    format!("\"{}\"", b.url())
}

fn weighted(b: &Backend, weight: u32) -> String {
    format!("{{ url = \"{}\", weight = {weight} }}", b.url())
}

/// `n` GETs of `path`, one after the other; their statuses.
async fn get_n(c: &Pooled, gw: &Gateway, path: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        let resp = c.get(gw.url(path).parse().unwrap()).await.unwrap();
        statuses.push(resp.status().as_u16());
        drop(text(resp).await);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_3_to_1_send_three_quarters_to_the_first() {
    let (a, b) = (
        Backend::start("a", "healthy"),
        Backend::start("b", "healthy"),
    );
    let urls = [weighted(&a, 3), weighted(&b, 1)];
    // One worker walks one schedule: 0, 0, 1, 0 — exactly 3 of every 4.
    let gw = Gateway::start_with_workers(&gateway_toml(&urls, "", ""), 1).await;
    let c = client();
    assert!(get_n(&c, &gw, "/", 400).await.iter().all(|&s| s == 200));
    assert_eq!((a.count().await, b.count().await), (300, 100));

    // Drawn at random by weight: about three quarters (the binomial's standard deviation
    // on 1000 draws is ~14; ±70 is 5 of them).
    let toml = gateway_toml(&urls, "balance = \"random\"", "");
    let gw = Gateway::start(&toml).await;
    get_n(&c, &gw, "/", 1000).await;
    let first = a.count().await - 300;
    assert!((680..=820).contains(&first), "{first} of 1000 to weight 3");
    assert_eq!(b.count().await - 100, 1000 - first);
}

/// The share of 200 GETs from eight clients at once that `slow` answered.
async fn share_of_slow(slow: &Backend, toml: String) -> f64 {
    let gw = Gateway::start(&toml).await;
    let before = slow.count().await;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (c, url) = (client(), gw.url("/"));
            tokio::spawn(async move {
                for _ in 0..25 {
                    let resp = c.get(url.parse().unwrap()).await.unwrap();
                    assert_eq!(resp.status(), StatusCode::OK);
                    drop(text(resp).await);
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    (slow.count().await - before) as f64 / 200.0
}

/// Eight clients at once; a slow URL (500 ms) and a fast one. Round robin gives each half;
/// least-request sees the slow URL's requests pile up and sends it less than half of that
/// (how much less depends on how fast the fast one is on a busy machine: least-request
/// evens out requests in flight, so the slow URL's share is about the ratio of latencies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_sends_little_to_a_slow_url() {
    let (slow, fast) = (
        Backend::start("slow", "slow:0.5"),
        Backend::start("fast", "healthy"),
    );
    let urls = [quoted(&slow), quoted(&fast)];
    let rr = share_of_slow(&slow, gateway_toml(&urls, "", "")).await;
    let lr = share_of_slow(
        &slow,
        gateway_toml(&urls, "balance = \"least_request\"", ""),
    )
    .await;
    eprintln!("share of the slow URL: round_robin {rr:.3}, least_request {lr:.3}");
    assert!((0.45..=0.55).contains(&rr), "round robin: {rr}");
    assert!(
        lr < 0.15,
        "least request sent {lr} of the load to the slow URL"
    );
}

/// With `retries`, GETs that meet the failing URL are sent on to the healthy one: every
/// client sees 200, and the per-IP limit of 6 is charged once per request (the seventh is
/// 429), not once per attempt. A POST is not idempotent: its 503 is passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_get_past_a_failing_url_and_charge_the_limit_once() {
    let (bad, good) = (
        Backend::start("bad", "failing"),
        Backend::start("good", "healthy"),
    );
    let policy =
        "[policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 6\nperiod = \"1h\"\n";
    let toml = gateway_toml(
        &[quoted(&bad), quoted(&good)],
        "retries = 2\nretry_on = [503]\nretry_backoff = \"1ms\"",
        "policies = [\"per_ip\"]",
    )
    .replace("[[routes]]", &format!("{policy}\n[[routes]]"));
    let gw = Gateway::start_with_workers(&toml, 1).await;
    let c = client();
    assert_eq!(get_n(&c, &gw, "/", 4).await, [200; 4]);
    // Round robin's turns alternate; a GET whose turn fell on the failing URL was retried
    // on the healthy one without taking a turn (so the failing URL still gets only every
    // other first attempt, not all of them).
    assert_eq!((bad.count().await, good.count().await), (2, 4));
    let post = Request::post(gw.url("/"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let posted = send_h1(gw.addrs.listen, post).await.status();
    let post = Request::post(gw.url("/"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let again = send_h1(gw.addrs.listen, post).await.status();
    let mut statuses = [posted.as_u16(), again.as_u16()];
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 503],
        "one POST met the failing URL and was not retried"
    );
    assert_eq!(get_n(&c, &gw, "/", 1).await, [429], "6 requests, 6 charges");
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let retried = "tollgate_upstream_retries_total{upstream=\"app\",reason=\"status\"}";
    assert_eq!(metric_sum(&m, retried), 2.0, "{m}");
}

/// Every URL failing, `retries = 3`: without a budget 200 GETs would make 800 attempts. A
/// 20 % budget (no per-second reserve) lets one request in five retry once: at most 240.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_holds_when_every_url_fails() {
    let (a, b) = (
        Backend::start("a", "failing"),
        Backend::start("b", "failing"),
    );
    let extra = "retries = 3\nretry_on = [503]\nretry_backoff = \"1ms\"\n\
                 retry_budget_percent = 20\nretry_budget_min_per_second = 0";
    let gw = Gateway::start(&gateway_toml(&[quoted(&a), quoted(&b)], extra, "")).await;
    let statuses = get_n(&client(), &gw, "/", 200).await;
    assert!(statuses.iter().all(|&s| s == 503), "{statuses:?}");
    let attempts = a.count().await + b.count().await;
    eprintln!("200 requests, every URL failing, retries = 3, budget 20 %: {attempts} attempts");
    assert!(
        (230..=240).contains(&attempts),
        "{attempts} attempts for 200 requests"
    );
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let refused = metric_sum(
        &m,
        "tollgate_upstream_retries_refused_total{upstream=\"app\"",
    );
    assert!(
        refused >= 150.0,
        "retries the budget refused: {refused}\n{m}"
    );
}

/// A 503 with `Retry-After: 1` is retried no sooner than a second later; one with
/// `Retry-After: 60`, past the upstream timeout (5 s), is passed on as it is, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let (bad, good) = (
        Backend::start("bad", "failing-after:1"),
        Backend::start("good", "healthy"),
    );
    let toml = gateway_toml(
        &[quoted(&bad), quoted(&good)],
        "retries = 1\nretry_on = [503]\nretry_backoff = \"1ms\"",
        "",
    );
    // Each worker's first request goes to the first URL: the failing one.
    let gw = Gateway::start_with_workers(&toml, 1).await;
    let c = client();
    let started = Instant::now();
    assert_eq!(get_n(&c, &gw, "/", 1).await, [200]);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((bad.count().await, good.count().await), (1, 1));

    bad.set_mode("failing-after:60").await;
    let gw = Gateway::start_with_workers(&toml, 1).await;
    let started = Instant::now();
    let resp = c.get(gw.url("/").parse().unwrap()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "60");
    assert_eq!(good.count().await, 1, "not retried");
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let refused = "tollgate_upstream_retries_refused_total{upstream=\"app\",reason=\"deadline\"}";
    assert_eq!(metric_sum(&m, refused), 1.0, "{m}");
}

/// Send GETs until `backend` has answered more than `from` requests; the time since `since`.
async fn until_it_answers(
    c: &Pooled,
    gw: &Gateway,
    backend: &Backend,
    from: usize,
    since: Instant,
) -> Duration {
    while backend.count().await <= from {
        assert!(since.elapsed() < Duration::from_secs(10), "never came back");
        get_n(c, gw, "/", 1).await;
    }
    since.elapsed()
}

/// Three 5xx in a row eject a URL for `base_ejection` (400 ms); meanwhile it gets nothing.
/// Back, failing again at once, it is ejected for twice as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejected_url_stays_out_for_a_growing_interval() {
    let (bad, good) = (
        Backend::start("bad", "failing"),
        Backend::start("good", "healthy"),
    );
    let outlier = "[upstreams.app.outlier]\nconsecutive_5xx = 3\nbase_ejection = \"400ms\"\nmax_ejected_percent = 50";
    let gw = Gateway::start_with_workers(
        &gateway_toml(&[quoted(&bad), quoted(&good)], outlier, ""),
        1,
    )
    .await;
    let c = client();
    // Round robin: requests 1, 3, 5 meet the failing URL; the fifth ejects it. Times are
    // taken before the request that ejects, so they can only overstate the ejection.
    get_n(&c, &gw, "/", 4).await;
    let ejecting = Instant::now();
    get_n(&c, &gw, "/", 1).await;
    assert_eq!(bad.count().await, 3);
    let first = until_it_answers(&c, &gw, &bad, 3, ejecting).await;
    assert!(
        first >= Duration::from_millis(400),
        "first ejection: {first:?}"
    );
    // Back and failing: two more 503s make three in a row again (the one that came back
    // counts), and the second ejection lasts 800 ms.
    let mut ejecting = Instant::now();
    while bad.count().await < 6 {
        ejecting = Instant::now();
        get_n(&c, &gw, "/", 1).await;
    }
    let second = until_it_answers(&c, &gw, &bad, 6, ejecting).await;
    assert!(
        second >= Duration::from_millis(800),
        "second ejection: {second:?}"
    );
    assert!(second > first, "{second:?} after {first:?}");
    eprintln!("out for {first:?}, then {second:?} (base_ejection 400 ms)");
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    let ejections = format!(
        "tollgate_upstream_ejections_total{{upstream=\"app\",url=\"{}\"}}",
        bad.url()
    );
    assert_eq!(metric_sum(&m, &ejections), 2.0, "{m}");
}
