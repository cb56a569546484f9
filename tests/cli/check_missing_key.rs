//! `tollgate check` on `on_missing_key` (issue 35): a policy an enforcing route asks, keyed
//! on a part a request can lack, warns while the setting is unset (a request without the
//! part skips the policy); an explicit value, a shadow route or a shadow policy does not.
//! The exit code stays 0. A bad value is an error (fixtures/invalid).

use crate::check_messages::{check, config_file};

/// A 3/min per-account login policy on a `login` route of `mode`, with `extra` lines in the
/// policy.
fn login(mode: &str, extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:8080"
[account]
header = "x-username"
[policies.login_per_account]
key = ["account"]
algorithm = "gcra"
limit = 3
period = "1m"
{extra}
[policies.per_ip]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1s"
[upstreams.app]
urls = ["http://127.0.0.1:3000"]
[[routes]]
name = "login"
match = {{ path_prefix = "/login", methods = ["POST"] }}
upstream = "app"
policies = ["per_ip", "login_per_account"]
mode = "{mode}"
"#
    )
}

#[test]
fn an_enforced_policy_without_on_missing_key_warns_and_passes() {
    let file = config_file("missing-unset", &login("enforce", ""));
    let (code, stdout, stderr) = check(&file);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), format!("{}: ok", file.display()));
    assert_eq!(
        stderr.trim(),
        format!(
            "{}: warning: policies.login_per_account.on_missing_key: not set, so a request \
             without an account (the `x-username` header) skips this policy, unlimited by it \
             however many are sent; set \"deny\" or \"shared\", or \"skip\" to keep this",
            file.display()
        )
    );
}

#[test]
fn an_explicit_value_or_shadow_mode_does_not_warn() {
    for (name, mode, extra) in [
        ("skip", "enforce", r#"on_missing_key = "skip""#),
        ("shared", "enforce", r#"on_missing_key = "shared""#),
        ("deny", "enforce", r#"on_missing_key = "deny""#),
        ("shadow-route", "shadow", ""),
        ("off-route", "off", ""),
        ("shadow-policy", "enforce", r#"mode = "shadow""#),
    ] {
        let file = config_file(&format!("missing-{name}"), &login(mode, extra));
        let (code, _, stderr) = check(&file);
        assert_eq!((code, stderr.as_str()), (Some(0), ""), "{name}");
    }
}

/// Every key part that can be missing on the gateway warns, named as the client is told.
#[test]
fn each_part_kind_is_named_in_the_warning() {
    for (part, what) in [
        ("header:x-tenant", "the `x-tenant` header"),
        ("query:user", "the `user` query parameter"),
        ("cookie:session", "the `session` cookie"),
    ] {
        let text =
            login("enforce", "").replace(r#"key = ["account"]"#, &format!("key = [\"{part}\"]"));
        let file = config_file("missing-part", &text);
        let (code, _, stderr) = check(&file);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!("a request without {what} skips this policy")),
            "{part}: {stderr}"
        );
    }
    // `ip`, `route`, `method` and `path` are never missing on the gateway: no warning.
    let text = login("enforce", "").replace(
        r#"key = ["account"]"#,
        r#"key = ["ip", "route", "method", "path"]"#,
    );
    let (code, _, stderr) = check(&config_file("missing-never", &text));
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
}
