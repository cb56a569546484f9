//! The `RateLimit-Policy` and `RateLimit` headers the API chapter shows
//! (`docs/src/api-limits.md`): its config, served as the page says, asked as its `curl` does,
//! on a manual clock (the page's two requests come at once: on a busy machine, 50 ms
//! between them would refill `per_ip` by one).

use super::page_toml;
use crate::common::shown::assert_text;
use crate::common::*;

/// The answer's `ratelimit*` header lines, as `curl -si … | grep -i '^ratelimit'` prints them.
fn ratelimit_lines(answer: &str) -> String {
    let head = answer.split("\r\n\r\n").next().unwrap();
    head.lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("ratelimit"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_chapters_headers() {
    let up = echo_upstream().await;
    let toml = page_toml("docs/src/api-limits.md", 0)
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &format!("http://{up}"));
    let clock = tollgate::limit::clock::ManualClock::new();
    let gw = Gateway::start_with_clock(&toml, std::sync::Arc::new(clock)).await;
    let with_key = raw(
        gw.addrs.listen,
        "GET /api/hello HTTP/1.1\r\nHost: x\r\nx-api-key: demo-key\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_text("api-ratelimit-with-key", &ratelimit_lines(&with_key), &[]);
    let without = raw(
        gw.addrs.listen,
        "GET /api/hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_text("api-ratelimit-without-key", &ratelimit_lines(&without), &[]);
}
