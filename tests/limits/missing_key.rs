//! `on_missing_key` through the real gateway (issue 35): a 3/min per-account login policy
//! and POSTs that lack the account. `skip` (and unset) lets them all through, `deny`
//! refuses them (401 for the account, 400 for a header or query parameter) before anything
//! is spent, `shared` counts them in one bucket beside every account's own, and a shadow
//! `deny` forwards them and counts a shadow denial.

use std::sync::Arc;

use crate::common::config::ConfigBuilder;
use crate::common::limits::metrics;
use crate::common::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use tollgate::limit::clock::ManualClock;

/// A gateway whose `login` route asks `login_per_account` (gcra, 3 a minute, keyed on
/// `key`, with `extra` policy lines); `route` adds keys to the route. The clock stands
/// still: no cell comes back during a test.
async fn gateway(key: &str, extra: &str, route: &str) -> Gateway {
    let text = ConfigBuilder::new("")
        .trust_loopback("")
        .text("[account]\nheader = \"x-username\"\n")
        .upstream(echo_upstream().await)
        .text(&format!(
            "[policies.login_per_account]\nkey = [{key}]\nalgorithm = \"gcra\"\n\
             limit = 3\nperiod = \"1m\"\nburst = 3\n{extra}\n"
        ))
        .text(&format!(
            "[[routes]]\nname = \"login\"\nupstream = \"app\"\n\
             policies = [\"login_per_account\"]\n{route}\n"
        ))
        .build();
    Gateway::start_with_clock(&text, Arc::new(ManualClock::new())).await
}

/// POST `path` from one address, with the account `user` when given.
async fn post(gw: &Gateway, path: &str, user: Option<&str>) -> Response<Incoming> {
    let mut req = Request::post(gw.url(path)).header("x-forwarded-for", "203.0.113.9");
    if let Some(u) = user {
        req = req.header("x-username", u);
    }
    send_h1(gw.addrs.listen, req.body(Empty::<Bytes>::new()).unwrap()).await
}

/// The statuses of `n` POSTs to `/login`.
async fn statuses(gw: &Gateway, user: Option<&str>, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(post(gw, "/login", user).await.status().as_u16());
    }
    out
}

const ACCOUNT: &str = "\"account\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_and_unset_let_every_post_without_the_account_through() {
    for extra in ["", "on_missing_key = \"skip\""] {
        let gw = gateway(ACCOUNT, extra, "").await;
        assert_eq!(statuses(&gw, None, 5).await, [200; 5], "{extra:?}");
    }
}

/// The case: 5 POSTs without the account are 5 × 401, with the policy and the part
/// named; they spend nothing, so an account still has its 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_refuses_posts_without_the_account_with_401() {
    let gw = gateway(ACCOUNT, "on_missing_key = \"deny\"", "").await;
    for _ in 0..5 {
        let resp = post(&gw, "/login", None).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let body = json(resp).await;
        assert_eq!(
            body["type"],
            "https://tollgate.dev/problems/unauthenticated"
        );
        assert_eq!(
            body["detail"],
            "policy `login_per_account` needs an account (the `x-username` header)"
        );
    }
    assert_eq!(statuses(&gw, Some("alice"), 4).await, [200, 200, 200, 429]);
    let m = metrics(&gw).await;
    assert!(
        m.contains("policy=\"login_per_account\",outcome=\"deny\"} 1"),
        "a refusal is no denial of the policy's: {m}"
    );
}

/// A header or query parameter part: 400, the part named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_refuses_a_missing_header_or_query_parameter_with_400() {
    for (key, path, what) in [
        ("\"header:x-username\"", "/login", "the `x-username` header"),
        (
            "\"query:user\"",
            "/login?other=1",
            "the `user` query parameter",
        ),
    ] {
        let gw = gateway(key, "on_missing_key = \"deny\"", "").await;
        let resp = post(&gw, path, None).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{key}");
        assert!(resp.headers().get("www-authenticate").is_none());
        let body = json(resp).await;
        assert_eq!(body["type"], "https://tollgate.dev/problems/bad_request");
        assert_eq!(
            body["detail"],
            format!("policy `login_per_account` needs {what}")
        );
    }
    // With the header, counted as before.
    let gw = gateway("\"header:x-username\"", "on_missing_key = \"deny\"", "").await;
    assert_eq!(statuses(&gw, Some("bob"), 4).await, [200, 200, 200, 429]);
}

/// Every POST without the account spends from one bucket: 3 × 200, then 429; an account's
/// own budget is untouched by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_counts_posts_without_the_account_in_one_bucket() {
    let gw = gateway(ACCOUNT, "on_missing_key = \"shared\"", "").await;
    assert_eq!(statuses(&gw, None, 5).await, [200, 200, 200, 429, 429]);
    let denied = post(&gw, "/login", None).await;
    assert_eq!(
        header_of(&denied, "ratelimit-policy").as_deref(),
        Some("\"login_per_account\";q=3;w=60"),
        "no partition key: the shared bucket names no account"
    );
    assert_eq!(statuses(&gw, Some("alice"), 4).await, [200, 200, 200, 429]);
    assert_eq!(statuses(&gw, Some("bob"), 1).await, [200]);
}

/// Shadow (the route's mode or the policy's own): a `deny` policy forwards the request and
/// counts a shadow denial, as a shadow policy that would deny does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_deny_forwards_and_counts_a_shadow_denial() {
    for (extra, route) in [
        ("on_missing_key = \"deny\"", "mode = \"shadow\""),
        ("on_missing_key = \"deny\"\nmode = \"shadow\"", ""),
    ] {
        let gw = gateway(ACCOUNT, extra, route).await;
        for _ in 0..5 {
            let resp = post(&gw, "/login", None).await;
            assert_eq!(resp.status(), StatusCode::OK, "{extra} {route}");
            assert!(resp.headers().get("ratelimit").is_none());
        }
        let m = metrics(&gw).await;
        assert!(
            m.contains(
                "tollgate_decisions_total{route=\"login\",policy=\"login_per_account\",outcome=\"shadow_deny\"} 5"
            ),
            "{m}"
        );
    }
}

fn header_of(resp: &Response<Incoming>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}
