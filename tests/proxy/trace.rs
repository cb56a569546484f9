//! Tracing: the W3C `traceparent`/`tracestate` of a request, and with `[telemetry]
//! otlp_endpoint` its spans (request, limit step, upstream call) exported over OTLP/gRPC
//! to a real receiver (`common/otlp_receiver.py`), parent ids and all. Over real sockets.

use crate::common::otlp::Receiver;
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use serde_json::Value;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

/// A GET of `/` with `headers`: (status, the upstream's echo or the gateway's body).
async fn ask(gw: &Gateway, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut req = Request::get(gw.url("/"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send_h1(gw.addrs.listen, req.body(Empty::<Bytes>::new()).unwrap()).await;
    (resp.status(), json(resp).await)
}

/// The traceparent the upstream was sent, split: (trace id, parent id, flags).
fn sent(echo: &Value) -> (String, String, String) {
    let tp = echo["headers"]["traceparent"]
        .as_str()
        .expect("a traceparent");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!((parts.len(), parts[0]), (4, "00"), "{tp}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// Trusting loopback (the test client) as a proxy, one policy of 1 a minute on `/`.
async fn traced_gateway(receiver: &Receiver, extra: &str) -> Gateway {
    let policy =
        "[policies.once]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1m\"\n";
    let text = config(echo_upstream().await, "", "policies = [\"once\"]\n")
        + policy
        + &receiver.table(extra)
        + extra_trust();
    Gateway::start(&text).await
}

fn extra_trust() -> &'static str {
    "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_callers_trace_gets_the_request_limit_and_upstream_spans() {
    let receiver = Receiver::start();
    let mut gw = traced_gateway(&receiver, "service_name = \"edge-a\"").await;
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let caller = [
        ("traceparent", traceparent.as_str()),
        ("tracestate", "vendor=opaque"),
    ];
    let (status, echo) = ask(&gw, &caller).await;
    assert_eq!(status, StatusCode::OK, "{echo}");
    let (trace, parent, flags) = sent(&echo);
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "01"));
    assert_ne!(parent, CALLER, "one hop, one child span id");
    assert_eq!(echo["headers"]["tracestate"], "vendor=opaque");
    // The second request is denied: its limit span says so, and no upstream span.
    let (status, body) = ask(&gw, &caller).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    gw.shutdown().await.unwrap();
    let spans = receiver.spans();

    let requests = named(&spans, "GET api");
    assert_eq!(requests.len(), 2, "{spans:#?}");
    for r in &requests {
        assert_eq!(
            (&r["trace_id"], &r["parent_span_id"]),
            (&TRACE.into(), &CALLER.into())
        );
        assert_eq!(
            (&r["service"], &r["kind"]),
            (&"edge-a".into(), &2.into()),
            "SERVER"
        );
        assert_eq!(r["attributes"]["http.route"], "api");
    }
    let [upstream] = named(&spans, "upstream")[..] else {
        panic!("one upstream span: {spans:#?}")
    };
    assert_eq!(
        upstream["span_id"],
        parent.as_str(),
        "the upstream's parent is this span"
    );
    assert_eq!(upstream["kind"], 3, "CLIENT");
    assert_eq!(upstream["attributes"]["http.response.status_code"], 200);
    let served = requests
        .iter()
        .find(|r| r["span_id"] == upstream["parent_span_id"])
        .expect("the upstream span is the request span's child");
    assert_eq!(served["attributes"]["http.response.status_code"], 200);
    let limits = named(&spans, "limit");
    assert_eq!(limits.len(), 2, "{spans:#?}");
    let mut decisions: Vec<&str> = limits
        .iter()
        .map(|l| {
            assert!(requests.iter().any(|r| r["span_id"] == l["parent_span_id"]));
            assert_eq!(l["attributes"]["tollgate.policy"], "once");
            assert_eq!(l["attributes"]["tollgate.site"], "local");
            assert_eq!(
                l["attributes"]["tollgate.store_time_us"], 0,
                "no store: local"
            );
            l["attributes"]["tollgate.decision"].as_str().unwrap()
        })
        .collect();
    decisions.sort_unstable();
    assert_eq!(decisions, ["allow", "deny"]);
    let denied = requests
        .iter()
        .find(|r| r["attributes"]["http.response.status_code"] == 429)
        .expect("the denied request's span");
    assert!(denied["attributes"]["tollgate.request_id"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_trace_context_starts_a_trace() {
    let receiver = Receiver::start();
    let mut gw = traced_gateway(&receiver, "").await;
    let (status, echo) = ask(&gw, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (trace, parent, flags) = sent(&echo);
    assert_eq!(flags, "01", "sample_ratio defaults to 1");
    // A traceparent that is not one starts a trace too, and is not forwarded.
    let garbage = [
        ("traceparent", "00-zz-not-a-trace"),
        ("x-forwarded-for", "198.51.100.7"),
    ];
    let (_, echo) = ask(&gw, &garbage).await;
    let (other, _, _) = sent(&echo);
    assert!(other != trace && other.len() == 32, "{echo}");
    gw.shutdown().await.unwrap();
    let spans = receiver.spans();
    let requests = named(&spans, "GET api");
    let Some(request) = requests.iter().find(|r| r["trace_id"] == trace.as_str()) else {
        panic!("{spans:#?}")
    };
    assert_eq!(
        (&request["trace_id"], &request["parent_span_id"]),
        (&trace.into(), &"".into())
    );
    assert_eq!(named(&spans, "upstream")[0]["span_id"], parent.as_str());
    assert_eq!(request["service"], "tollgate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_clients_sampled_flag_does_not_decide() {
    let receiver = Receiver::start();
    // No [client_ip]: the test client is not a trusted proxy. Ratio 0: nothing sampled.
    let text = config(echo_upstream().await, "", "") + &receiver.table("sample_ratio = 0.0");
    let mut gw = Gateway::start(&text).await;
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let (status, echo) = ask(&gw, &[("traceparent", traceparent.as_str())]).await;
    assert_eq!(status, StatusCode::OK);
    let (trace, parent, flags) = sent(&echo);
    // The trace id is kept (the caller can still find the hop), the flag is ours.
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "00"));
    assert_ne!(parent, CALLER);
    gw.shutdown().await.unwrap();
    assert_eq!(receiver.spans(), Vec::<Value>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_the_trace_context_passes_through_untouched() {
    let gw = Gateway::start(&config(echo_upstream().await, "", "")).await;
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let caller = [
        ("traceparent", traceparent.as_str()),
        ("tracestate", "vendor=opaque"),
    ];
    let (_, echo) = ask(&gw, &caller).await;
    assert_eq!(echo["headers"]["traceparent"], traceparent.as_str());
    assert_eq!(echo["headers"]["tracestate"], "vendor=opaque");
    let (_, echo) = ask(&gw, &[]).await;
    assert!(echo["headers"].get("traceparent").is_none(), "{echo}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_policys_limit_span_tells_the_time_spent_in_redis() {
    let redis = crate::common::redis::RedisServer::start();
    let receiver = Receiver::start();
    let policy = "[policies.global]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"1h\"\nsite = \"central\"\n";
    let text = crate::common::config::central_config(
        echo_upstream().await,
        &redis.url(),
        policy,
        "policies = [\"global\"]",
    ) + &receiver.table("");
    let mut gw = Gateway::start(&text).await;
    let (status, _) = ask(&gw, &[]).await;
    assert_eq!(status, StatusCode::OK);
    gw.shutdown().await.unwrap();
    let spans = receiver.spans();
    let [limit] = named(&spans, "limit")[..] else {
        panic!("{spans:#?}")
    };
    assert_eq!(limit["attributes"]["tollgate.site"], "central");
    // A loopback Redis answers in tens of microseconds, never in none.
    let us = limit["attributes"]["tollgate.store_time_us"]
        .as_i64()
        .unwrap();
    assert!(us > 0, "{limit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_spans_not_requests() {
    let dead = dead_port().await;
    let text = config(echo_upstream().await, "", "")
        + &format!("[telemetry]\notlp_endpoint = \"http://{dead}\"\n");
    let mut gw = Gateway::start(&text).await;
    for _ in 0..20 {
        assert_eq!(ask(&gw, &[]).await.0, StatusCode::OK);
    }
    // Shutdown tries the last batch and gives up within the export timeout.
    tokio::time::timeout(std::time::Duration::from_secs(30), gw.shutdown())
        .await
        .expect("the gateway stops although its collector is gone")
        .unwrap();
}

/// A gateway that takes part in trace context (an OTLP endpoint where nothing listens: the
/// spans are lost, the headers are what is tested), trusting loopback or not.
async fn participating(trusted: bool) -> Gateway {
    let dead = dead_port().await;
    let trust = if trusted { extra_trust() } else { "" };
    let text = config(echo_upstream().await, "", "")
        + &format!("[telemetry]\notlp_endpoint = \"http://{dead}\"\n")
        + trust;
    Gateway::start(&text).await
}

/// `n` list-members `kNN=` + `len - 4` characters each: `n * len + n - 1` characters.
fn members(prefix: char, n: usize, len: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{prefix}{i:02}={}", "v".repeat(len - 4)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracestate_is_never_sent_empty_and_is_kept_to_the_w3c_bound() {
    for trusted in [true, false] {
        let gw = participating(trusted).await;
        let traceparent = format!("00-{TRACE}-{CALLER}-01");
        let tp = ("traceparent", traceparent.as_str());
        // None sent, none forwarded: not an empty `tracestate:` line.
        for headers in [vec![], vec![tp]] {
            let (status, echo) = ask(&gw, &headers).await;
            assert_eq!(status, StatusCode::OK);
            sent(&echo);
            assert!(echo["headers"].get("tracestate").is_none(), "{echo}");
        }
        // Up to 32 members in 512 characters: byte for byte.
        let full = members('k', 32, 15).join(",") + "v";
        assert_eq!(full.len(), 512);
        let (_, echo) = ask(&gw, &[tp, ("tracestate", &full)]).await;
        assert_eq!(
            echo["headers"]["tracestate"],
            full.as_str(),
            "trusted {trusted}"
        );
        let (_, echo) = ask(&gw, &[tp, ("tracestate", "a=1 , b=2")]).await;
        assert_eq!(echo["headers"]["tracestate"], "a=1 , b=2");
        // 12 KB: members over 128 characters go first, then members from the right, until
        // it fits in 512; members past the 32nd before anything.
        let short = members('s', 4, 8); // 4 × 8 characters
        let mid = members('m', 10, 99); // 10 × 99
        let long = members('l', 20, 550); // 20 × 550: the first 18 are among the first 32
        let mut big: Vec<&str> = short[..2].iter().map(String::as_str).collect();
        big.push(&long[0]);
        big.extend(short[2..].iter().map(String::as_str));
        big.extend(mid.iter().map(String::as_str));
        big.extend(long[1..].iter().map(String::as_str));
        let big = big.join(",");
        assert!(big.len() > 12_000, "{}", big.len());
        // Left after the long ones: 4 short and 10 mid, 1 035 characters; each mid dropped
        // from the right saves 100, so four of them stay: 32 + 396 + 7 commas = 435 ≤ 512.
        let mut want: Vec<&str> = short.iter().map(String::as_str).collect();
        want.extend(mid[..4].iter().map(String::as_str));
        let want = want.join(",");
        assert!(want.len() <= 512 && want.len() + 100 > 512);
        let (status, echo) = ask(&gw, &[tp, ("tracestate", &big)]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            echo["headers"]["tracestate"],
            want.as_str(),
            "trusted {trusted}"
        );
        // No valid traceparent: a new trace, and no state of the caller's goes with it.
        let (_, echo) = ask(&gw, &[("tracestate", "a=1")]).await;
        assert!(echo["headers"].get("tracestate").is_none(), "{echo}");
    }
}

/// Without an endpoint tollgate is no participant: any `tracestate` passes as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_a_long_tracestate_passes_untouched() {
    let gw = Gateway::start(&config(echo_upstream().await, "", "")).await;
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let big = members('l', 20, 550).join(",");
    let (_, echo) = ask(&gw, &[("traceparent", &traceparent), ("tracestate", &big)]).await;
    assert_eq!(echo["headers"]["tracestate"], big.as_str());
    let (_, echo) = ask(&gw, &[("traceparent", &traceparent)]).await;
    assert!(echo["headers"].get("tracestate").is_none(), "{echo}");
}
