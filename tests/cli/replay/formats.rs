//! The log formats `replay` reads (combined, JSON, gzip) and the counts it gives, malformed
//! lines included.

use super::*;

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
