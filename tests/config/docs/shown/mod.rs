//! Every output the docs mark `shown=NAME` (a ```text or ```json block: a command's output,
//! an HTTP answer's headers, a log line, an admin endpoint's JSON) is produced here by the
//! real binary or a real gateway over real sockets and compared with the block, the parts a
//! run varies masked (issue 52). The marking and the mask syntax are `tests/common/shown.rs`'s;
//! each file here produces one page's outputs, and
//! `every_marked_block_has_a_test_and_every_test_a_block` keeps the names and the tests one
//! set, and `every_output_block_is_checked_by_some_test` fails on an output block no test
//! looks at. The shadow chapter's reports are produced in `tests/admin/doc_shadow.rs`, on
//! the limiter's manual clock.

use std::collections::BTreeSet;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use super::{line_of, markdown_files, problems::problem_shape, root};
use crate::common::shown;

mod admin;
mod answers;
mod commands;
mod demo;
mod fleet;
mod headers;
mod login_example;
mod logrotate;
mod logs;
mod proxy;

/// Every name a test here (or in `tests/admin/doc_shadow.rs`) produces.
const PRODUCED: &[&str] = &[
    // answers.rs
    "getting-started-429",
    "login-429",
    "login-six-attempts",
    "security-canonical-paths",
    "login-401",
    "api-429",
    "proxy-400-body",
    "proxy-429-body",
    // commands.rs
    "check-unlisted-policy",
    "check-skippable-policy",
    "check-problem-line",
    "check-ca-file-warning",
    "api-check-ok",
    "replay-missing-file",
    // demo.rs
    "demo",
    // fleet.rs
    "several-gateways-statuses",
    "jwt-example-plans",
    "owner-fleet-statuses",
    "status",
    // headers.rs
    "api-ratelimit-with-key",
    "api-ratelimit-without-key",
    // login_example.rs
    "login-example-lockout",
    "login-example-503",
    // logs.rs
    "login-access-log",
    "access-log-text",
    "access-log-json",
    "upstream-ejection-log",
    // proxy.rs
    "proxy-echo",
    // admin.rs
    "reload-output",
    "reload-refused",
    "limits-one-key",
    "limits-top",
    "activity",
    // logrotate.rs
    "logrotate",
    // tests/admin/doc_shadow.rs
    "shadow-first-report",
    "shadow-first-top",
    "shadow-steady-report",
];

#[test]
fn every_marked_block_has_a_test_and_every_test_a_block() {
    let marked: Vec<String> = shown::all().into_iter().map(|b| b.name).collect();
    let unique: BTreeSet<&str> = marked.iter().map(String::as_str).collect();
    assert_eq!(
        unique.len(),
        marked.len(),
        "a name marks two blocks: {marked:?}"
    );
    let produced: BTreeSet<&str> = PRODUCED.iter().copied().collect();
    let untested: Vec<&&str> = unique.difference(&produced).collect();
    let unshown: Vec<&&str> = produced.difference(&unique).collect();
    assert!(
        untested.is_empty() && unshown.is_empty(),
        "marked in the docs but produced by no test: {untested:?}; \
         produced but marked nowhere: {unshown:?}"
    );
}

/// Every ```text and ```json block of every page is checked by some test: marked
/// `shown=NAME` (above), the expected message of a `toml,check-fails` block
/// (`blocks.rs`), a `$ tollgate simulate` run (`commands.rs`), or a problem answer
/// (`problems.rs`). A new output shown without a test fails here, naming its place.
#[test]
fn every_output_block_is_checked_by_some_test() {
    let mut unchecked = Vec::new();
    let mut seen = 0;
    for path in markdown_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let place = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        // (line, info, body) of the block being read; the info string of the one before.
        let mut open: Option<(usize, String, String)> = None;
        let mut before = String::new();
        for (event, range) in Parser::new(&text).into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                    open = Some((line_of(&text, range.start), info.to_string(), String::new()));
                }
                Event::Text(t) => {
                    if let Some((_, _, body)) = open.as_mut() {
                        body.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    let Some((line, info, body)) = open.take() else {
                        continue;
                    };
                    let lang = info.split([',', ' ']).next().unwrap_or_default();
                    if matches!(lang, "text" | "json") {
                        seen += 1;
                        let checked = info.contains("shown=")
                            || before.contains("check-fails")
                            || body.starts_with("$ tollgate simulate")
                            || problem_shape(&body).is_some();
                        if !checked {
                            unchecked.push(format!("{place}:{line}"));
                        }
                    }
                    before = info;
                }
                _ => {}
            }
        }
    }
    assert!(
        seen > 50,
        "only {seen} output blocks: is the parser reading them?"
    );
    assert!(
        unchecked.is_empty(),
        "output blocks no test produces or checks (mark each `shown=NAME` and produce it in \
         tests/config/docs/shown/):\n{}",
        unchecked.join("\n")
    );
}

/// The `n`-th (from 0) ```toml block of `page` (a path from the repository root): a test
/// serves the config the page shows, not a copy of it.
fn page_toml(page: &str, n: usize) -> String {
    let text = std::fs::read_to_string(crate::common::repo_path(page)).unwrap();
    text.split("```toml")
        .skip(1)
        .nth(n)
        .and_then(|b| b.split_once('\n').map(|(_, rest)| rest))
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("{page} has no ```toml block {n}"))
        .to_string()
}
