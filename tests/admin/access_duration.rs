//! The access log's `duration_ms` is milliseconds to the microsecond, printed as such
//! (`0.316`, never the float noise `0.31612300000000004` of seconds × 1000), in the text and
//! the JSON format, and agrees with `duration_us`.

use std::net::SocketAddr;

use crate::common::process::{LoggedServe, temp_file};
use crate::common::*;

/// `tollgate serve` in `format`, `n` requests, SIGTERM: every access line it wrote.
async fn access_lines(format: &str, n: usize) -> Vec<String> {
    served(format, n).await.0
}

/// As [`access_lines`], with the `x-request-id` each response came back with, in order.
pub(crate) async fn served(format: &str, n: usize) -> (Vec<String>, Vec<String>) {
    let (lines, ids) = logged(echo_upstream().await, format, n, 200).await;
    let access: Vec<String> = lines
        .into_iter()
        .filter(|l| l.contains("tollgate::access"))
        .collect();
    assert_eq!(access.len(), n, "{access:?}");
    (access, ids)
}

/// `tollgate serve` in `format` in front of `up`, `n` requests answered `status`, SIGTERM:
/// every line it logged, and the `x-request-id` each response came back with, in order.
pub(crate) async fn logged(
    up: SocketAddr,
    format: &str,
    n: usize,
    status: u16,
) -> (Vec<String>, Vec<String>) {
    let toml = config(up, "", "");
    let path = temp_file("duration.toml", &toml);
    let gw = LoggedServe::start(
        &path,
        &[
            ("RUST_LOG", "info"),
            ("TOLLGATE_LOG_FORMAT", format),
            ("TOLLGATE_WORKERS", "1"),
            ("TOLLGATE_ACCESS_LOG_BUFFER", "0"),
            ("NO_COLOR", "1"),
        ],
    );
    let addr = gw.addr;
    let mut ids = Vec::new();
    for i in 0..n {
        let resp = send_h1(addr, get(&format!("http://{addr}/r{i}"))).await;
        assert_eq!(resp.status(), status);
        ids.push(resp.headers()["x-request-id"].to_str().unwrap().to_owned());
        text(resp).await;
    }
    let lines = gw.stop();
    (lines, ids)
}

/// The text after `name` up to the next `,`, `}` or space.
pub(crate) fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let rest = line
        .split_once(name)
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        .1;
    let end = rest.find([',', '}', ' ']).unwrap_or(rest.len());
    &rest[..end]
}

/// `ms` is digits with at most 3 decimals, and equals `us` / 1000.
fn assert_rounded(ms: &str, us: &str, line: &str) {
    let (whole, decimals) = ms.split_once('.').unwrap_or((ms, ""));
    assert!(
        !whole.is_empty() && whole.bytes().all(|b| b.is_ascii_digit()),
        "{line}"
    );
    assert!(
        decimals.len() <= 3 && decimals.bytes().all(|b| b.is_ascii_digit()),
        "duration_ms `{ms}` is not to the microsecond: {line}"
    );
    let us: u64 = us.parse().unwrap_or_else(|_| panic!("duration_us: {line}"));
    let ms: f64 = ms.parse().unwrap();
    assert_eq!(ms, us as f64 / 1e3, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_duration_ms_is_rounded_to_the_microsecond() {
    for line in access_lines("json", 20).await {
        let ms = field(&line, "\"duration_ms\":");
        let us = field(&line, "\"duration_us\":");
        assert_rounded(ms, us, &line);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_duration_ms_is_rounded_to_the_microsecond() {
    for line in access_lines("text", 20).await {
        let ms = field(&line, "duration_ms=");
        let us = field(&line, "duration_us=");
        assert_rounded(ms, us, &line);
    }
}
