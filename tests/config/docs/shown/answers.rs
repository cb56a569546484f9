//! Whole answers the book shows, head and body, as `curl -si` prints them: the 429s of
//! getting started, the login chapter and the API chapter, the login chapter's 401 and its
//! loop's six statuses, the security chapter's canonical paths and the proxy chapter's 400
//! body. Each from the page's own config, in-process on a manual clock
//! (so a `Retry-After` is the same every run); what a run varies is masked: the request id
//! and the `date` header.

use std::sync::Arc;

use tollgate::limit::clock::ManualClock;

use super::page_toml;
use crate::common::shown::{ID, Mask, assert_json, assert_text};
use crate::common::*;

const DATE: Mask = (
    r"date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT",
    "date: <DATE>",
);

/// A gateway serving `toml` (a page's config, its listener and backend made the test's) on
/// `clock`.
async fn serve(toml: &str, clock: &ManualClock) -> Gateway {
    let up = echo_upstream().await;
    let toml = toml
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    Gateway::start_with_clock(&toml, Arc::new(clock.clone())).await
}

/// `head` sent on a fresh connection, kept alive as curl keeps it (so the answer has no
/// `connection: close`), and the answer read to its `content-length`, as `curl -si` prints it.
async fn curl_si(gw: &Gateway, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(gw.addrs.listen)
        .await
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).await.unwrap(),
            1,
            "the answer's head ends"
        );
        got.push(byte[0]);
    }
    let head = String::from_utf8(got).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |n| n.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).await.unwrap();
    format!("{head}{}", String::from_utf8(body).unwrap()).replace("\r\n", "\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getting_starteds_429() {
    // "With that route enforcing limit = 2, period = "1m", burst = 2, the third request
    // within the minute sees":
    let toml = page_toml("docs/src/getting-started.md", 0)
        .replace("limit = 20 ", "limit = 2 ")
        .replace("period = \"1s\"", "period = \"1m\"")
        .replace("burst = 10 ", "burst = 2 ")
        .replace("mode = \"shadow\"", "mode = \"enforce\"");
    let gw = serve(&toml, &ManualClock::new()).await;
    let get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for _ in 0..2 {
        assert_eq!(status(&curl_si(&gw, get).await), 200);
    }
    assert_text("getting-started-429", &curl_si(&gw, get).await, &[ID, DATE]);
}

fn login_attempt(account: Option<&str>) -> String {
    let account = account
        .map(|a| format!("x-api-key: {a}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n{account}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 21\r\n\
         \r\nuser=alice&password=x"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_chapters_429_and_401() {
    let clock = ManualClock::new();
    let gw = serve(&page_toml("docs/src/login.md", 0), &clock).await;
    // "make six attempts in a row from one address": the statuses the loop prints, then
    // the sixth answer whole.
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.push(curl_si(&gw, &login_attempt(None)).await);
    }
    let statuses: Vec<String> = answers.iter().map(|a| status(a).to_string()).collect();
    assert_text("login-six-attempts", &statuses.join(" "), &[]);
    assert_text("login-429", &answers[5], &[ID, DATE]);

    // "Per account, too": the policy added and listed on the route.
    let toml = format!(
        "{}\n{}",
        page_toml("docs/src/login.md", 0).replace(
            "policies = [\"login_per_ip\", \"login_everyone\"]",
            "policies = [\"login_per_ip\", \"login_per_account\", \"login_everyone\"]",
        ),
        page_toml("docs/src/login.md", 1)
    );
    let gw = serve(&toml, &clock).await;
    assert_text(
        "login-401",
        &curl_si(&gw, &login_attempt(None)).await,
        &[ID, DATE],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_chapters_429() {
    let clock = ManualClock::new();
    let gw = serve(&page_toml("docs/src/api-limits.md", 0), &clock).await;
    // "25 requests with the same key in quick succession": 10 ms apart.
    let get = "GET /api/hello HTTP/1.1\r\nHost: x\r\nx-api-key: demo-key\r\n\r\n";
    let mut refused = None;
    for _ in 0..25 {
        let answer = curl_si(&gw, get).await;
        if refused.is_none() && status(&answer) == 429 {
            refused = Some(answer);
        }
        clock.advance(std::time::Duration::from_millis(10));
    }
    let refused = refused.expect("a request past the burst of 20 is refused");
    assert_text("api-429", &refused, &[ID, DATE]);
}

/// The security chapter's paths that all reach its `login` route (each line as its curl loop
/// prints it: the path sent as is, the status), then the body of the request refused for
/// its `;`, as `curl -s` prints it; behind the page's `examples/echo-backend.py`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_security_chapters_canonical_paths() {
    // The page's backend: `examples/echo-backend.py`, 200 to anything.
    let backend =
        crate::common::backend::ExampleBackend::start(&repo_path("examples/echo-backend.py"));
    let toml = page_toml("docs/src/security.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{}", backend.addr));
    let gw = Gateway::start_with_clock(&toml, Arc::new(ManualClock::new())).await;
    let mut printed = String::new();
    for p in [
        "//api/login",
        "/api//login",
        "/api/./login",
        "/x/../api/login",
        "/api/%6Cogin",
        "/%61pi/login",
        "/api/%2e/login",
    ] {
        let answer = curl_si(&gw, &format!("POST {p} HTTP/1.1\r\nHost: x\r\n\r\n")).await;
        printed.push_str(&format!("{p} {}\n", status(&answer)));
    }
    let refused = curl_si(&gw, "POST /api;/login HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status(&refused), 400, "{refused}");
    printed.push_str(refused.split_once("\n\n").unwrap().1);
    assert_text("security-canonical-paths", &printed, &[ID]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_chapters_400_body() {
    let gw = serve(&page_toml("docs/src/proxy.md", 0), &ManualClock::new()).await;
    let answer = raw(
        gw.addrs.listen,
        "GET /a;b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&answer), 400, "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_json("proxy-400-body", &body, &["/request_id"]);
}

/// The proxy chapter's example of a problem body carrying the request id: a 429 of a
/// `per_ip` policy at one request a minute (the page's config has no policy: this one is
/// added, in front of its route).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_chapters_429_body() {
    let toml = page_toml("docs/src/proxy.md", 0)
        .replace(
            "[[routes]]",
            "[policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1m\"\n\n[[routes]]",
        )
        .replace("upstream = \"app\"\n", "upstream = \"app\"\npolicies = [\"per_ip\"]\n");
    let gw = serve(&toml, &ManualClock::new()).await;
    let get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(status(&curl_si(&gw, get).await), 200);
    let answer = curl_si(&gw, get).await;
    assert_eq!(status(&answer), 429, "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(answer.split("\n\n").nth(1).unwrap()).unwrap();
    assert_json("proxy-429-body", &body, &["/request_id"]);
}
