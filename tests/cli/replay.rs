//! `tollgate replay` as a user runs it: the built binary on small logs written to a temp
//! folder. Expected counts are worked out from the test config's limits (comments show how),
//! never copied from a run.
//!
//! The config is deliberately a fleet's: `per_ip` is `split` over 2 expected nodes and
//! `per_account` is `central` on a Redis nobody listens on, and the `api` route is in
//! shadow mode. Replay must decide both as one exact local state with the full limit, and
//! count what enforcing would deny; any of those not honoured changes the counts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

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

struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "tollgate-replay-{what}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).expect("creating a temp dir");
        TempDir(path)
    }

    fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).expect("writing a temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

#[test]
fn a_combined_log_gives_the_limits_counts() {
    let dir = TempDir::new("combined");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let log = dir.file("access.log", combined_log().as_bytes());
    let v = replay_json(&config, &[], &[&log]);
    assert_sample_counts(&v);
    assert_eq!(v["files"][0]["format"], "combined");
    assert_eq!(v["files"][0]["gzip"], false);
    assert_eq!(v["malformed"], 0);
}

#[test]
fn busiest_minute_and_top_denied_keys_with_hashed_accounts() {
    let dir = TempDir::new("keys");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let log = dir.file("access.log", combined_log().as_bytes());
    let v = replay_json(&config, &[], &[&log]);
    let e = expected();
    let busiest = &v["busiest_minute"];
    assert_eq!(busiest["start"], "2026-11-30T10:00:00Z");
    assert_eq!(
        busiest["requests"],
        e.requests - 3,
        "all but the quiet client's"
    );
    assert_eq!(busiest["denied"], e.denied);
    let keys = v["top_denied_keys"].as_array().expect("a list");
    assert_eq!(keys.len(), 2, "{keys:#?}");
    assert_eq!(keys[0]["key"], "per_ip:ip:203.0.113.9");
    assert_eq!(keys[0]["denied"], 30 - IP_BURST);
    let account_key = keys[1]["key"].as_str().unwrap();
    let hash = account_key
        .strip_prefix("per_account:acct:")
        .expect("the account policy's key");
    assert!(
        hash.len() == 32 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash}"
    );
    assert_eq!(keys[1]["denied"], 5 - ACCOUNT_LIMIT);
    let table = replay(&config, &[], &[&log]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        !text.contains("alice"),
        "a raw account is never printed: {text}"
    );
    assert!(
        text.contains("busiest minute: 2026-11-30T10:00:00Z"),
        "{text}"
    );
}

#[test]
fn a_json_log_gives_the_same_counts_with_the_account_field() {
    let dir = TempDir::new("json");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let default_field = dir.file("default.json", json_log("account").as_bytes());
    let v = replay_json(&config, &[], &[&default_field]);
    assert_sample_counts(&v);
    assert_eq!(v["files"][0]["format"], "json");
    assert_eq!(
        v["files"][0]["skipped"], 1,
        "the listening line is no request"
    );
    let named = dir.file("named.json", json_log("user").as_bytes());
    assert_sample_counts(&replay_json(
        &config,
        &["--account-field", "user"],
        &[&named],
    ));
    // Without naming the field, no line has an account: per_account never applies.
    let unnamed = replay_json(&config, &[], &[&named]);
    assert_eq!(unnamed["routes"][0]["policies"][1]["allowed"], 0);
    assert_eq!(unnamed["denied"], 30 - IP_BURST);
}

#[test]
fn gzip_is_recognised_by_its_magic_bytes() {
    let dir = TempDir::new("gzip");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(combined_log().as_bytes()).unwrap();
    // No .gz suffix: rotated logs are often named access.log.1.
    let log = dir.file("access.log.1", &gz.finish().unwrap());
    let v = replay_json(&config, &[], &[&log]);
    assert_sample_counts(&v);
    assert_eq!(v["files"][0]["gzip"], true);
}

#[test]
fn malformed_lines_are_counted_skipped_and_the_first_five_shown() {
    let dir = TempDir::new("malformed");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let good = combined_log();
    let mut text = String::new();
    let mut bad_lines = Vec::new();
    for (n, line) in good.lines().enumerate() {
        text.push_str(line);
        text.push('\n');
        if n % 5 == 0 {
            // Junk, or a line stamped where nanoseconds since 1970 overflow an i64 (a corrupt
            // or hostile stamp: skipped, not wrapped to 1713 nor a panic).
            let bad = match n % 15 {
                0 => "this is not a log line".to_owned(),
                5 => line.replace("/2026:", "/2300:"),
                _ => line.replace("/2026:", "/1600:"),
            };
            text.push_str(&bad);
            text.push('\n');
            bad_lines.push(text.lines().count());
        }
    }
    let log = dir.file("mixed.log", text.as_bytes());
    let out = replay(&config, &["--json"], &[&log]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_sample_counts(&v);
    assert_eq!(v["malformed"], bad_lines.len());
    let name = log.display().to_string();
    for (i, n) in bad_lines.iter().enumerate() {
        let shown = stderr.contains(&format!("{name}:{n}: malformed line skipped"));
        assert_eq!(shown, i < 5, "line {n}: {stderr}");
    }
    assert_eq!(v["malformed_lines"][0]["line"], bad_lines[0]);
}

#[test]
fn an_unreadable_log_exits_2_naming_the_file_before_any_work() {
    let dir = TempDir::new("unreadable");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let good = dir.file("good.log", combined_log().as_bytes());
    let missing = dir.0.join("missing.log");
    let out = replay(&config, &[], &[&good, &missing]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no report for a half-read set of logs"
    );
    let out = replay(&config, &[], &[&dir.0]);
    assert_eq!(out.status.code(), Some(2), "a directory is no log");
}

#[test]
fn a_bad_config_exits_2_with_checks_message() {
    let dir = TempDir::new("badconfig");
    let config = dir.file(
        "config.toml",
        CONFIG.replace("limit = 3", "limit = 0").as_bytes(),
    );
    let log = dir.file("access.log", combined_log().as_bytes());
    let out = replay(&config, &[], &[&log]);
    assert_eq!(out.status.code(), Some(2));
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    assert!(!check.stderr.is_empty());
    assert_eq!(
        out.stderr, check.stderr,
        "the same message as `tollgate check`"
    );
}

#[test]
fn plot_writes_an_svg_naming_each_policy() {
    let dir = TempDir::new("plot");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let log = dir.file("access.log", combined_log().as_bytes());
    let svg_path = dir.0.join("denials.svg");
    let out = replay(&config, &["--plot", svg_path.to_str().unwrap()], &[&log]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&svg_path).expect("the plot exists");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    let denied_ip = format!("per_ip ({} denied)", 30 - IP_BURST);
    assert!(svg.contains(&denied_ip), "no `{denied_ip}` in the plot");
    assert!(svg.contains("per_account"));
}

#[test]
fn concurrency_cells_are_held_for_the_logged_duration() {
    let dir = TempDir::new("concurrency");
    let config = dir.file(
        "config.toml",
        b"[server]\nlisten = \"127.0.0.1:0\"\n[policies.in_flight]\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 2\n\
          [upstreams.app]\nurls = [\"http://127.0.0.1:9\"]\n[[routes]]\nname = \"all\"\nupstream = \"app\"\npolicies = [\"in_flight\"]\n",
    );
    // Three 5-second requests at once, then one 10 s later (when the first two ended),
    // and one out of order (stamped before it): decided at the clock's time.
    let line = |t: &str, ms: u32| {
        format!(
            "{{\"timestamp\":\"2026-11-30T10:00:{t}Z\",\"method\":\"GET\",\"path\":\"/\",\"duration_ms\":{ms},\"client\":\"192.0.2.7\",\"target\":\"tollgate::access\"}}\n"
        )
    };
    let text = [
        line("00", 5000),
        line("00", 5000),
        line("00", 5000),
        line("10", 1),
        line("09", 1),
    ]
    .concat();
    let log = dir.file("access.json", text.as_bytes());
    let v = replay_json(&config, &[], &[&log]);
    assert_eq!(
        (v["allowed"].as_u64(), v["denied"].as_u64()),
        (Some(4), Some(1)),
        "{v:#}"
    );
    assert_eq!(v["out_of_order"], 1);
}

#[test]
fn a_request_without_an_account_on_a_route_that_requires_one_is_a_401() {
    let dir = TempDir::new("require-account");
    let config = dir.file(
        "config.toml",
        b"[server]\nlisten = \"127.0.0.1:0\"\n[account]\nheader = \"x-api-key\"\n\
          [upstreams.app]\nurls = [\"http://127.0.0.1:9\"]\n[[routes]]\nname = \"private\"\nupstream = \"app\"\nrequire_account = true\n",
    );
    let users = ["u1", "-", "u2", "-", "-"];
    let text: String = users
        .iter()
        .map(|u| {
            format!(
                "192.0.2.1 - {u} [{}] \"GET / HTTP/1.1\" 200 1\n",
                clf_time(0)
            )
        })
        .collect();
    let log = dir.file("access.log", text.as_bytes());
    let v = replay_json(&config, &[], &[&log]);
    let without = users.iter().filter(|u| **u == "-").count();
    assert_eq!(v["unauthorized"], without, "{v:#}");
    assert_eq!(v["allowed"], users.len() - without, "{v:#}");
    assert_eq!(v["routes"][0]["unauthorized"], without);
}

/// As the gateway answers it: a method not in upper case is a 400, never a request that
/// another route (one without the method's limit) would take.
#[test]
fn a_method_not_in_upper_case_is_a_bad_request() {
    let dir = TempDir::new("method");
    let config = dir.file("config.toml", CONFIG.as_bytes());
    let line = |m: &str| {
        format!(
            "203.0.113.9 - - [{}] \"{m} /api/items HTTP/1.1\" 200 10 \"-\" \"test\"\n",
            clf_time(0)
        )
    };
    let log = dir.file(
        "m.log",
        [line("GET"), line("post"), line("Get")].concat().as_bytes(),
    );
    let v = replay_json(&config, &[], &[&log]);
    assert_eq!(
        (
            v["requests"].as_u64(),
            v["allowed"].as_u64(),
            v["bad_request"].as_u64()
        ),
        (Some(3), Some(1), Some(2)),
        "{v:#}"
    );
}
