//! The admin listener's `GET /routes` (routing table in match order, with each route's
//! policies) and `GET /config` (the running config, secrets masked), over real sockets.

use std::net::SocketAddr;

use crate::common::config::{ConfigBuilder, policy};
use crate::common::process::{GatewayProcess, spawn_serve_with_env, temp_file};
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::Empty;
use serde_json::Value;

/// `GET http://admin/path`, answered as JSON (content type checked).
async fn admin_json(admin: SocketAddr, path: &str) -> Value {
    let resp = send_h1(admin, get(&format!("http://{admin}{path}"))).await;
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    assert_eq!(
        resp.headers()[header::CONTENT_TYPE],
        "application/json",
        "{path}"
    );
    json(resp).await
}

fn names(routes: &Value) -> Vec<&str> {
    routes["routes"]
        .as_array()
        .expect("a routes array")
        .iter()
        .map(|r| r["name"].as_str().expect("a route name"))
        .collect()
}

/// Two policies and three routes written most specific first, so the config order is also
/// the match order.
fn three_routes(up: SocketAddr) -> String {
    ConfigBuilder::new("")
        .account()
        .upstream(up)
        .text(&policy("per_ip", &["ip"], "gcra", 10, "1s", ""))
        .text(&policy(
            "per_account",
            &["ip", "account"],
            "token_bucket",
            5,
            "1m",
            "burst = 8\nmode = \"shadow\"\n",
        ))
        .text(
            "[[routes]]\nname = \"host_only\"\nmatch = { host = \"Example.COM\", path_prefix = \"/\" }\n\
             upstream = \"app\"\n\
             [[routes]]\nname = \"api\"\n\
             match = { path_prefix = \"/api\", methods = [\"GET\", \"POST\"], case_insensitive = true }\n\
             upstream = \"app\"\npolicies = [\"per_ip\", \"per_account\"]\non_store_error = \"closed\"\n\
             [[routes]]\nname = \"rest\"\nmatch = { path_prefix = \"/\" }\nupstream = \"app\"\n\
             policies = [\"per_ip\"]\nmode = \"shadow\"\n",
        )
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_lists_routes_in_config_order_with_their_policies() {
    let gw = Gateway::start(&three_routes(echo_upstream().await)).await;
    let admin = gw.addrs.admin_listen.expect("an admin listener");
    let v = admin_json(admin, "/routes").await;
    assert_eq!(names(&v), ["host_only", "api", "rest"], "{v:#}");

    let host_only = &v["routes"][0];
    assert_eq!(host_only["host"], "example.com");
    assert_eq!(host_only["policies"], serde_json::json!([]));

    let api = &v["routes"][1];
    assert_eq!(api["index"], 1);
    assert_eq!(api["host"], Value::Null);
    assert_eq!(api["path_prefix"], "/api");
    assert_eq!(api["methods"], serde_json::json!(["GET", "POST"]));
    assert_eq!(api["case_insensitive"], true);
    assert_eq!(api["upstream"], "app");
    assert_eq!(api["mode"], "enforce");
    assert_eq!(api["on_store_error"], "closed");
    let policies = api["policies"].as_array().expect("policies");
    assert_eq!(policies.len(), 2, "{api:#}");
    let (per_ip, per_account) = (&policies[0], &policies[1]);
    assert_eq!(per_ip["name"], "per_ip");
    assert_eq!(per_ip["algorithm"], "gcra");
    assert_eq!(per_ip["limit"], 10);
    assert_eq!(per_ip["period"], "1s");
    assert_eq!(per_ip["period_ms"], 1000);
    assert_eq!(per_ip["key"], serde_json::json!(["ip"]));
    assert_eq!(per_ip["site"], "local");
    assert_eq!(per_ip["mode"], "enforce", "the route's mode");
    assert_eq!(per_ip["mode_override"], Value::Null);
    assert_eq!(per_account["name"], "per_account");
    assert_eq!(per_account["algorithm"], "token_bucket");
    assert_eq!(per_account["limit"], 5);
    assert_eq!(per_account["period"], "1m");
    assert_eq!(per_account["burst"], 8);
    assert_eq!(per_account["key"], serde_json::json!(["ip", "account"]));
    assert_eq!(per_account["mode"], "shadow", "its own mode wins");
    assert_eq!(per_account["mode_override"], "shadow");

    let rest = &v["routes"][2];
    assert_eq!(rest["mode"], "shadow");
    assert_eq!(rest["methods"], serde_json::json!([]));
    assert_eq!(rest["on_store_error"], "open");
    assert_eq!(rest["policies"][0]["name"], "per_ip");
    assert_eq!(rest["policies"][0]["mode"], "shadow", "the route's mode");
}

/// Written least specific first: `/routes` shows the router's order (and each route's
/// position in the file as `index`), and the public listener routes the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_shows_the_order_requests_are_matched_in() {
    let dead = dead_port().await;
    let toml = ConfigBuilder::new("")
        .upstream(echo_upstream().await)
        .text(&format!(
            "[upstreams.gone]\nurls = [\"http://{dead}\"]\n\
             [[routes]]\nname = \"all\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n\
             [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/api\" }}\nupstream = \"gone\"\n"
        ))
        .build();
    let gw = Gateway::start(&toml).await;
    let v = admin_json(gw.addrs.admin_listen.expect("admin"), "/routes").await;
    assert_eq!(names(&v), ["api", "all"], "{v:#}");
    assert_eq!(v["routes"][0]["index"], 1);
    assert_eq!(v["routes"][0]["upstream"], "gone");
    assert_eq!(v["routes"][1]["index"], 0);
    // The first route listed is the one that answers: its upstream is down (502).
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/api/x"))).await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/other"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_get_405_with_allow_and_unknown_paths_404() {
    let gw = Gateway::start(&three_routes(echo_upstream().await)).await;
    let admin = gw.addrs.admin_listen.expect("an admin listener");
    for path in ["/routes", "/config"] {
        for method in ["POST", "DELETE", "PUT"] {
            let req = Request::builder()
                .method(method)
                .uri(format!("http://{admin}{path}"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = send_h1(admin, req).await;
            assert_eq!(
                resp.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(resp.headers()[header::ALLOW], "GET", "{method} {path}");
        }
    }
    // Probes and the scrape answer GET and HEAD only.
    for path in ["/healthz", "/readyz", "/metrics"] {
        for (method, status) in [("POST", 405), ("DELETE", 405), ("HEAD", 200), ("GET", 200)] {
            let req = Request::builder()
                .method(method)
                .uri(format!("http://{admin}{path}"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = send_h1(admin, req).await;
            assert_eq!(resp.status().as_u16(), status, "{method} {path}");
            if status == 405 {
                assert_eq!(
                    resp.headers()[header::ALLOW],
                    "GET, HEAD",
                    "{method} {path}"
                );
            }
        }
    }
    let resp = send_h1(admin, get(&format!("http://{admin}/routes/x"))).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(text(resp).await, "not found\n");
    // The old endpoints are unchanged.
    let resp = send_h1(admin, get(&format!("http://{admin}/healthz"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/plain");
    assert_eq!(text(resp).await, "ok\n");
}

const STORE_PASSWORD: &str = "store-pw-7QzK3vW9mX";
const ACCOUNT_SECRET: &str = "account-secret-Jd82hLq0pR";
const PEER_SECRET: &str = "peer-secret-Xb41nTe6cY-at-least-32-bytes-long";
const URL_PASSWORD: &str = "url-pw-Hm5sPq2Lz";
const ADMIN_TOKEN: &str = "admin-token-Wq93kd0Zs1";

/// `tollgate serve -c config` with the secrets in its environment.
fn serve_with_secrets(config: &std::path::Path) -> GatewayProcess {
    spawn_serve_with_env(
        config,
        &[
            ("TG_ADMIN_TEST_STORE_PW", STORE_PASSWORD),
            ("TG_ADMIN_TEST_ACCOUNT", ACCOUNT_SECRET),
            ("TG_ADMIN_TEST_PEER", PEER_SECRET),
            ("TG_ADMIN_TEST_TOKEN", ADMIN_TOKEN),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_shows_no_secret() {
    let (store, up) = (dead_port().await, dead_port().await);
    let peer = crate::common::peers::free_ports(1)[0];
    let toml = ConfigBuilder::new("")
        .text(&format!(
            "[account]\nheader = \"x-api-key\"\nhash_key_env = \"TG_ADMIN_TEST_ACCOUNT\"\n\
             [store]\nkind = \"redis\"\nurls = [\"redis://{store}\"]\ntimeout = \"50ms\"\n\
             password_env = \"TG_ADMIN_TEST_STORE_PW\"\n\
             [cluster]\npeer_listen = \"{peer}\"\npeers = [\"{peer}\"]\n\
             peer_secret_env = \"TG_ADMIN_TEST_PEER\"\n\
             [upstreams.app]\nurls = [\"http://bob:{URL_PASSWORD}@{up}\"]\n"
        ))
        .text(&policy("per_account", &["account"], "gcra", 10, "1s", ""))
        .text("[[routes]]\nname = \"api\"\nupstream = \"app\"\npolicies = [\"per_account\"]\n")
        .build();
    let gw = serve_with_secrets(&temp_file("secrets.toml", &toml));
    let admin = gw.admin.expect("an admin listener");
    let resp = send_h1(admin, get(&format!("http://{admin}/config"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let body = text(resp).await;
    for secret in [STORE_PASSWORD, ACCOUNT_SECRET, PEER_SECRET, URL_PASSWORD] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["store"]["password"], "***", "{v:#}");
    assert_eq!(v["account"]["hash_key"], "***", "{v:#}");
    assert_eq!(v["cluster"]["peer_secret"], "***", "{v:#}");
    assert_eq!(
        v["upstreams"][0]["urls"][0],
        format!("http://bob:***@{up}/"),
        "{v:#}"
    );
    // The rest of the config is there.
    assert_eq!(v["store"]["kind"], "redis");
    assert_eq!(v["store"]["urls"][0], format!("redis://{store}"));
    assert_eq!(v["account"]["header"], "x-api-key");
    assert_eq!(v["cluster"]["peers"][0], peer.to_string());
    assert_eq!(v["routes"][0]["name"], "api");
    assert_eq!(v["policies"][0]["name"], "per_account");
    assert_eq!(v["policies"][0]["effective_site"], "local");
    // Keys a reload compares or an operator checks (issue 52: request_id_header was absent,
    // so a reload changing it said ok and kept the old one).
    assert_eq!(v["server"]["request_id_header"], "x-request-id", "{v:#}");
    assert_eq!(v["routes"][0]["require_account"], false, "{v:#}");
    assert_eq!(
        v["routes"][0]["key_body"],
        Value::Null,
        "no body key on this route"
    );
}

/// With `admin_token_env`, everything but health needs `Authorization: Bearer <token>`:
/// balancers keep probing `/healthz` and `/readyz`; a missing or wrong token gets 401 with
/// `WWW-Authenticate: Bearer`; `/config` masks the token itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_everything_but_health() {
    let toml = ConfigBuilder::new("admin_token_env = \"TG_ADMIN_TEST_TOKEN\"")
        .upstream(dead_port().await)
        .text("[[routes]]\nname = \"api\"\nupstream = \"app\"\n")
        .build();
    let gw = serve_with_secrets(&temp_file("token.toml", &toml));
    let admin = gw.admin.expect("an admin listener");
    let ask = |path: &'static str, token: Option<String>| async move {
        let mut req = http::Request::get(format!("http://{admin}{path}"));
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, t);
        }
        send_h1(
            admin,
            req.body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
        .await
    };
    for path in ["/healthz", "/readyz"] {
        assert_eq!(ask(path, None).await.status(), StatusCode::OK, "{path}");
    }
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let near_miss = format!("Bearer {ADMIN_TOKEN}x");
    for path in ["/metrics", "/routes", "/config"] {
        for wrong in [
            None,
            Some("Bearer nope"),
            Some(near_miss.as_str()),
            Some(ADMIN_TOKEN),
        ] {
            let resp = ask(path, wrong.map(str::to_string)).await;
            assert_eq!(
                resp.status(),
                StatusCode::UNAUTHORIZED,
                "{path} with {wrong:?}"
            );
            assert_eq!(resp.headers()[header::WWW_AUTHENTICATE], "Bearer");
        }
        assert_eq!(
            ask(path, Some(bearer.clone())).await.status(),
            StatusCode::OK,
            "{path}"
        );
    }
    let body = text(ask("/config", Some(bearer)).await).await;
    assert!(!body.contains(ADMIN_TOKEN), "the token in {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["server"]["admin_token"], "***", "{v:#}");
}
