//! `tollgate replay` as a user runs it: the built binary on small logs written to a temp
//! folder. Expected counts are worked out from the test config's limits (comments show how),
//! never copied from a run.
//!
//! The config is deliberately a fleet's: `per_ip` is `split` over 2 expected nodes and
//! `per_account` is `central` on a Redis nobody listens on, and the `api` route is in
//! shadow mode. Replay must decide both as one exact local state with the full limit, and
//! count what enforcing would deny; any of those not honoured changes the counts.

use std::io::Write;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::temp::TempDir;

/// `per_ip`: GCRA, 10 a minute, burst 10. From a fresh key, requests within one second
/// admit exactly the burst (⌊1 s · 10 / 60 s⌋ = 0 more).
const IP_BURST: u64 = 10;
/// `per_account`: sliding window, 3 a minute.
const ACCOUNT_LIMIT: u64 = 3;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[store]
kind = "redis"
urls = ["redis://127.0.0.1:1"]
[cluster]
expected_nodes = 2
[account]
header = "x-api-key"
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1m"
burst = 10
site = "split"
[policies.per_account]
key = ["account"]
algorithm = "sliding_window"
limit = 3
period = "1m"
site = "central"
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[[routes]]
name = "api"
match = { path_prefix = "/api" }
upstream = "app"
policies = ["per_ip", "per_account"]
mode = "shadow"
"#;

/// Requests of the sample: (second after 10:00:00 UTC, client, account, request target).
fn sample() -> Vec<(u32, String, Option<&'static str>, &'static str)> {
    let mut r = Vec::new();
    // One client, 30 requests in one second: the burst passes, the rest is denied.
    for _ in 0..30 {
        r.push((0, "203.0.113.9".to_owned(), None, "/api/items"));
    }
    // One account from five addresses (each address fresh for per_ip): the account's
    // limit passes, the rest is denied.
    for i in 1..=5 {
        r.push((1, format!("2001:db8:{i}::1"), Some("alice"), "/api/me"));
    }
    r.push((2, "192.0.2.1".to_owned(), None, "/nowhere")); // no route: 404
    r.push((2, "192.0.2.1".to_owned(), None, "/api/a%2Fb")); // refused path: 400
    // Five minutes later, a quiet client.
    for _ in 0..3 {
        r.push((300, "198.51.100.1".to_owned(), None, "/api/items"));
    }
    r
}

/// What the sample must give.
struct Expected {
    requests: u64,
    allowed: u64,
    denied: u64,
}

fn expected() -> Expected {
    let requests = 30 + 5 + 2 + 3;
    let allowed = IP_BURST + ACCOUNT_LIMIT + 3;
    let denied = (30 - IP_BURST) + (5 - ACCOUNT_LIMIT);
    assert_eq!(allowed + denied + 2, requests);
    Expected {
        requests,
        allowed,
        denied,
    }
}

fn clf_time(second: u32) -> String {
    format!(
        "30/Nov/2026:{:02}:{:02}:{:02} +0000",
        10 + second / 3600,
        second / 60 % 60,
        second % 60
    )
}

fn combined_log() -> String {
    sample()
        .into_iter()
        .map(|(s, ip, account, target)| {
            format!(
                "{ip} - {} [{}] \"GET {target} HTTP/1.1\" 200 10 \"-\" \"test\"\n",
                account.unwrap_or("-"),
                clf_time(s)
            )
        })
        .collect()
}

/// tollgate's JSON access log, with the account in a field named `field`, and a line of
/// another target in between.
fn json_log(field: &str) -> String {
    let mut out = String::from(
        "{\"timestamp\":\"2026-11-30T10:00:00.000001Z\",\"level\":\"INFO\",\"message\":\"tollgate listening\",\"target\":\"tollgate::server\"}\n",
    );
    for (s, ip, account, target) in sample() {
        let account = account.map_or(String::new(), |a| format!(",\"{field}\":\"{a}\""));
        out.push_str(&format!(
            "{{\"timestamp\":\"2026-11-30T{:02}:{:02}:{:02}.250000+00:00\",\"level\":\"INFO\",\"route\":\"api\",\"method\":\"GET\",\"path\":\"{target}\",\"status\":200,\"duration_ms\":0.5{account},\"client\":\"{ip}\",\"target\":\"tollgate::access\"}}\n",
            10 + s / 3600,
            s / 60 % 60,
            s % 60
        ));
    }
    out
}

fn replay(config: &Path, args: &[&str], logs: &[&Path]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "-c"])
        .arg(config)
        .args(args)
        .args(logs)
        .output()
        .expect("running tollgate replay")
}

/// `replay --json`, which must succeed; its parsed report.
fn replay_json(config: &Path, args: &[&str], logs: &[&Path]) -> Value {
    let out = replay(config, &[&["--json"], args].concat(), logs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

/// The sample's counts, per route and policy too.
fn assert_sample_counts(v: &Value) {
    let e = expected();
    assert_eq!(v["requests"], e.requests, "{v:#}");
    assert_eq!(v["allowed"], e.allowed, "{v:#}");
    assert_eq!(v["denied"], e.denied, "{v:#}");
    assert_eq!(
        (v["no_route"].as_u64(), v["bad_request"].as_u64()),
        (Some(1), Some(1))
    );
    let api = &v["routes"][0];
    assert_eq!(
        (api["route"].as_str(), api["mode"].as_str()),
        (Some("api"), Some("shadow"))
    );
    let per_ip = &api["policies"][0];
    assert_eq!(per_ip["policy"], "per_ip");
    // Everyone but the burst client's excess passes per_ip; denied requests stop there.
    assert_eq!(per_ip["denied"], 30 - IP_BURST, "{v:#}");
    assert_eq!(per_ip["allowed"], e.allowed + (5 - ACCOUNT_LIMIT), "{v:#}");
    let per_account = &api["policies"][1];
    assert_eq!(per_account["allowed"], ACCOUNT_LIMIT, "{v:#}");
    assert_eq!(per_account["denied"], 5 - ACCOUNT_LIMIT, "{v:#}");
}

mod edges;
mod formats;
