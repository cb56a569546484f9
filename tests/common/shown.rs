//! Outputs the docs show, checked against what the binary prints (issue 52). A page marks a
//! fenced block as the output of something with `shown=NAME` in its info string
//! (```` ```text,shown=access-log-text ````); a test produces that output over real sockets
//! and hands it to [`assert_text`] or [`assert_json`] with the block's NAME.
//!
//! What a run varies is masked, on both sides, so the page can show a realistic value and
//! the test still compares everything else:
//! - in a shown text line, `[..]` matches any run of characters within the line (the
//!   trycmd/snapbox spelling);
//! - a test's [`Mask`]s rewrite both texts before the comparison (`request_id="[0-9a-f-]+"`
//!   becomes `request_id="<ID>"` in the page's line and in the produced one);
//! - in JSON, [`assert_json`] sets each masked pointer (`/span_seconds`) to `"<masked>"` on
//!   both sides, then compares the values (key order and layout are the page's choice).
//!
//! `PRINT_DOC_OUTPUT=1` prints each produced output, to paste into the page after a change.
//! Why by hand and not snapbox: the line matching is a dozen lines over `regex`, and the
//! blocks are found in Markdown with the pulldown-cmark the other docs tests already use.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use regex::Regex;

/// One marked block: where it is and what it says.
#[derive(Clone, Debug)]
pub struct Shown {
    pub name: String,
    /// `docs/src/operating.md:557`, for messages.
    pub place: String,
    pub text: String,
}

/// A rewrite applied to the shown and the produced text alike: `(pattern, replacement)`,
/// `regex` syntax (`$1` for a group).
pub type Mask<'a> = (&'a str, &'a str);

/// Masks most outputs need: UUIDs (request ids), RFC 3339 timestamps, loopback ports.
pub const ID: Mask = (
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "<ID>",
);
pub const TIMESTAMP: Mask = (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "<TIMESTAMP>");
pub const PORT: Mask = (r"127\.0\.0\.1:\d+", "127.0.0.1:<PORT>");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files a reader meets: the book, the README, the examples' READMEs.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    for dir in ["docs/src", "examples"] {
        walk(&root().join(dir), &mut out);
    }
    out.retain(|p| p.extension().is_some_and(|e| e == "md"));
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The `shown=NAME` of an info string (`text,shown=NAME`), if it has one.
fn shown_name(info: &str) -> Option<&str> {
    info.split([',', ' '])
        .find_map(|w| w.trim().strip_prefix("shown="))
}

/// Every marked block of every page, in page order.
pub fn all() -> Vec<Shown> {
    let mut out = Vec::new();
    for path in pages() {
        let text = std::fs::read_to_string(&path).unwrap();
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        let mut open: Option<Shown> = None;
        for (event, range) in Parser::new(&text).into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                    open = shown_name(&info).map(|name| Shown {
                        name: name.to_string(),
                        place: format!("{rel}:{}", text[..range.start].matches('\n').count() + 1),
                        text: String::new(),
                    });
                }
                Event::Text(t) => {
                    if let Some(b) = open.as_mut() {
                        b.text.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => out.extend(open.take()),
                _ => {}
            }
        }
    }
    out
}

/// The one block named `name`.
pub fn block(name: &str) -> Shown {
    let mut found: Vec<Shown> = all().into_iter().filter(|b| b.name == name).collect();
    assert_eq!(
        found.len(),
        1,
        "`shown={name}` marks {} blocks, not one: {:?}",
        found.len(),
        found.iter().map(|b| &b.place).collect::<Vec<_>>()
    );
    found.remove(0)
}

fn masked(text: &str, masks: &[Mask]) -> String {
    masks.iter().fold(text.to_string(), |t, (pattern, with)| {
        Regex::new(pattern)
            .unwrap_or_else(|e| panic!("mask `{pattern}`: {e}"))
            .replace_all(&t, *with)
            .into_owned()
    })
}

/// Whether produced `line` is what shown `pattern` says (`[..]`: any text).
fn line_matches(pattern: &str, line: &str) -> bool {
    if !pattern.contains("[..]") {
        return pattern == line;
    }
    let parts: Vec<String> = pattern.split("[..]").map(regex::escape).collect();
    Regex::new(&format!("^{}$", parts.join(".*?")))
        .unwrap()
        .is_match(line)
}

fn print(name: &str, produced: &str) {
    if std::env::var_os("PRINT_DOC_OUTPUT").is_some() {
        println!("---- shown={name}\n{produced}\n----");
    }
}

/// The block `name` shows `produced`, line for line, once `masks` have been applied to both
/// and `[..]` in a shown line matched any text. Trailing spaces and a final newline are
/// not compared.
pub fn assert_text(name: &str, produced: &str, masks: &[Mask]) {
    print(name, produced);
    let shown = block(name);
    let (want, got) = (masked(&shown.text, masks), masked(produced, masks));
    let want: Vec<&str> = want
        .trim_end_matches('\n')
        .lines()
        .map(str::trim_end)
        .collect();
    let got: Vec<&str> = got
        .trim_end_matches('\n')
        .lines()
        .map(str::trim_end)
        .collect();
    let same = want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| line_matches(w, g));
    assert!(
        same,
        "{} (shown={name}) is not what the binary printed.\n--- shown (masked)\n{}\n--- printed (masked)\n{}",
        shown.place,
        want.join("\n"),
        got.join("\n")
    );
}

/// The block `name` is the JSON value `produced`, once every pointer in `masked` (that the
/// value has) holds `"<masked>"` on both sides.
pub fn assert_json(name: &str, produced: &serde_json::Value, masked: &[&str]) {
    print(name, &serde_json::to_string_pretty(produced).unwrap());
    let shown = block(name);
    let mut want: serde_json::Value = serde_json::from_str(&shown.text)
        .unwrap_or_else(|e| panic!("{} (shown={name}) is not JSON: {e}", shown.place));
    let mut got = produced.clone();
    for pointer in masked {
        for v in [&mut want, &mut got] {
            if let Some(slot) = v.pointer_mut(pointer) {
                *slot = "<masked>".into();
            }
        }
    }
    assert!(
        want == got,
        "{} (shown={name}) is not what the binary answered.\n--- shown (masked)\n{}\n--- answered (masked)\n{}",
        shown.place,
        serde_json::to_string_pretty(&want).unwrap(),
        serde_json::to_string_pretty(&got).unwrap()
    );
}
