//! Rate limiting through the real gateway: 429s, draft headers, all-or-nothing, concurrency
//! and the leaky bucket, on a manual clock so every count is exact (modes in
//! `limit_modes.rs`, key parts and headroom in `limit_keys.rs`).

use std::time::{Duration, Instant};

use crate::common::limits::*;
use crate::common::*;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use tollgate::limit::clock::ManualClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_request_gets_429_problem_and_draft_headers() {
    let clock = ManualClock::new();
    let gw = gateway(
        echo_upstream().await,
        PER_IP,
        "policies = [\"per_ip\"]",
        &clock,
    )
    .await;
    let first = call(&gw, "198.51.100.1", None).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit-policy").unwrap(),
        "\"per_ip\";q=2;w=1"
    );
    assert_eq!(header(&first, "ratelimit").unwrap(), "\"per_ip\";r=1;t=1");
    assert_eq!(
        call(&gw, "198.51.100.1", None).await.status(),
        StatusCode::OK
    );

    let denied = call(&gw, "198.51.100.1", None).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after").unwrap(), "1");
    assert_eq!(header(&denied, "ratelimit").unwrap(), "\"per_ip\";r=0;t=1");
    assert_eq!(
        header(&denied, "content-type").unwrap(),
        "application/problem+json"
    );
    let body = json(denied).await;
    assert_eq!(body["status"], 429);
    assert_eq!(body["policy"], "per_ip");
    assert_eq!(body["retry_after"], 1);

    // Another client is untouched; after one emission interval the first may go again.
    assert_eq!(
        call(&gw, "198.51.100.2", None).await.status(),
        StatusCode::OK
    );
    clock.advance(Duration::from_millis(499));
    assert_eq!(
        call(&gw, "198.51.100.1", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        call(&gw, "198.51.100.1", None).await.status(),
        StatusCode::OK
    );

    let m = metrics(&gw).await;
    assert!(
        m.contains("tollgate_decisions_total{route=\"api\",policy=\"per_ip\",outcome=\"deny\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("tollgate_decisions_total{route=\"api\",policy=\"per_ip\",outcome=\"allow\"} 4"),
        "{m}"
    );
    assert!(
        m.contains("tollgate_limiter_keys{policy=\"per_ip\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("tollgate_requests_total{route=\"api\",status=\"429\"} 2"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_by_one_policy_spends_nothing_elsewhere() {
    let clock = ManualClock::new();
    let policies = r#"
[policies.per_ip]
key = ["ip"]
algorithm = "token_bucket"
limit = 10
period = "1s"
burst = 10

[policies.per_account]
key = ["account", "route"]
algorithm = "sliding_window"
limit = 2
period = "1m"
"#;
    let gw = gateway(
        echo_upstream().await,
        policies,
        "policies = [\"per_ip\", \"per_account\"]",
        &clock,
    )
    .await;
    for _ in 0..2 {
        assert_eq!(
            call(&gw, "203.0.113.5", Some("key-a")).await.status(),
            StatusCode::OK
        );
    }
    // The account is exhausted: 5 more attempts are all denied by it alone...
    for _ in 0..5 {
        let r = call(&gw, "203.0.113.5", Some("key-a")).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            json(r).await["policies"],
            serde_json::json!(["per_account"])
        );
    }
    // ...and burned none of the IP's budget: 10 - 2 spent, so r=7 after this request.
    let r = call(&gw, "203.0.113.5", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "ratelimit").unwrap(),
        "\"per_ip\";r=7;t=1",
        "no account header: per_account does not apply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_placement_and_legacy_headers() {
    let clock = ManualClock::new();
    let up = echo_upstream().await;
    let denied_only =
        format!("{PER_IP}\n[response]\nheaders = \"denied\"\nlegacy_headers = true\n");
    let gw = gateway(up, &denied_only, "policies = [\"per_ip\"]", &clock).await;
    let ok = call(&gw, "198.51.100.1", None).await;
    assert!(
        ok.headers().get("ratelimit").is_none() && ok.headers().get("x-ratelimit-limit").is_none()
    );
    call(&gw, "198.51.100.1", None).await;
    let denied = call(&gw, "198.51.100.1", None).await;
    assert_eq!(header(&denied, "ratelimit").unwrap(), "\"per_ip\";r=0;t=1");
    assert_eq!(header(&denied, "x-ratelimit-limit").unwrap(), "2");
    assert_eq!(header(&denied, "x-ratelimit-remaining").unwrap(), "0");
    assert_eq!(header(&denied, "x-ratelimit-reset").unwrap(), "1");

    let none = format!("{PER_IP}\n[response]\nheaders = \"none\"\n");
    let gw = gateway(up, &none, "policies = [\"per_ip\"]", &clock).await;
    for _ in 0..2 {
        call(&gw, "198.51.100.1", None).await;
    }
    let denied = call(&gw, "198.51.100.1", None).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(denied.headers().get("ratelimit").is_none());
    assert_eq!(
        header(&denied, "retry-after").unwrap(),
        "1",
        "Retry-After is always on a 429"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_slot_is_released_when_body_ends_or_client_leaves() {
    let clock = ManualClock::new();
    // The upstream streams a body that stays open until the test closes it.
    let (bodies_tx, mut bodies_rx) = tokio::sync::mpsc::channel::<
        http_body_util::channel::Sender<Bytes, Box<dyn std::error::Error + Send + Sync>>,
    >(4);
    let up = upstream(move |_req| {
        let bodies_tx = bodies_tx.clone();
        async move {
            let (tx, body) = Channel::<Bytes, Box<dyn std::error::Error + Send + Sync>>::new(1);
            let _ = bodies_tx.send(tx).await;
            Response::new(body.boxed())
        }
    })
    .await;
    let policy = "[policies.inflight]\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 1\n";
    let gw = gateway(up, policy, "policies = [\"inflight\"]", &clock).await;
    let p = gw.limiter.policy_index("inflight").unwrap();

    let first = call(&gw, "198.51.100.3", None).await;
    assert_eq!(first.status(), StatusCode::OK);
    let mut first_body_tx = bodies_rx.recv().await.unwrap();
    assert_eq!(
        call(&gw, "198.51.100.3", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // Body ends → slot released.
    first_body_tx
        .send_data(Bytes::from_static(b"done"))
        .await
        .unwrap();
    drop(first_body_tx);
    let _ = first.into_body().collect().await.unwrap();
    wait_until_released(&gw, p).await;
    let second = call(&gw, "198.51.100.3", None).await;
    assert_eq!(second.status(), StatusCode::OK);
    let _second_body_tx = bodies_rx.recv().await.unwrap();

    // Client goes away mid-body → slot released too.
    drop(second);
    wait_until_released(&gw, p).await;
    assert_eq!(
        call(&gw, "198.51.100.3", None).await.status(),
        StatusCode::OK
    );
}

/// Release happens on another task once hyper drops the body; wait for it (bounded).
async fn wait_until_released(gw: &Gateway, policy: usize) {
    for _ in 0..1000 {
        if gw.limiter.local().key_count(policy) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("concurrency slot never released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_holds_then_denies() {
    let clock = ManualClock::new();
    let policy = "[policies.paced]\nkey = [\"ip\"]\nalgorithm = \"leaky_bucket\"\nlimit = 10\nperiod = \"1s\"\nmax_delay = \"150ms\"\n";
    let gw = gateway(
        echo_upstream().await,
        policy,
        "policies = [\"paced\"]",
        &clock,
    )
    .await;
    assert_eq!(
        call(&gw, "198.51.100.4", None).await.status(),
        StatusCode::OK
    );
    // The clock is frozen: the second request's slot is 100 ms away, and it is held that long.
    let started = Instant::now();
    assert_eq!(
        call(&gw, "198.51.100.4", None).await.status(),
        StatusCode::OK
    );
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "held {:?}",
        started.elapsed()
    );
    // The third would wait 200 ms > max_delay.
    let denied = call(&gw, "198.51.100.4", None).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after").unwrap(), "1");
}
