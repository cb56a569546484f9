//! The login example locks an account after five failures with a 429 and `Retry-After`,
//! answers a login without its `X-Login-User` header with a 401 naming the policy and the
//! header, fails closed when Redis is gone, and limits attempts per address when Redis is
//! back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::common::process::{spawn_serve_with_env, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;
use crate::running::{Backend, header, timed};
use crate::{SECRETS, examples, read, rewrite};

async fn login(
    addr: SocketAddr,
    header_user: &str,
    user: &str,
    password: &str,
) -> Response<Incoming> {
    let req = Request::post(format!("http://{addr}/login"))
        .header("x-login-user", header_user)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(format!(
            "username={user}&password={password}"
        ))))
        .unwrap();
    timed(send_h1(addr, req)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_example_locks_an_account_after_five_failures_and_fails_closed() {
    let dir = examples().join("login");
    let mut redis = RedisServer::start();
    let backend = Backend::start(&dir.join("backend.py"));
    let cfg = rewrite(
        &read(&dir.join("tollgate.toml")),
        &[
            ("redis://127.0.0.1:6379", &redis.url()),
            ("http://127.0.0.1:3000", &format!("http://{}", backend.addr)),
            ("\"127.0.0.1:8080\"", "\"127.0.0.1:0\""),
            ("\"127.0.0.1:9901\"", "\"127.0.0.1:0\""),
            // The README's promise is about a Redis that answers; a 10 ms timeout on a busy
            // test machine would turn a slow answer into the fail-closed 503.
            ("timeout = \"10ms\"", "timeout = \"1s\""),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("login.toml", &cfg), SECRETS);
    let addr = gw.addr;

    // Five wrong passwords reach the backend (401); the sixth, and the right password
    // after it, do not.
    for i in 0..5 {
        let resp = login(addr, "alice", "alice", &format!("guess{i}")).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "attempt {}", i + 1);
    }
    for password in ["guess5", "correct-horse"] {
        let resp = login(addr, "alice", "alice", password).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let wait: u64 = header(&resp, "retry-after").parse().unwrap();
        assert!(
            (170..=180).contains(&wait),
            "Retry-After {wait}: one cell per 180 s"
        );
        assert!(
            header(&resp, "ratelimit-policy").starts_with("\"login_per_account\";q=5;w=900;pk=:")
        );
        assert!(header(&resp, "ratelimit").starts_with("\"login_per_account\";r=0;t="));
        let body = json(resp).await;
        assert_eq!(
            body["violated-policies"],
            serde_json::json!(["login_per_account"])
        );
        assert_eq!(
            body["type"],
            "https://iana.org/assignments/http-problem-types#quota-exceeded"
        );
    }
    // A header that is not the form's user is the backend's 400 (it spends a per-IP cell).
    let resp = login(addr, "bob", "alice", "guess").await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    // No header at all: the gateway's 401 naming login_per_account and the header
    // (`on_missing_key = "deny"`), before the backend or any budget is asked.
    let req = Request::post(format!("http://{addr}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from("username=dave&password=x")))
        .unwrap();
    let resp = timed(send_h1(addr, req)).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let detail = json(resp).await["detail"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        detail.contains("login_per_account") && detail.contains("x-login-user"),
        "{detail}"
    );

    // Redis gone: /login fails closed, every other path still passes.
    redis.stop();
    let resp = login(addr, "carol", "carol", "x").await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!header(&resp, "retry-after").is_empty());
    let body = json(resp).await;
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    let resp = timed(send_h1(addr, get(&format!("http://{addr}/")))).await;
    assert_eq!(resp.status(), StatusCode::OK);

    // Redis back, empty (no persistence): the limits start again from full.
    redis.start_again();
    eventually("logins decided again", Duration::from_secs(10), || async {
        login(addr, "carol", "carol", "x").await.status() != StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let started = Instant::now();

    // Per address: 10 attempts at once (carol's one spent above), then one every 6 s.
    let mut attempts = 1;
    let denied = loop {
        let user = format!("user{attempts}");
        let resp = login(addr, &user, &user, "x").await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            break resp;
        }
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        attempts += 1;
        assert!(attempts < 20, "the per-IP limit never denied");
    };
    let refilled = (started.elapsed().as_secs_f64() / 6.0).ceil() as usize;
    assert!(
        (10..=10 + refilled).contains(&attempts),
        "{attempts} attempts admitted from one address"
    );
    assert!(header(&denied, "retry-after").parse::<u64>().unwrap() >= 1);
    assert_eq!(
        json(denied).await["violated-policies"],
        serde_json::json!(["login_per_ip"])
    );
}
