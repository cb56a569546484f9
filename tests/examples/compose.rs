//! The compose example without Docker: its `tollgate.toml`, with a real `redis-server` for
//! the `redis` service and an echoing backend for `whoami`, answers the README's "What you
//! will see": one request reaches the backend with the forwarding headers tollgate adds
//! and RateLimit headers on the answer; 40 requests sent at once get at least the burst of
//! ten and at most `burst + elapsed × rate` 200s, and the rest 429s with `Retry-After`. The
//! image build, the services' names and the published ports are Docker's and are not run
//! here (`static_files` and `docker` check those files).

use std::time::Instant;

use http::StatusCode;

use crate::common::process::{spawn_serve_with_env, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;
use crate::running::{header, timed};
use crate::{SECRETS, examples, read, rewrite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_config_echoes_and_answers_forty_at_once_with_its_burst() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let cfg = rewrite(
        &read(&examples().join("compose/tollgate.toml")),
        &[
            ("\"0.0.0.0:8080\"", "\"127.0.0.1:0\""),
            ("\"0.0.0.0:9901\"", "\"127.0.0.1:0\""),
            ("redis://redis:6379", &redis.url()),
            ("http://whoami:80", &format!("http://{up}")),
            // The bound is the store's: a 10 ms timeout on a busy test machine would fail
            // open (`on_store_error = "open"`), and admit what the store never decided.
            ("timeout = \"10ms\"", "timeout = \"1s\""),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("tollgate.toml", &cfg), SECRETS);
    let started = Instant::now();

    // curl -si http://localhost:8080/: the echo, with RateLimit headers.
    let first = timed(send_h1(gw.addr, get(&format!("http://{}/", gw.addr)))).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(
        header(&first, "ratelimit-policy").contains("\"per_ip\";q=20;w=1"),
        "{:?}",
        first.headers()
    );
    assert!(!header(&first, "ratelimit").is_empty());
    let echo = json(first).await;
    let seen = &echo["headers"];
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{echo}");
    assert_eq!(seen["x-real-ip"], "127.0.0.1", "{echo}");
    assert!(
        seen["via"]
            .as_str()
            .unwrap_or("")
            .starts_with("1.1 tollgate-"),
        "{echo}"
    );

    // seq 40 | xargs -P 40 … curl: 40 at once from one address.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let addr = gw.addr;
        tasks.spawn(async move {
            let resp = timed(send_h1(addr, get(&format!("http://{addr}/")))).await;
            (resp.status(), header(&resp, "retry-after"))
        });
    }
    let mut passed = 1; // the first request's
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            (StatusCode::OK, _) => passed += 1,
            (StatusCode::TOO_MANY_REQUESTS, retry) => {
                assert!(!retry.is_empty(), "a 429 without Retry-After")
            }
            (other, _) => panic!("unexpected {other}"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // per_ip: 20/s, burst 10, one key (no trusted proxy: every client here is 127.0.0.1).
    let bound = 10 + (elapsed * 20.0).floor() as u64;
    assert!(
        passed <= bound,
        "{passed} of 41 passed in {elapsed:.2}s, over burst + elapsed × rate = {bound}"
    );
    assert!(passed >= 10, "{passed} of 41 passed: less than the burst");
}
