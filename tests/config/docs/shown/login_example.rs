//! The login example's README (`examples/login/`): five wrong passwords, the sixth refused,
//! the right one locked out too, and the fail-closed 503 once Redis is gone; from the
//! example's own config, backend and a real `redis-server`, as `curl` prints them.

use crate::common::backend::ExampleBackend;
use crate::common::process::{spawn_serve_with_env, temp_file};
use crate::common::redis::RedisServer;
use crate::common::shown::{ID, Mask, assert_text};
use crate::common::*;

/// `curl -si -H 'X-Login-User: USER' -d 'username=USER&password=PASSWORD'`, its answer.
async fn login(addr: std::net::SocketAddr, user: &str, password: &str) -> String {
    let form = format!("username={user}&password={password}");
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\
         X-Login-User: {user}\r\nContent-Length: {}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    let answer = raw(addr, &head).await.replace("\r\n", "\n");
    // Sent with `Connection: close` to read it to its end; curl keeps the connection.
    answer.replacen("connection: close\n", "", 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_examples_lockout_and_fail_closed() {
    let mut redis = RedisServer::start();
    let backend = ExampleBackend::start(&repo_path("examples/login/backend.py"));
    let toml = std::fs::read_to_string(repo_path("examples/login/tollgate.toml"))
        .unwrap()
        .replace("redis://127.0.0.1:6379", &redis.url())
        .replace("http://127.0.0.1:3000", &format!("http://{}", backend.addr))
        .replace("\"127.0.0.1:8080\"", "\"127.0.0.1:0\"")
        .replace("\"127.0.0.1:9901\"", "\"127.0.0.1:0\"")
        // A 10 ms store timeout on a busy test machine would turn a slow Redis into the
        // fail-closed 503 the first block does not show.
        .replace("timeout = \"10ms\"", "timeout = \"1s\"");
    let secrets = [(
        "TOLLGATE_ACCOUNT_HASH_KEY",
        "the docs' test account hash key",
    )];
    let gw = spawn_serve_with_env(&temp_file("login.toml", &toml), &secrets);

    let mut printed = String::new();
    for i in 1..=6 {
        let answer = login(gw.addr, "alice", &format!("guess{i}")).await;
        printed.push_str(&format!("{}\n", status(&answer)));
    }
    printed.push_str(&login(gw.addr, "alice", "correct-horse").await);
    let masks: &[Mask] = &[
        ID,
        (
            r"date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT",
            "date: <DATE>",
        ),
        // The account's id is derived from the reader's own hash key.
        ("pk=:[A-Za-z0-9+/=]+:", "pk=:<PK>:"),
        // One cell per 180 s, less the time the attempts took.
        (
            r#"(retry-after: |t=|retry in |"retry_after":)1[78]\d"#,
            "${1}<S>",
        ),
    ];
    assert_text("login-example-lockout", &printed, masks);

    redis.stop();
    let answer = login(gw.addr, "carol", "x").await;
    assert_text("login-example-503", &answer, masks);
}
