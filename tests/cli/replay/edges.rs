//! Exit codes for unreadable logs and bad configs, `--plot`, and requests the limits see
//! differently: concurrency held for the logged duration, missing accounts, odd methods.

use super::*;

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

/// `on_missing_key` replays as the gateway answers (issue 35): logged requests without an
/// account are 401s under `deny`, one bucket under `shared`, unlimited under `skip`. A
/// policy keyed on a header (which a log does not carry) is replayed as `skip`, or every
/// line would lack it.
#[test]
fn requests_without_an_account_replay_as_on_missing_key_says() {
    let users = ["-", "-", "-", "-", "-", "u1"];
    let text: String = users
        .iter()
        .map(|u| {
            format!(
                "192.0.2.1 - {u} [{}] \"POST /login HTTP/1.1\" 200 1\n",
                clf_time(0)
            )
        })
        .collect();
    for (on, allowed, denied, unauthorized) in
        [("deny", 1, 0, 5), ("shared", 3, 3, 0), ("skip", 6, 0, 0)]
    {
        let dir = TempDir::new("missing-key");
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[account]\nheader = \"x-api-key\"\n\
             [policies.per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 2\n\
             period = \"1h\"\non_missing_key = \"{on}\"\n\
             [policies.per_tenant]\nkey = [\"header:x-tenant\"]\nalgorithm = \"gcra\"\nlimit = 1\n\
             period = \"1h\"\non_missing_key = \"deny\"\n\
             [upstreams.app]\nurls = [\"http://127.0.0.1:9\"]\n[[routes]]\nname = \"login\"\n\
             upstream = \"app\"\npolicies = [\"per_account\", \"per_tenant\"]\n"
        );
        let config = dir.file("config.toml", config.as_bytes());
        let log = dir.file("access.log", text.as_bytes());
        let v = replay_json(&config, &[], &[&log]);
        assert_eq!(
            (
                v["allowed"].as_u64(),
                v["denied"].as_u64(),
                v["unauthorized"].as_u64()
            ),
            (Some(allowed), Some(denied), Some(unauthorized)),
            "{on}: {v:#}"
        );
    }
}
