//! What `tollgate check` and `tollgate replay` print, as the reference and the shadow
//! chapter show it: each run in a fresh folder on a file called `config.toml`, as a
//! reader's copy is, so the messages name the file as the page does.

use std::process::{Command, Output};

use crate::common::process::tollgate;
use crate::common::shown::{Mask, assert_text};
use crate::common::temp::TempDir;

/// `tollgate ARGS` in `dir`: stderr, then stdout (check's `ok` comes last).
fn run(dir: &TempDir, args: &[&str]) -> (Output, String) {
    let out = tollgate().args(args).current_dir(&dir.0).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    (out, said)
}

fn check(config: &str) -> (Output, String) {
    let dir = TempDir::new("shown-check");
    dir.file("config.toml", config.as_bytes());
    run(&dir, &["check", "-c", "config.toml"])
}

const SERVER: &str = "[server]\nlisten = \"127.0.0.1:8080\"\n\
    [upstreams.app]\nurls = [\"http://127.0.0.1:3000\"]\n";

#[test]
fn a_policy_no_route_lists() {
    let (out, said) = check(&format!(
        "{SERVER}[policies.login_per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 5\n\
         period = \"1m\"\n\
         [account]\nheader = \"x-username\"\n\
         [policies.login_per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 5\n\
         period = \"1m\"\n\
         [[routes]]\nname = \"login\"\nupstream = \"app\"\npolicies = [\"login_per_ip\"]\n"
    ));
    assert!(out.status.success(), "{said}");
    assert_text("check-unlisted-policy", &said, &[]);
}

#[test]
fn a_policy_a_request_can_skip() {
    let (out, said) = check(&format!(
        "{SERVER}[account]\nheader = \"x-username\"\n\
         [policies.login_per_account]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nlimit = 5\n\
         period = \"1m\"\n\
         [[routes]]\nname = \"login\"\nupstream = \"app\"\npolicies = [\"login_per_account\"]\n"
    ));
    assert!(out.status.success(), "{said}");
    assert_text("check-skippable-policy", &said, &[]);
}

/// The reference's `FILE: KEY: what is wrong` is the shape of every line of a failed check.
#[test]
fn every_problem_line_is_file_key_what() {
    let (out, said) = check(
        "[server]\nlisten = \"nowhere\"\n[upstreams.app]\nurls = [\"ftp://x\"]\n\
         [[routes]]\nname = \"r\"\nupstream = \"app\"\n",
    );
    assert_eq!(out.status.code(), Some(2), "{said}");
    let line: Mask = (
        r"(?m)^(config\.toml|FILE): ([a-z_][a-z0-9_.\[\]]*|KEY): .+$",
        "FILE: KEY: what is wrong",
    );
    for problem in said.lines() {
        assert_text("check-problem-line", problem, &[line]);
    }
    assert!(
        said.lines().count() >= 2,
        "two problems, one line each: {said}"
    );
}

/// The reference's warning for a self-signed CA as `ca_file`, made by the command the page
/// gives for it.
#[test]
fn a_self_signed_ca_as_ca_file() {
    let dir = TempDir::new("shown-ca");
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem",
        ])
        .args([
            "-out",
            "c.pem",
            "-days",
            "30",
            "-subj",
            "/CN=localhost",
            "-addext",
        ])
        .arg("subjectAltName=DNS:localhost,IP:127.0.0.1")
        .current_dir(&dir.0)
        .output()
        .expect("the openssl command line (scripts/test.sh installs it)");
    assert!(made.status.success(), "{made:?}");
    let ca = dir.0.join("c.pem");
    dir.file(
        "config.toml",
        format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\n[upstreams.app]\n\
             urls = [\"https://localhost:8443\"]\nca_file = \"{}\"\n",
            ca.display()
        )
        .as_bytes(),
    );
    let (out, said) = run(&dir, &["check", "-c", "config.toml"]);
    assert!(out.status.success(), "{said}");
    let warning = said.lines().next().unwrap_or_default();
    // The page's path is a reader's (`/etc/tollgate/c.pem`); the test's is a temp folder.
    assert_text(
        "check-ca-file-warning",
        warning,
        &[(r"`/[^`]*/c\.pem`", "`…/c.pem`")],
    );
}

/// The API chapter's config, saved as `api.toml`, passes: `check` says so on stdout.
#[test]
fn the_api_chapters_config_is_ok() {
    let dir = TempDir::new("shown-check");
    dir.file(
        "api.toml",
        super::page_toml("docs/src/api-limits.md", 0).as_bytes(),
    );
    let (out, said) = run(&dir, &["check", "-c", "api.toml"]);
    assert!(out.status.success(), "{said}");
    assert_text("api-check-ok", &said, &[]);
}

#[test]
fn replay_of_a_missing_file() {
    let dir = TempDir::new("shown-replay");
    dir.file(
        "config.toml",
        format!("{SERVER}[[routes]]\nname = \"r\"\nupstream = \"app\"\n").as_bytes(),
    );
    let command = "tollgate replay -c config.toml /nonexistent.log";
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let (out, said) = run(&dir, &args);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert_text("replay-missing-file", &format!("$ {command}\n{said}"), &[]);
}
