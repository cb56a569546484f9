//! Every output the docs mark `shown=NAME` (a ```text or ```json block: a command's output,
//! an HTTP answer's headers, a log line, an admin endpoint's JSON) is produced here by the
//! real binary or a real gateway over real sockets and compared with the block, the parts a
//! run varies masked (issue 52). The marking and the mask syntax are `tests/common/shown.rs`'s;
//! each file here produces one page's outputs, and
//! `every_marked_block_has_a_test_and_every_test_a_block` keeps the names and the tests one
//! set. The shadow chapter's reports are produced in `tests/admin/doc_shadow.rs`, on the
//! limiter's manual clock.

use std::collections::BTreeSet;

use crate::common::shown;

mod admin;
mod commands;
mod demo;
mod fleet;
mod headers;
mod logrotate;
mod logs;
mod proxy;

/// Every name a test here (or in `tests/admin/doc_shadow.rs`) produces.
const PRODUCED: &[&str] = &[
    // commands.rs
    "check-unlisted-policy",
    "check-skippable-policy",
    "check-problem-line",
    "check-ca-file-warning",
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
