//! Log lines the book shows: the login chapter's refused attempt (`docs/src/login.md`) and
//! the two formats of the operating chapter (`docs/src/operating.md`), written by a
//! `tollgate serve` process serving the page's own config, each access line at once
//! (`TOLLGATE_ACCESS_LOG_BUFFER=0`); and the upstream reference's ejection lines
//! (`docs/src/reference/upstreams.md`).

use std::net::SocketAddr;

use super::page_toml;
use crate::common::process::{LoggedServe, temp_file};
use crate::common::shown::{ID, Mask, TIMESTAMP, assert_text};
use crate::common::*;

/// What a run varies in an access line: when, how long, which id.
const MASKS: &[Mask] = &[
    TIMESTAMP,
    ID,
    (r"duration_ms(=|\x22:)[0-9.]+", "duration_ms${1}<MS>"),
    (r"duration_us(=|\x22:)\d+", "duration_us${1}<US>"),
];

/// An upstream answering 404 to everything (the operating chapter's `/x`).
async fn not_found() -> SocketAddr {
    upstream(|_req| async {
        let mut r = http::Response::new(body("not found"));
        *r.status_mut() = http::StatusCode::NOT_FOUND;
        r
    })
    .await
}

fn serve(toml: &str, env: &[(&str, &str)]) -> LoggedServe {
    let mut env = env.to_vec();
    env.extend([("TOLLGATE_ACCESS_LOG_BUFFER", "0"), ("RUST_LOG", "info")]);
    LoggedServe::start(&temp_file("shown.toml", toml), &env)
}

/// The access lines among everything the process wrote.
fn access_lines(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| l.contains("tollgate::access"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_chapters_refused_attempt() {
    let up = echo_upstream().await;
    let toml = page_toml("docs/src/login.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    let gw = serve(&toml, &[]);
    let attempt = "POST /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n\
                   Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 21\r\n\
                   Connection: close\r\n\r\nuser=alice&password=x";
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(status(&raw(gw.addr, attempt).await));
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    let lines = access_lines(gw.stop());
    // The sliding window's wait depends on where in the clock's minute the attempts fell.
    let retry: Mask = (r"retry_after=\d+", "retry_after=<S>");
    let mut masks = MASKS.to_vec();
    masks.push(retry);
    assert_text("login-access-log", lines.last().unwrap(), &masks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operating_chapters_two_formats() {
    const TOKEN: (&str, &str) = ("TOLLGATE_DOCS_ADMIN_TOKEN", "docs-admin-token-0123456789");
    let toml = page_toml("docs/src/operating.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9901", "127.0.0.1:0");

    // Text: a request the backend answers 404.
    let up = not_found().await;
    let gw = serve(
        &toml.replace("http://127.0.0.1:3000", &format!("http://{up}")),
        &[TOKEN],
    );
    assert_eq!(
        status(
            &raw(
                gw.addr,
                "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .await
        ),
        404
    );
    let text = access_lines(gw.stop());
    assert_text("access-log-text", &text[0], MASKS);

    // JSON: the request past the burst of 10.
    let up = echo_upstream().await;
    let gw = serve(
        &toml.replace("http://127.0.0.1:3000", &format!("http://{up}")),
        &[TOKEN, ("TOLLGATE_LOG_FORMAT", "json")],
    );
    let get = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // Until one is refused: the burst of 10 is spent faster than 20 a second refills it.
    let mut last = 0;
    for _ in 0..100 {
        last = status(&raw(gw.addr, get).await);
        if last == 429 {
            break;
        }
    }
    assert_eq!(last, 429, "a hundred requests in a row never refused");
    let json = access_lines(gw.stop());
    assert_text("access-log-json", json.last().unwrap(), MASKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_references_ejection_lines() {
    // Two URLs that refuse connections, at most half of them out: one request.
    let (a, b) = (dead_port().await, dead_port().await);
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.app]\nurls = [\"http://{a}\", \"http://{b}\"]\n\
         outlier = {{ max_ejected_percent = 50 }}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n"
    );
    let gw = serve(&toml, &[]);
    let answer = raw(
        gw.addr,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&answer), 502, "{answer}");
    // The ejected URL comes back when its base_ejection (2 s by default) is up.
    eventually(
        "back from ejection",
        std::time::Duration::from_secs(4),
        || {
            let back = gw
                .lines_so_far()
                .iter()
                .any(|l| l.contains("back from ejection"));
            async move { back }
        },
    )
    .await;
    let outlier: Vec<String> = gw
        .stop()
        .into_iter()
        .filter(|l| l.contains("tollgate::proxy::upstream::outlier"))
        .collect();
    // Which of the two URLs the request tried first is the balancer's pick.
    let url: Mask = (r"url=http://[0-9.]+:\d+", "url=<URL>");
    assert_text(
        "upstream-ejection-log",
        &outlier.join("\n"),
        &[TIMESTAMP, url],
    );
}
