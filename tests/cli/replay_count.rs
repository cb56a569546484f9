//! `tollgate replay` and `count = { statuses }`: a replayed request settles on its logged
//! status as the gateway settles on the upstream's, in both log formats; a status the log
//! does not give (or not as a number) keeps the spend.

use serde_json::Value;

/// Failed logins only: 2 an hour per client.
const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[policies.login]
key = ["ip"]
algorithm = "gcra"
limit = 2
period = "1h"
count = { statuses = [401, 403] }
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[[routes]]
name = "login"
match = { path_prefix = "/login" }
upstream = "app"
policies = ["login"]
"#;

/// One client's logins, one a second: five good ones, then failures.
const STATUSES: [u16; 9] = [200, 200, 302, 200, 200, 401, 403, 401, 401];

fn combined() -> String {
    STATUSES
        .iter()
        .enumerate()
        .map(|(s, st)| {
            format!(
                "192.0.2.7 - - [30/Nov/2026:10:00:{s:02} +0000] \"POST /login HTTP/1.1\" {st} 5 \"-\" \"t\"\n"
            )
        })
        .collect()
}

/// tollgate's JSON log; `status` as `status(code)` writes it.
fn json(status: impl Fn(u16) -> String) -> String {
    STATUSES
        .iter()
        .enumerate()
        .map(|(s, &st)| {
            format!(
                "{{\"timestamp\":\"2026-11-30T10:00:{s:02}.000000Z\",\"level\":\"INFO\",\"route\":\"login\",\"method\":\"POST\",\"path\":\"/login\",\"status\":{},\"duration_ms\":0.5,\"client\":\"192.0.2.7\",\"target\":\"tollgate::access\"}}\n",
                status(st)
            )
        })
        .collect()
}

fn replay(log: &str, name: &str) -> Value {
    let config = crate::common::process::temp_file("replay-count.toml", CONFIG);
    let log = crate::common::process::temp_file(name, log);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--json", "-c"])
        .arg(&config)
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn allowed_denied(v: &Value) -> (u64, u64) {
    (
        v["allowed"].as_u64().unwrap(),
        v["denied"].as_u64().unwrap(),
    )
}

#[test]
fn failed_logins_spend_and_good_ones_give_back_in_both_formats() {
    // The five good logins give their cells back; 401, 403 spend the two; the next two
    // failures are denied.
    assert_eq!(allowed_denied(&replay(&combined(), "count.log")), (7, 2));
    let v = replay(&json(|s| s.to_string()), "count.json");
    assert_eq!(allowed_denied(&v), (7, 2), "{v:#}");
}

#[test]
fn a_status_that_is_not_a_number_keeps_the_spend() {
    // As a string the status is none: every login spends, so only the first two pass.
    let v = replay(&json(|s| format!("\"{s}\"")), "count-str.json");
    assert_eq!(allowed_denied(&v), (2, 7), "{v:#}");
}
