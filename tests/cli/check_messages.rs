//! What `tollgate check` says beyond "the first problem of each fixture": no follow-on
//! problem after a broken `[account]`, warnings that do not fail a valid config, algorithm
//! names as the config spells them, and `--help` that shows each subcommand its own flags.

use std::path::Path;

use crate::common::process::tollgate;
use crate::common::*;

/// `tollgate check -c file`: exit code, stdout, stderr (with the file's path as written).
pub(crate) fn check(file: &Path) -> (Option<i32>, String, String) {
    let out = tollgate()
        .args(["check", "-c"])
        .arg(file)
        .env_remove("TOLLGATE_TEST_SURELY_UNSET")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `text` in a fresh file under the target folder, named `name`.
pub(crate) fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("check_messages");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn an_unset_hash_key_env_is_the_only_problem_reported() {
    let file = repo_path("tests/common/fixtures/invalid/account_secret_env_missing_follow_on.toml");
    let (code, _, stderr) = check(&file);
    assert_eq!(code, Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one problem, no follow-on:\n{stderr}");
    assert!(
        lines[0].ends_with(
            "account.hash_key_env: environment variable `TOLLGATE_TEST_SURELY_UNSET` is not set"
        ),
        "{stderr}"
    );
}

#[test]
fn no_account_section_is_still_reported_when_there_is_none() {
    let file = config_file(
        "no-account",
        r#"[server]
listen = "127.0.0.1:8080"
[upstreams.app]
urls = ["http://127.0.0.1:3000"]
[policies.p]
key = ["account"]
algorithm = "gcra"
limit = 10
period = "1s"
[[routes]]
name = "api"
match = { path_prefix = "/" }
upstream = "app"
policies = ["p"]
"#,
    );
    let (code, _, stderr) = check(&file);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("policies.p.key: uses `account` but there is no [account] section"),
        "{stderr}"
    );
}

#[test]
fn a_policy_no_route_lists_is_a_warning_not_a_failure() {
    let file = config_file(
        "unlisted",
        r#"[server]
listen = "127.0.0.1:8080"
[upstreams.app]
urls = ["http://127.0.0.1:3000"]
[policies.listed]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1s"
[policies.forgotten]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1s"
[[routes]]
name = "api"
match = { path_prefix = "/" }
upstream = "app"
policies = ["listed"]
"#,
    );
    let (code, stdout, stderr) = check(&file);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), format!("{}: ok", file.display()));
    assert_eq!(
        stderr.trim(),
        format!(
            "{}: warning: policies.forgotten: no route lists it, so it limits nothing (add it to a route's `policies`)",
            file.display()
        )
    );
}

/// A policy a `[layers.NAME]` lists limits what that tower layer fronts: no warning
/// (issue 52: `check` said "no route lists it" of the axum example's two policies).
#[test]
fn the_axum_examples_layer_policies_are_no_forgotten_policies() {
    let (code, _, stderr) = check(&repo_path("examples/axum-layer/tollgate.toml"));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn the_shipped_config_has_no_warning() {
    let (code, _, stderr) = check(&repo_path("config.toml"));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn algorithm_names_are_spelled_as_in_the_config() {
    let file = repo_path("tests/common/fixtures/invalid/policy_burst_on_sliding_window.toml");
    let (code, _, stderr) = check(&file);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not used by sliding_window:"), "{stderr}");
    assert!(!stderr.contains("SlidingWindow"), "{stderr}");
}

fn help(args: &[&str]) -> String {
    let out = tollgate().args(args).arg("--help").output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn access_log_flags_are_serve_only_and_config_flags_are_described() {
    let serve = help(&["serve"]);
    assert!(serve.contains("--access-log-buffer"), "{serve}");
    assert!(serve.contains("--access-log-flush"), "{serve}");
    for sub in [
        "check",
        "reload",
        "demo",
        "replay",
        "simulate",
        "shadow-report",
    ] {
        let text = help(&[sub]);
        assert!(!text.contains("--access-log"), "{sub}:\n{text}");
    }
    assert!(!help(&[]).contains("--access-log"));
    for sub in ["check", "reload", "serve"] {
        let text = help(&[sub]);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("-c, --config <CONFIG>"))
            .unwrap_or_else(|| panic!("{sub}:\n{text}"));
        // The description is on the flag's line, or (long help) on the next.
        let described = lines[at].contains("Config file")
            || lines.get(at + 1).is_some_and(|l| l.contains("Config file"));
        assert!(described, "{sub}: `-c` undescribed:\n{text}");
    }
}

#[test]
fn access_log_flags_work_before_and_after_serve() {
    // Before the subcommand (as when they were global) and after it: both parse, and a bad
    // value fails naming the flag.
    for args in [
        &["--access-log-buffer", "lots", "serve", "-c", "unused.toml"][..],
        &["serve", "--access-log-buffer", "lots", "-c", "unused.toml"][..],
        &["--access-log-flush", "0s", "serve", "-c", "unused.toml"][..],
        &["serve", "--access-log-flush", "0s", "-c", "unused.toml"][..],
    ] {
        let out = tollgate().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--access-log-"), "{args:?}: {stderr}");
    }
    for args in [
        &["--access-log-buffer", "0", "serve", "-c", "missing.toml"][..],
        &["serve", "--access-log-buffer", "0", "-c", "missing.toml"][..],
    ] {
        let out = tollgate().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("missing.toml: cannot read"),
            "{args:?}: {stderr}"
        );
    }
    // A serve-only setting in the environment does not concern other subcommands.
    let out = tollgate()
        .args(["check", "-c"])
        .arg(repo_path("config.toml"))
        .env("TOLLGATE_ACCESS_LOG_BUFFER", "64k")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A URL listed twice is allowed (it gets two shares) but said: a weight says it better,
/// and its failures would be counted apart.
#[test]
fn a_repeated_upstream_url_is_a_warning() {
    let file = config_file(
        "repeated-url",
        "[server]\nlisten = \"127.0.0.1:8080\"\n[upstreams.app]\n\
         urls = [\"http://a:1\", \"http://b:2\", \"http://a:1\"]\n\
         [[routes]]\nname = \"all\"\nupstream = \"app\"\n",
    );
    let (code, _, stderr) = check(&file);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "{}: warning: upstreams.app.urls[2]: repeats urls[0], which so gets two shares of \
             the load and two ejection counts: give urls[0] a weight instead",
            file.display()
        )
    );
}
