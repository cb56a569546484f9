//! The docs keep their promises: every link in the book (`docs/src/`), the README,
//! ARCHITECTURE.md and the examples' READMEs points at a file that exists and, when it names
//! an anchor, at a heading that exists; every ```toml block passes `tollgate check`; and
//! ARCHITECTURE.md names every source file and no path that does not exist (`architecture.rs`);
//! and every output block marked `shown=NAME` is what the binary prints (`shown/`); the
//! decision sites' table is what the simulator measures (`site_table.rs`); every row of the
//! reference's "`check` prints" tables is what check prints for a fixture (`check_tables.rs`);
//! a comment of an `sh` block that states an output is checked by a named test
//! (`sh_comments.rs`).
//!
//! Why a test and not only `mdbook build`: mdBook builds a book with a broken link without a
//! word, and the README and examples are outside the book. This reads the Markdown with
//! pulldown-cmark (the parser mdBook itself uses) and makes anchors as mdBook makes them, so
//! `cargo test` fails on a broken link on a machine without mdBook.
//!
//! TOML blocks: each is written to a file beside the Markdown it came from (so relative paths
//! in it resolve as a reader's copy would) and checked with the real binary. A block without a
//! `[server]` table is a fragment: `[server]` / `listen = "127.0.0.1:8080"` is put in front of
//! it first. A block whose info string is `toml,check-fails` must fail, and the ```text block
//! right after it lists lines that must each appear in check's output, where the block's
//! file is called `config.toml`. Every environment variable a block names (`*_env` keys) is
//! set to one value that check's rules accept (not for `check-fails` blocks, which may be
//! showing what an unset variable does). A block whose info string is `toml,rls-pending` uses
//! the `[rls]` section (the rate limit service, `envoy-rls.md`) before this build knows it:
//! it must fail with check's "unknown field `rls`", and once `[rls]` is known it fails the
//! test until the marker is dropped, so it is then checked like any other block.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

/// The value every `*_env` variable a block names gets: a reader sets their own secret, and
/// check's rules (an admin token of at least 16 printable characters, a secret of at least
/// 32 bytes) accept this one wherever a variable is asked for.
const ENV_VALUE: &str = "docs-secret-value-0123456789abcdef0123456789";

/// Names of the environment variables a config names in `*_env` keys, at any depth.
fn env_names(value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                match v {
                    toml::Value::String(name) if k.ends_with("_env") => out.push(name.clone()),
                    _ => env_names(v, out),
                }
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| env_names(v, out)),
        _ => {}
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file a reader of the repository meets.
fn markdown_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "certs/README.md",
        "benches/README.md",
    ]
    .iter()
    .map(|f| root().join(f))
    .collect();
    walk(&root().join("docs/src"), &mut files);
    walk(&root().join("examples"), &mut files);
    files.retain(|f| f.extension().is_some_and(|e| e == "md"));
    let mut files: Vec<PathBuf> = files.iter().map(|f| f.canonicalize().unwrap()).collect();
    files.sort();
    files.dedup();
    files
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// What one Markdown file holds that this test looks at.
#[derive(Default)]
struct Page {
    /// Heading ids as mdBook makes them, plus ids of explicit `<a id="…">` / `{#id}`.
    anchors: HashSet<String>,
    /// (line, destination) of every link and image.
    links: Vec<(usize, String)>,
    /// TOML blocks: line, text, and the lines a `check-fails` block expects (None: must pass).
    toml: Vec<TomlBlock>,
}

struct TomlBlock {
    line: usize,
    text: String,
    expect_failure: Option<Vec<String>>,
    /// `toml,rls-pending`: `[rls]` is not known yet (the module's doc).
    rls_pending: bool,
}

/// mdBook's `normalize_id`: letters, digits, `_` and `-` kept (lower-cased), whitespace
/// becomes `-`, anything else is dropped; a repeated id gets `-1`, `-2`, … .
fn heading_id(text: &str, seen: &mut HashMap<String, usize>) -> String {
    let base: String = text
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect();
    let n = seen.entry(base.clone()).or_insert(0);
    let id = if *n == 0 {
        base.clone()
    } else {
        format!("{base}-{n}")
    };
    *n += 1;
    id
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

fn read_page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut page = Page::default();
    let mut seen = HashMap::new();
    let mut heading: Option<String> = None;
    let mut block: Option<(usize, String, String)> = None; // line, info, text
    let mut awaiting_expectation = false;
    for (event, range) in Parser::new(&text).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some(String::new());
                if let Some(id) = id {
                    page.anchors.insert(id.to_string());
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let h = heading.take().unwrap_or_default();
                page.anchors.insert(heading_id(&h, &mut seen));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                if let Some((_, _, body)) = block.as_mut() {
                    body.push_str(&t);
                }
            }
            Event::Html(h) | Event::InlineHtml(h) => explicit_ids(&h, &mut page.anchors),
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links
                    .push((line_of(&text, range.start), dest_url.to_string()));
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                block = Some((line_of(&text, range.start), info, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => {
                let (line, info, body) = block.take().expect("a code block ends after it starts");
                let words: Vec<&str> = info.split([',', ' ']).map(str::trim).collect();
                if awaiting_expectation {
                    awaiting_expectation = false;
                    let last = page
                        .toml
                        .last_mut()
                        .expect("a check-fails block came first");
                    assert!(
                        words[0] == "text",
                        "{}:{line}: the block after a `toml,check-fails` block must be ```text with the expected message",
                        path.display()
                    );
                    last.expect_failure = Some(
                        body.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(String::from)
                            .collect(),
                    );
                } else if words[0] == "toml" {
                    let fails = words.contains(&"check-fails");
                    page.toml.push(TomlBlock {
                        line,
                        text: body,
                        expect_failure: fails.then(Vec::new),
                        rls_pending: words.contains(&"rls-pending"),
                    });
                    awaiting_expectation = fails;
                }
            }
            _ => {}
        }
    }
    assert!(
        !awaiting_expectation,
        "{}: a `toml,check-fails` block has no ```text block after it",
        path.display()
    );
    page
}

/// `<a id="x">`, `<span id='x'>`: anchors written by hand.
fn explicit_ids(html: &str, anchors: &mut HashSet<String>) {
    for part in html.split("id=").skip(1) {
        let quote = part.chars().next();
        if let Some(q @ ('"' | '\'')) = quote
            && let Some(end) = part[1..].find(q)
        {
            anchors.insert(part[1..1 + end].to_string());
        }
    }
}

fn is_external(dest: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|s| dest.starts_with(s))
}

mod architecture;
mod blocks;
mod check_tables;
mod commands;
mod envoy_yaml;
mod links;
mod problems;
mod sh_comments;
mod shown;
mod site_table;
