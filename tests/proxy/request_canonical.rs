//! One canonical request, over real sockets: every spelling of a limited path is the limited
//! path (and reaches the upstream canonical), ambiguous ones are refused, the authority that
//! routes is the one forwarded, and loops are cut.

use std::net::SocketAddr;

use crate::common::config::ConfigBuilder;
use crate::common::*;

/// The echo upstream's JSON, from a raw answer.
fn echo(answer: &str) -> serde_json::Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|_| panic!("no echo in {answer:?}"))
}

fn get(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// A strict login route (1 request per hour) beside an unlimited catch-all.
fn login_config(up: SocketAddr, extra_server: &str) -> String {
    ConfigBuilder::new(extra_server)
        .upstream(up)
        .policy("login", &["route"], "gcra", 1, "1h", "")
        .app_route(
            "login",
            "match = { path_prefix = \"/api/login\" }\npolicies = [\"login\"]",
        )
        .app_route("rest", "")
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_the_login_path_is_the_login_route() {
    // Before the fix each of these took the unlimited catch-all and reached the upstream
    // verbatim, so the login limit never applied.
    let up = echo_upstream().await;
    let gw = Gateway::start(&login_config(up, "")).await;
    let first = raw(gw.addrs.listen, &get("/api/login", "a")).await;
    assert_eq!(status(&first), 200, "{first}");
    for path in [
        "//api/login",
        "/api//login",
        "/api/./login",
        "/x/../api/login",
        "/api/%6Cogin",
        "/%61pi/login",
        "/api/%2e/login",
        "/api/%2E%2e/api/login",
        "/../../api/login",
    ] {
        let answer = raw(gw.addrs.listen, &get(path, "a")).await;
        assert_eq!(
            status(&answer),
            429,
            "{path} must hit the login limit: {answer}"
        );
    }
    // Absolute form: the target's path is normalized too.
    let answer = raw(
        gw.addrs.listen,
        "GET http://a//api/login HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&answer), 429, "{answer}");
    // What the upstream receives is the canonical path.
    let answer = raw(gw.addrs.listen, &get("//x/./y/../%7Ez?q=%2F", "a")).await;
    assert_eq!(echo(&answer)["uri"], "/x/~z?q=%2F", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_paths_are_refused_and_counted() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&login_config(up, "")).await;
    for path in [
        "/api%2Flogin",
        "/api%5clogin",
        "/api\\login",
        "/api;/login",
        "/a/%00",
    ] {
        let answer = raw(gw.addrs.listen, &get(path, "a")).await;
        assert_eq!(status(&answer), 400, "{path}: {answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
    }
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    assert_eq!(
        metric_sum(&m, "tollgate_requests_total{route=\"-\",status=\"400\"}"),
        5.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_escaped_slashes_never_cross_a_segment() {
    let up = echo_upstream().await;
    let extra = "escaped_slashes = \"keep\"\npath_parameters = \"keep\"";
    let gw = Gateway::start(&login_config(up, extra)).await;
    for (path, forwarded) in [
        ("/api%2flogin", "/api%2Flogin"),
        ("/api\\login", "/api%5Clogin"),
        ("/api;/login", "/api;/login"),
    ] {
        let answer = raw(gw.addrs.listen, &get(path, "a")).await;
        assert_eq!(status(&answer), 200, "{path}: not the login route");
        assert_eq!(echo(&answer)["uri"], forwarded);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_insensitive_routes_match_any_case() {
    let up = echo_upstream().await;
    let cfg = login_config(up, "").replace(
        "match = { path_prefix = \"/api/login\" }",
        "match = { path_prefix = \"/api/login\", case_insensitive = true }",
    );
    let gw = Gateway::start(&cfg).await;
    assert_eq!(
        status(&raw(gw.addrs.listen, &get("/API/Login", "a")).await),
        200
    );
    assert_eq!(
        status(&raw(gw.addrs.listen, &get("/api/LOGIN", "a")).await),
        429
    );
}

/// Two routes told apart by host only.
fn host_config(up: SocketAddr) -> String {
    ConfigBuilder::without_admin("")
        .upstream(up)
        .app_route(
            "admin",
            "match = { host = \"admin.example\" }\nmode = \"enforce\"\nupgrades = []",
        )
        .app_route("public", "")
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authority_that_routes_is_the_one_forwarded() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&host_config(up)).await;
    // Absolute form: the target's authority wins over Host and is what the upstream sees
    // (before the fix the route came from the target and the client's Host was forwarded).
    let answer = raw(
        gw.addrs.listen,
        "GET http://Admin.Example./x HTTP/1.1\r\nHost: public.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        echo(&answer)["headers"]["host"],
        "admin.example",
        "{answer}"
    );
    assert_eq!(echo(&answer)["uri"], "/x");
    // A trailing dot and upper case are the same host.
    let answer = raw(gw.addrs.listen, &get("/y", "ADMIN.example.:80")).await;
    assert_eq!(echo(&answer)["headers"]["host"], "admin.example:80");
    // Two Host lines, or none on HTTP/1.1: refused.
    let two = "GET / HTTP/1.1\r\nHost: admin.example\r\nHost: public.example\r\nConnection: close\r\n\r\n";
    assert_eq!(status(&raw(gw.addrs.listen, two).await), 400);
    let none = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
    assert_eq!(status(&raw(gw.addrs.listen, none).await), 400);
    // Naming identity headers in Connection does not strip them.
    let named =
        "GET / HTTP/1.1\r\nHost: admin.example\r\nConnection: close, host, x-forwarded-for\r\n\r\n";
    let answer = raw(gw.addrs.listen, named).await;
    assert_eq!(
        echo(&answer)["headers"]["host"],
        "admin.example",
        "{answer}"
    );
    assert_eq!(echo(&answer)["headers"]["x-forwarded-for"], "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_authority_and_host_must_agree() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&host_config(up)).await;
    let port = gw.addrs.listen.port();
    let req = http::Request::get(format!("http://admin.example:{port}/"))
        .header("host", "public.example")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send_h2(gw.addrs.listen, req).await;
    assert_eq!(
        resp.status(),
        400,
        "differing :authority and host are refused"
    );
    let req = http::Request::get(format!("http://admin.example:{port}/"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send_h2(gw.addrs.listen, req).await;
    let echo = json(resp).await;
    assert_eq!(echo["headers"]["host"], format!("admin.example:{port}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_already_passed_us_is_a_loop() {
    // The gateway's upstream is itself: without loop detection each hop spawns another.
    let port = crate::common::peers::free_ports(1)[0];
    let cfg = format!(
        r#"
[server]
listen = "{port}"
admin_listen = "127.0.0.1:0"
via_pseudonym = "tg-loop"

[upstreams.self]
urls = ["http://{port}"]

[[routes]]
name = "all"
upstream = "self"
"#
    );
    let gw = Gateway::start(&cfg).await;
    let answer = raw(gw.addrs.listen, &get("/", "a")).await;
    assert_eq!(status(&answer), 508, "{answer}");
    let m = metrics_text(gw.addrs.admin_listen.unwrap()).await;
    // The looped hop refused it before routing; the first hop passed that answer back.
    let count = |route: &str| {
        metric_sum(
            &m,
            &format!("tollgate_requests_total{{route=\"{route}\",status=\"508\"}}"),
        )
    };
    assert_eq!((count("-"), count("all")), (1.0, 1.0), "{m}");
}

/// An account-keyed route (1 per hour) beside the catch-all.
fn account_config(up: SocketAddr) -> String {
    ConfigBuilder::without_admin("")
        .account()
        .upstream(up)
        .policy("per_account", &["account"], "gcra", 1, "1h", "")
        .app_route("acct", "policies = [\"per_account\"]")
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_http2_values_and_underscore_twins_are_not_fresh_accounts() {
    // Seen: over HTTP/2 `x-api-key: victim ` was a new key each padding while the HTTP/1.1
    // upstream trimmed it to `victim`; `x_api_key: victim` is `HTTP_X_API_KEY` to CGI-style
    // backends but was never keyed.
    let up = echo_upstream().await;
    let gw = Gateway::start(&account_config(up)).await;
    let h2 = |value: &'static str| {
        http::Request::get(gw.url("/"))
            .header("x-api-key", value)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap()
    };
    assert_eq!(send_h2(gw.addrs.listen, h2("victim")).await.status(), 200);
    assert_eq!(send_h2(gw.addrs.listen, h2("victim")).await.status(), 429);
    for padded in ["victim ", "\tvictim", " victim\t"] {
        assert_eq!(
            send_h2(gw.addrs.listen, h2(padded)).await.status(),
            400,
            "{padded:?}"
        );
    }
    let answer = raw(
        gw.addrs.listen,
        "GET / HTTP/1.1\r\nHost: a\r\nx_api_key: victim\r\nx_trace: kept\r\nConnection: close\r\n\r\n",
    )
    .await;
    let headers = &echo(&answer)["headers"];
    assert!(headers.get("x_api_key").is_none(), "{answer}");
    assert_eq!(headers["x_trace"], "kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_from_untrusted_peers_never_reach_the_upstream() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&host_config(up)).await;
    let answer = raw(
        gw.addrs.listen,
        "GET /x HTTP/1.1\r\nHost: public.example\r\nX-Forwarded-Host: admin.example\r\nForwarded: for=1.2.3.4;host=admin.example\r\nX-Forwarded-For: 1.2.3.4\r\nX-Original-URL: /api/login\r\nX-Forwarded-Prefix: /api\r\nConnection: close\r\n\r\n",
    )
    .await;
    let h = &echo(&answer)["headers"];
    for claim in ["x-forwarded-host", "x-original-url", "x-forwarded-prefix"] {
        assert!(
            h.get(claim).is_none(),
            "{claim} reached the upstream: {answer}"
        );
    }
    assert_eq!(h["forwarded"], "for=127.0.0.1;proto=http");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_a_missing_host_and_a_bracketed_name_are_refused() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&host_config(up)).await;
    for head in [
        "CONNECT /api/x HTTP/1.1\r\nHost: admin.example\r\nConnection: close\r\n\r\n",
        "CONNECT admin.example:443 HTTP/1.1\r\nHost: admin.example:443\r\nConnection: close\r\n\r\n",
        "GET /whoami HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [admin.example]\r\nConnection: close\r\n\r\n",
    ] {
        assert_eq!(status(&raw(gw.addrs.listen, head).await), 400, "{head:?}");
    }
}
