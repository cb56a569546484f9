//! `GET` and `DELETE /limits/{policy}` on the admin listener, over real sockets: a key
//! built from the parts a request has reads the state requests left (local state, the
//! store's for central, the owner's for an owner key on another node), and `DELETE`
//! resets it so requests pass again.

use std::net::SocketAddr;

use crate::common::config::{central_config, limited, policy, route};
use crate::common::peers;
use crate::common::redis::RedisServer;
use crate::common::*;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use serde_json::Value;

async fn admin(admin: SocketAddr, method: Method, path: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{admin}{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send_h1(admin, req).await;
    let status = resp.status();
    let text = text(resp).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn passes(addr: SocketAddr, ip: &str, account: Option<&str>, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if get_as(addr, "/api", ip, account).await.status() == StatusCode::OK {
            ok += 1;
        }
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_key_is_read_and_reset() {
    let up = echo_upstream().await;
    let config = limited(up, "")
        .text(&policy("per_ip", &["ip"], "gcra", 5, "1h", ""))
        .text(&policy(
            "per_acct",
            &["account"],
            "sliding_window",
            3,
            "1h",
            "",
        ))
        .text(&route("api", &["per_ip", "per_acct"], "closed"))
        .build();
    let gw = Gateway::start(&config).await;
    let (addr, adm) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    assert_eq!(passes(addr, "192.0.2.1", Some("alice"), 4).await, 3);
    let (status, v) = admin(adm, Method::GET, "/limits/per_ip?ip=192.0.2.1").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["remaining"], 2, "{v}");
    assert_eq!(
        (v["site"].as_str(), v["source"].as_str()),
        (Some("local"), Some("local"))
    );
    assert_eq!(v["limit"], 5);
    // The account is hashed as a request's is: the raw value finds the key.
    let (_, v) = admin(adm, Method::GET, "/limits/per_acct?account=alice").await;
    assert_eq!(v["remaining"], 0, "{v}");
    assert!(!v["key"].as_str().unwrap().contains("alice"), "{v}");
    let (status, v) = admin(adm, Method::DELETE, "/limits/per_acct?account=alice").await;
    assert_eq!((status, &v["remaining"]), (StatusCode::OK, &Value::from(3)));
    assert_eq!(
        passes(addr, "192.0.2.1", Some("alice"), 3).await,
        2,
        "per_ip has 2 left"
    );

    for (method, path, want) in [
        (
            Method::GET,
            "/limits/nope?ip=192.0.2.1",
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/limits/per_ip", StatusCode::BAD_REQUEST),
        (Method::GET, "/limits/per_ip?ip=x", StatusCode::BAD_REQUEST),
        (
            Method::GET,
            "/limits/per_ip?ip=192.0.2.1&typo=1",
            StatusCode::BAD_REQUEST,
        ),
        (Method::GET, "/limits/per_acct", StatusCode::BAD_REQUEST),
        (
            Method::POST,
            "/limits/per_ip?ip=192.0.2.1",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
    ] {
        let (status, v) = admin(adm, method, path).await;
        assert_eq!(status, want, "{path}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_key_is_read_from_the_store_and_reset_there() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let config = central_config(
        up,
        &redis.url(),
        &policy(
            "shared",
            &["ip"],
            "token_bucket",
            4,
            "1h",
            "site = \"central\"",
        ),
        "policies = [\"shared\"]\non_store_error = \"closed\"",
    );
    let gw = Gateway::start(&config).await;
    let (addr, adm) = (gw.addrs.listen, gw.addrs.admin_listen.unwrap());
    assert_eq!(passes(addr, "198.51.100.4", None, 3).await, 3);
    let (status, v) = admin(adm, Method::GET, "/limits/shared?ip=198.51.100.4").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        (v["remaining"].as_u64(), v["source"].as_str()),
        (Some(1), Some("store"))
    );
    let (_, again) = admin(adm, Method::GET, "/limits/shared?ip=198.51.100.4").await;
    assert_eq!(again["remaining"], 1, "reading spends nothing");
    let (_, v) = admin(adm, Method::DELETE, "/limits/shared?ip=198.51.100.4").await;
    assert_eq!(v["remaining"], 4, "{v}");
    assert_eq!(passes(addr, "198.51.100.4", None, 5).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_key_is_read_from_its_owner_and_reset_there() {
    let up = echo_upstream().await;
    let limits = format!(
        "{}{}",
        policy("per_ip", &["ip"], "gcra", 4, "1h", "site = \"owner\""),
        route("api", &["per_ip"], "closed")
    );
    let fleet = peers::start(3, up, "heartbeat = \"100ms\"", &limits, "admin-owner");
    fleet.settled().await;
    let ip = "203.0.113.50";
    let owner = fleet.owner_of(&format!("per_ip:ip:{ip}"));
    let other = &fleet.nodes[(owner + 1) % 3];
    assert_eq!(passes(other.addr, ip, None, 3).await, 3);
    let adm = other.admin.unwrap();
    let path = format!("/limits/per_ip?ip={ip}");
    let (status, v) = admin(adm, Method::GET, &path).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["remaining"], 1, "{v}");
    assert_eq!(
        v["source"].as_str(),
        Some(fleet.peers[owner].to_string().as_str())
    );
    let (_, v) = admin(adm, Method::DELETE, &path).await;
    assert_eq!(v["remaining"], 4, "{v}");
    assert_eq!(passes(other.addr, ip, None, 5).await, 4);
}
