//! What the comments of `sh` blocks say a command prints, where a test can produce it and
//! the comment is not a `shown=NAME` block: the `/status` the examples' READMEs describe.
//! `examples/three-gateways-redis/README.md` (`# "nodes":3, the store and its breaker`) and
//! `examples/compose/README.md` (`# "kind":"redis", the breaker closed`), each from the
//! example's own config (its listeners, Redis and backend made the test's) with a real
//! `redis-server`. Which comments are checked elsewhere, and which are not, is said in
//! [`COMMENTS`].

use std::net::SocketAddr;
use std::time::Duration;

use http::Request;
use http_body_util::Empty;

use crate::common::process::{GatewayProcess, spawn_serve_with_env, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;

/// Every comment of an `sh` block in the book, the README and the examples' READMEs that
/// states an output, with where it is checked. [`every_output_comment_is_accounted_for`]
/// fails on one not listed here, so a new one says how it is checked or why not.
const COMMENTS: &[(&str, &str, &str)] = &[
    (
        "README.md",
        "# a stand-in backend on :3000 that answers 200 to anything",
        "tests/config/docs/shown/answers.rs: the security chapter's paths, behind it",
    ),
    (
        "examples/kubernetes/README.md",
        "# Redis, and the ConfigMap with [store] kind = \"redis\"",
        "tests/examples/kubernetes.rs (the manifests, read)",
    ),
    (
        "examples/three-gateways-redis/README.md",
        "# \"nodes\":3, the store and its breaker",
        "here: the_three_gateways_status",
    ),
    (
        "examples/compose/README.md",
        "# \"kind\":\"redis\", the breaker closed",
        "here: the_compose_status",
    ),
    (
        "examples/compose/README.md",
        "# whoami's echo, with RateLimit headers",
        "tests/examples/compose.rs",
    ),
    (
        "examples/api-tiers-jwt/README.md",
        "# 401, WWW-Authenticate: Bearer",
        "tests/examples/jwt.rs",
    ),
    (
        "examples/axum-layer/README.md",
        "# 200 with RateLimit-Policy and RateLimit",
        "tests/layer/example.rs",
    ),
    (
        "examples/axum-layer/README.md",
        "# the fourth: 429 with Retry-After",
        "tests/layer/example.rs",
    ),
    (
        "examples/axum-layer/README.md",
        "# tollgate_decisions_total by layer and outcome",
        "tests/layer/example.rs",
    ),
];

/// Words of a comment that state an output (a status, what a command prints or shows).
fn states_an_output(comment: &str) -> bool {
    let c = comment.to_lowercase();
    [
        "prints",
        "→",
        "\"",
        "200",
        "401",
        "429",
        "400",
        "503",
        "echo",
        "ratelimit",
        "_total",
    ]
    .iter()
    .any(|w| c.contains(w))
}

/// (file, comment) of every `sh` block line with a comment that states an output.
fn output_comments() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in super::markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file
            .strip_prefix(super::root())
            .unwrap()
            .display()
            .to_string();
        let mut in_sh = false;
        for line in text.lines() {
            let t = line.trim_start();
            if let Some(info) = t.strip_prefix("```") {
                in_sh = !in_sh && matches!(info.split(',').next(), Some("sh" | "bash"));
                continue;
            }
            if !in_sh {
                continue;
            }
            let comment = match t.find(" # ") {
                Some(at) => t[at + 1..].trim(),
                None if t.starts_with('#') => t,
                None => continue,
            };
            if states_an_output(comment) {
                out.push((name.clone(), comment.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_output_comment_is_accounted_for() {
    let found = output_comments();
    let mut problems = Vec::new();
    for (file, comment) in &found {
        if !COMMENTS.iter().any(|(f, c, _)| f == file && c == comment) {
            problems.push(format!(
                "{file}: `{comment}` states an output no test is named for: make it a \
                 `shown=NAME` block a test produces, or check it and list it in COMMENTS"
            ));
        }
    }
    for (file, comment, _) in COMMENTS {
        if !found.iter().any(|(f, c)| f == file && c == comment) {
            problems.push(format!(
                "COMMENTS lists `{comment}` of {file}, which is gone"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

const SECRETS: &[(&str, &str)] = &[
    (
        "TOLLGATE_ACCOUNT_HASH_KEY",
        "the docs' test account hash key",
    ),
    ("TOLLGATE_ADMIN_TOKEN", "the-docs-test-admin-token"),
];

/// `text` with each `from` replaced by its `to`; every `from` must be there.
fn rewrite(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (from, to) in pairs {
        assert!(out.contains(from), "the example no longer has {from:?}");
        out = out.replace(from, to);
    }
    out
}

/// `GET /status` of `admin`, with the examples' admin token.
async fn status(admin: SocketAddr) -> serde_json::Value {
    let req = Request::get(format!("http://{admin}/status"))
        .header("authorization", format!("Bearer {}", SECRETS[1].1))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    json(send_h1(admin, req).await).await
}

/// The store part of a `/status`: Redis, and its one breaker closed.
fn redis_with_a_closed_breaker(s: &serde_json::Value) -> bool {
    s["store"]["kind"] == "redis"
        && s["store"]["breaker_open"] == false
        && s["store"]["breakers"]
            .as_array()
            .is_some_and(|b| b.len() == 1 && b[0]["open"] == false)
}

/// `curl -s http://127.0.0.1:9911/status   # "nodes":3, the store and its breaker`: the
/// first of the three gateways counts three nodes in the store's membership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_gateways_status() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let dir = repo_path("examples/three-gateways-redis");
    let nodes: Vec<GatewayProcess> = (1..=3)
        .map(|i| {
            let cfg = rewrite(
                &std::fs::read_to_string(dir.join(format!("gw{i}.toml"))).unwrap(),
                &[
                    ("redis://127.0.0.1:6379", &redis.url()),
                    ("http://127.0.0.1:3000", &format!("http://{up}")),
                    (&format!("\"127.0.0.1:808{i}\""), "\"127.0.0.1:0\""),
                    (&format!("\"127.0.0.1:991{i}\""), "\"127.0.0.1:0\""),
                ],
            );
            spawn_serve_with_env(&temp_file(&format!("gw{i}.toml"), &cfg), SECRETS)
        })
        .collect();
    let admin = nodes[0].admin.expect("gw1 has an admin listener");
    // Each gateway registers in the store's membership as it starts; the first counts the
    // three once it has read the others' entries.
    eventually(
        "gw1's /status counts three nodes",
        Duration::from_secs(10),
        || async move { status(admin).await["nodes"] == 3 },
    )
    .await;
    let s = status(admin).await;
    assert!(redis_with_a_closed_breaker(&s), "{s:#}");
}

/// `curl -s -H "Authorization: Bearer $TOLLGATE_ADMIN_TOKEN" http://127.0.0.1:9901/status
/// # "kind":"redis", the breaker closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_status() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let cfg = rewrite(
        &std::fs::read_to_string(repo_path("examples/compose/tollgate.toml")).unwrap(),
        &[
            ("\"0.0.0.0:8080\"", "\"127.0.0.1:0\""),
            ("\"0.0.0.0:9901\"", "\"127.0.0.1:0\""),
            ("redis://redis:6379", &redis.url()),
            ("http://whoami:80", &format!("http://{up}")),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("tollgate.toml", &cfg), SECRETS);
    let s = status(gw.admin.expect("an admin listener")).await;
    assert!(redis_with_a_closed_breaker(&s), "{s:#}");
}
