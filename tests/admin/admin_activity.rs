//! `GET /activity` (decisions per second in 10-second buckets, read from the decision
//! counters by a sampler the test ticks by hand) and `GET /status` (store, breakers, fleet),
//! over real sockets.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::config::{ConfigBuilder, route};
use crate::common::*;
use http::{StatusCode, header};
use serde_json::{Value, json};
use tollgate::limit::clock::ManualClock;

/// `GET http://admin/path` as JSON.
async fn admin_json(admin: SocketAddr, path: &str) -> Value {
    let resp = send_h1(admin, get(&format!("http://{admin}{path}"))).await;
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    json(resp).await
}

/// The series of `route` and `policy` in an `/activity` answer.
fn series<'a>(v: &'a Value, route: &str, policy: &str) -> &'a Value {
    v["series"]
        .as_array()
        .expect("a series array")
        .iter()
        .find(|s| s["route"] == route && s["policy"] == policy)
        .unwrap_or_else(|| panic!("no series {route}/{policy} in {v:#}"))
}

/// A shadow route `search` (5 a minute per IP) and an enforced `login` (2 a minute per IP).
fn shadow_and_enforce(up: SocketAddr) -> String {
    ConfigBuilder::new("")
        .trust_loopback("")
        .upstream(up)
        .policy("per_ip", &["ip"], "gcra", 5, "1m", "")
        .policy("login_ip", &["ip"], "gcra", 2, "1m", "")
        .text(
            "[[routes]]\nname = \"search\"\nmatch = { path_prefix = \"/search\" }\n\
             upstream = \"app\"\npolicies = [\"per_ip\"]\nmode = \"shadow\"\n",
        )
        .text(&route("login", &["login_ip"], "open"))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_is_the_decision_counters_per_second_per_bucket() {
    let gw = Gateway::start_sampled_by_hand(&shadow_and_enforce(echo_upstream().await)).await;
    let (admin, sampler) = (gw.addrs.admin_listen.unwrap(), gw.sampler.clone().unwrap());
    let v = admin_json(admin, "/activity").await;
    assert_eq!(
        v,
        json!({ "interval_seconds": 10, "series": [] }),
        "no reading yet"
    );

    sampler.tick();
    assert_eq!(
        admitted(gw.addrs.listen, "/search/q", "10.0.0.1", 30).await,
        30
    );
    assert_eq!(admitted(gw.addrs.listen, "/login", "10.0.0.2", 10).await, 2);
    sampler.tick();
    sampler.tick();

    let v = admin_json(admin, "/activity").await;
    assert_eq!(v["interval_seconds"], 10);
    let search = series(&v, "search", "per_ip");
    assert_eq!(search["mode"], "shadow");
    assert_eq!(search["allowed"], json!([0.5, 0.0]), "5 in 10 s, then none");
    assert_eq!(search["shadow_denied"], json!([2.5, 0.0]));
    assert_eq!(search["denied"], json!([0.0, 0.0]));
    let login = series(&v, "login", "login_ip");
    assert_eq!(login["mode"], "enforce");
    assert_eq!(login["allowed"], json!([0.2, 0.0]));
    assert_eq!(login["denied"], json!([0.8, 0.0]));
    assert_eq!(login["shadow_denied"], json!([0.0, 0.0]));

    let resp = send_h1(
        admin,
        http::Request::post(format!("http://{admin}/activity"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
}

/// A reload keeps the counters of a (route, policy) it keeps: its series goes on from the
/// readings before; a policy the reload adds starts at zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_each_pairs_series_by_name() {
    use crate::common::reload::{file, policy, reload, route, serve_sampled_by_hand};
    let up = echo_upstream().await;
    let before = file(
        up,
        &format!(
            "{}{}",
            policy("per_ip", "gcra", 100, ""),
            route("api", "/", &["per_ip"])
        ),
    );
    let after = file(
        up,
        &format!(
            "{}{}{}",
            policy("first", "gcra", 100, ""),
            policy("per_ip", "gcra", 100, ""),
            route("api", "/", &["first", "per_ip"])
        ),
    );
    let s = serve_sampled_by_hand(&before, &ManualClock::new()).await;
    let sampler = s.sampler.clone().unwrap();
    sampler.tick();
    assert_eq!(admitted(s.addr, "/x", "10.0.0.1", 10).await, 10);
    sampler.tick();
    let (status, answer) = reload(&s, &after).await;
    assert_eq!(status, StatusCode::OK, "{answer:#}");
    assert_eq!(admitted(s.addr, "/x", "10.0.0.1", 20).await, 20);
    sampler.tick();

    let v = admin_json(s.admin, "/activity").await;
    let names: Vec<&str> = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "per_ip"], "the running config's order");
    assert_eq!(series(&v, "api", "per_ip")["allowed"], json!([1.0, 2.0]));
    assert_eq!(series(&v, "api", "first")["allowed"], json!([0.0, 2.0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_the_memory_store_without_a_fleet() {
    let gw = Gateway::start(&shadow_and_enforce(echo_upstream().await)).await;
    let admin = gw.addrs.admin_listen.unwrap();
    // The admin listener answers as soon as it is bound; `ready` flips once every listener
    // serves. Wait for that (as a load balancer's probe would) before reading the status.
    eventually("/readyz answers 200", Duration::from_secs(10), || async {
        send_h1(admin, get(&format!("http://{admin}/readyz")))
            .await
            .status()
            == StatusCode::OK
    })
    .await;
    let v = admin_json(admin, "/status").await;
    assert_eq!(
        v,
        json!({
            "ready": true,
            "store": { "kind": "memory", "breaker_open": false, "breakers": [] },
            "nodes": 1,
            "fleet": null,
        })
    );
}

/// A store that is not there opens its breaker after one failed call; a peer that never
/// answers leaves the live set after two missed heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_an_open_breaker_and_a_silent_peer() {
    let store = dead_port().await;
    let ports = crate::common::peers::free_ports(2);
    let (me, silent) = (ports[0], ports[1]);
    let toml = ConfigBuilder::new("")
        .trust_loopback("")
        .upstream(echo_upstream().await)
        .store(
            "redis",
            &[format!("redis://{store}")],
            "50ms",
            "{ failures = 1, cooldown = \"1h\" }",
        )
        .cluster(&format!(
            "peer_listen = \"{me}\"\npeers = [\"{me}\", \"{silent}\"]\n\
             peer_secret_env = \"TG_DASH_PEER_SECRET\"\nheartbeat = \"100ms\"\n"
        ))
        .policy("per_ip", &["ip"], "gcra", 5, "1m", "site = \"central\"\n")
        .text(&route("api", &["per_ip"], "open"))
        .build();
    let gw = crate::common::process::spawn_serve_with_env(
        &crate::common::process::temp_file("status.toml", &toml),
        &[("TG_DASH_PEER_SECRET", crate::common::peers::SECRET)],
    );
    let admin = gw.admin.unwrap();
    assert_eq!(
        admitted(gw.addr, "/api", "10.0.0.1", 1).await,
        1,
        "fails open"
    );
    let v = admin_json(admin, "/status").await;
    assert_eq!(v["store"]["kind"], "redis");
    assert_eq!(v["store"]["breaker_open"], true, "{v:#}");
    assert_eq!(
        v["store"]["breakers"],
        json!([{ "node": "store", "open": true }])
    );
    assert_eq!(v["fleet"]["me"], me.to_string(), "{v:#}");
    eventually(
        "the silent peer is down",
        Duration::from_secs(10),
        || async {
            let v = admin_json(admin, "/status").await;
            v["fleet"]["down"] == json!([silent.to_string()]) && v["fleet"]["live"] == json!([])
        },
    )
    .await;
}
